"""The console scripts: ``dbaf-NAME`` runs ``python -m dbaf_jax.commands.NAME``
(pyproject.toml's ``[project.scripts]``: ``dbaf_jax.commands.scripts:NAME``).

They live apart from the package's ``__init__`` because a function there named like a
command module (``anonymize``) would shadow that module in ``from dbaf_jax.commands
import anonymize``.
"""

from __future__ import annotations

import importlib
from typing import Callable

from dbaf_jax.commands import run_main


def _console_script(module: str) -> Callable[[], None]:
    def run() -> None:
        run_main(importlib.import_module(module).main)

    run.__doc__ = f"The console script of ``python -m {module}``."
    return run


# The user commands, each a module of this folder with ``main(argv)`` (the web page: the
# package `dbaf_jax.web`); pyproject.toml declares each as ``dbaf-<name with dashes>``.
COMMANDS = (
    "anonymize",
    "recover",
    "anonymize_video",
    "recover_video",
    "evaluate",
    "sample",
    "new_key",
    "prepare_data",
    "make_splits",
    "make_metric_networks",
    "web",
)
anonymize = _console_script("dbaf_jax.commands.anonymize")
recover = _console_script("dbaf_jax.commands.recover")
anonymize_video = _console_script("dbaf_jax.commands.anonymize_video")
recover_video = _console_script("dbaf_jax.commands.recover_video")
evaluate = _console_script("dbaf_jax.commands.evaluate")
sample = _console_script("dbaf_jax.commands.sample")
new_key = _console_script("dbaf_jax.commands.new_key")
prepare_data = _console_script("dbaf_jax.commands.prepare_data")
make_splits = _console_script("dbaf_jax.commands.make_splits")
make_metric_networks = _console_script("dbaf_jax.commands.make_metric_networks")
web = _console_script("dbaf_jax.web")
