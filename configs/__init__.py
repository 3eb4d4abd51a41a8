"""The experiment configs: each module here with ``get_config(variants)`` is one, named by
its path (``configs/dbaf/stage1.py``) and given to launch.py as ``--config PATH[:variants]``."""

import importlib
from pathlib import Path

FOLDER = Path(__file__).parent


def config_files() -> list[Path]:
    """Every config module of this folder and its method folders (those with
    ``get_config``), sorted: the shorter paths (the design card's names) first."""
    found = []
    for path in FOLDER.rglob("*.py"):
        parts = path.relative_to(FOLDER.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            continue
        if hasattr(importlib.import_module(".".join(parts)), "get_config"):
            found.append(path)
    return sorted(found, key=lambda path: (len(path.parts), path))
