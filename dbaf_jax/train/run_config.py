"""The configuration a training workdir was started with, kept beside its checkpoints.

A run writes its full configuration to ``W/config.json`` and appends one line per
start to ``W/config_history.jsonl``. A later run into W that has a checkpoint to
resume from must bring the same
configuration: a different one is refused (`ConfigError` naming every field that
differs), so that a resume never goes on silently with another loss weight or
dataset, unless the caller says the change is intended; the change is then logged
to the history and the new configuration becomes the stored one.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

import ml_collections

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.train.checkpoints import CHECKPOINT_DIR

CONFIG_FILE = "config.json"
HISTORY_FILE = "config_history.jsonl"


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: the dotted names the command line uses."""
    if isinstance(tree, dict):
        flat: dict[str, Any] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: tree}


def as_json(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """The config as plain JSON values (tuples become lists, as they will on reading back)."""
    return json.loads(config.to_json_best_effort(sort_keys=True))


def differences(stored: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """{dotted field: (stored value, current value)} for every field that differs; a
    field only one side has shows as None on the other."""
    old, new = flatten(stored), flatten(current)
    return {
        k: (old.get(k), new.get(k))
        for k in sorted(old.keys() | new.keys())
        if old.get(k) != new.get(k) or (k in old) != (k in new)
    }


def read_stored(workdir: Path) -> dict[str, Any] | None:
    """The stored configuration, None if the workdir has none; ConfigError naming the
    file when it is not a JSON object."""
    path = workdir / CONFIG_FILE
    if not path.exists():
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ConfigError(
            f"{path}: cannot read the workdir's stored configuration ({err})"
        ) from None
    if not isinstance(stored, dict):
        raise ConfigError(f"{path}: the workdir's stored configuration is not a JSON object")
    return stored


def has_checkpoint(workdir: Path) -> bool:
    """Whether a run into ``workdir`` would resume (a numbered checkpoint directory)."""
    directory = workdir / CHECKPOINT_DIR
    return directory.is_dir() and any(p.name.isdigit() for p in directory.iterdir())


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _log(workdir: Path, entry: dict[str, Any]) -> None:
    entry = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **entry,
    }
    with open(workdir / HISTORY_FILE, "a", encoding="utf-8") as history:
        history.write(json.dumps(entry, sort_keys=True) + "\n")


def check_and_store(
    workdir: str | Path,
    config: ml_collections.ConfigDict,
    allow_change: bool = False,
    flag: str = "allow_change",
) -> dict[str, tuple[Any, Any]]:
    """Stores ``config`` in ``workdir`` on its first run; on one that resumes a
    checkpoint compares it with the stored configuration. Returns the differences (empty on a first or same run).

    Differences without ``allow_change``: ConfigError naming each field with both
    values and ``flag``, the option that allows them; nothing is written. With it,
    the differences go to the history and ``config`` replaces the stored one.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    current = as_json(config)
    stored = read_stored(workdir)
    if not has_checkpoint(workdir):
        stored = None  # nothing trained yet (a first run that failed early): the new settings simply apply
    changed = {} if stored is None else differences(stored, current)
    if changed and not allow_change:
        shown = ", ".join(
            f"{k} {json.dumps(old)} -> {json.dumps(new)}" for k, (old, new) in changed.items()
        )
        raise ConfigError(
            f"{workdir} was trained with another configuration ({workdir / CONFIG_FILE}): {shown}; "
            f"run with the same settings to resume, or pass {flag} if the change is intended"
        )
    if stored is None or changed:
        _write_atomic(workdir / CONFIG_FILE, json.dumps(current, indent=1, sort_keys=True) + "\n")
    _log(
        workdir,
        {"event": "start"}
        if stored is None
        else {"event": "resume", "changed": {k: list(v) for k, v in changed.items()}},
    )
    return changed
