"""Writes requirements.txt: the runtime install (pyproject.toml's ``dependencies`` and
every package they bring) locked, each at one version, for Linux x86_64 and Python 3.12.

    python .ci/lock.py                          # after a change to pyproject's dependencies
    python .ci/lock.py --upgrade-package NAME   # other arguments go to uv pip compile

uv (pinned in the [dev] extra) resolves them against the package index; the versions
already in requirements.txt are kept wherever they still fit. The header records a
digest of pyproject's dependency list, which tests/test_packaging.py compares (offline)
with the list as it is now.
"""

import hashlib
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.txt"
PLATFORM = "x86_64-unknown-linux-gnu"
PYTHON = "3.12"
DIGEST_PREFIX = "# pyproject.toml dependencies sha256: "
HEADER = f"""\
# The runtime install, locked: every package that `pip install -e .` brings, each at one
# version (Linux x86_64, Python {PYTHON}). Install with
#     pip install -r requirements.txt && pip install --no-deps -e .
# Generated from pyproject.toml by `python .ci/lock.py` (uv pip compile); do not edit.
"""


def dependencies_digest(pyproject_text: str) -> str:
    """sha256 of pyproject's ``[project] dependencies``, one requirement a line."""
    dependencies = tomllib.loads(pyproject_text)["project"]["dependencies"]
    return hashlib.sha256("\n".join(dependencies).encode()).hexdigest()


def main(uv_arguments: list[str]) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "compile",
            "pyproject.toml",
            "--python-version",
            PYTHON,
            "--python-platform",
            PLATFORM,
            "--no-header",
            "--output-file",
            str(LOCK),
            *uv_arguments,
        ],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,  # uv prints the file it writes as well
    )
    digest = dependencies_digest((ROOT / "pyproject.toml").read_text())
    LOCK.write_text(HEADER + DIGEST_PREFIX + digest + "\n" + LOCK.read_text())


if __name__ == "__main__":
    main(sys.argv[1:])
