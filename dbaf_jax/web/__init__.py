"""A local web page to anonymize and recover photos and clips in a browser.

    python -m dbaf_jax.web --model DIR [--port N]

- `jobs`: a job's uploads, results and bounds; `store`: the private folder, the jobs of
  each session and their deletion.
- `runs`: a job's files through the runners the commands use (no anonymization of its own).
- `server`: the Starlette app and its API; static/: the page (plain HTML, CSS and JS).
- `serve`: the command's arguments, the model loading and uvicorn.

The web framework is an optional dependency (the `web` extra of pyproject.toml), so `main` imports
it only when the command runs. docs/web.md says what the page does and why it is built so.
"""

from __future__ import annotations

from typing import Sequence

LAYER = "interfaces"


def main(argv: Sequence[str] | None = None) -> None:
    from dbaf_jax.web import serve  # Starlette and uvicorn: only when the page is served

    return serve.main(argv)
