"""The on-disk model directory: one sub-directory per network.

``DIR/<network>/network.json`` names the Flax module class (``kind``, a
``module:Class`` path under ``dbaf_jax.models``) and its constructor fields
(``config``); ``DIR/<network>/variables`` is an Orbax checkpoint of the variable
tree (collections ``params``, ``batch_stats``, ``buffers``). `load_network` rebuilds
both with one call. Writes go to a temporary name and are renamed into place, so a
reader never sees half a network.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import shutil
from pathlib import Path
from typing import Any, Mapping

import flax.linen as nn
import numpy as np
import orbax.checkpoint as ocp

FORMAT_VERSION = 1
NETWORK_FILE = "network.json"
VARIABLES_DIR = "variables"


@dataclasses.dataclass(frozen=True)
class Network:
    """A loaded network: the Flax module and its variables."""

    module: nn.Module
    variables: dict[str, Any]
    info: dict[str, Any]


def module_kind(module: nn.Module) -> str:
    """'stylegan2:Generator' for dbaf_jax.models.stylegan2.Generator."""
    prefix = "dbaf_jax.models."
    name = type(module).__module__
    if not name.startswith(prefix):
        raise ValueError(f"{type(module).__name__} is not a dbaf_jax.models network")
    return f"{name[len(prefix):]}:{type(module).__qualname__}"


def module_config(module: nn.Module) -> dict[str, Any]:
    """The module's constructor fields (parent and name excluded), JSON-ready."""
    fields = {f.name for f in dataclasses.fields(module) if f.init and f.name not in ("parent", "name")}
    return {name: getattr(module, name) for name in sorted(fields)}


def build_module(kind: str, config: Mapping[str, Any]) -> nn.Module:
    """Rebuilds a module from its kind and config (lists become tuples again)."""
    module_name, _, class_name = kind.partition(":")
    cls = getattr(importlib.import_module(f"dbaf_jax.models.{module_name}"), class_name)
    as_tuple = lambda v: tuple(as_tuple(x) for x in v) if isinstance(v, list) else v  # noqa: E731
    return cls(**{k: as_tuple(v) for k, v in config.items()})


def save_network(
    path: str | Path,
    module: nn.Module,
    variables: Mapping[str, Any],
    source: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Writes ``module`` and ``variables`` to ``path`` (a directory)."""
    path = Path(path).absolute()
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    info = {
        "format_version": FORMAT_VERSION,
        "kind": module_kind(module),
        "config": module_config(module),
        "source": source,
    }
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / NETWORK_FILE).write_text(json.dumps(info, indent=2, sort_keys=True))
    host_tree = {k: _to_numpy(v) for k, v in variables.items()}
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp / VARIABLES_DIR, host_tree)
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    return path


def load_network(path: str | Path) -> Network:
    """Loads a network written by `save_network` (or a converter)."""
    path = Path(path).absolute()
    info_file = path / NETWORK_FILE
    if not info_file.is_file():
        raise FileNotFoundError(f"{path}: not a dbaf_jax network directory (no {NETWORK_FILE})")
    info = json.loads(info_file.read_text())
    if info.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{info_file}: format_version {info.get('format_version')}, expected {FORMAT_VERSION}")
    with ocp.StandardCheckpointer() as checkpointer:
        variables = checkpointer.restore(path / VARIABLES_DIR)
    return Network(build_module(info["kind"], info["config"]), variables, info)


def _to_numpy(tree: Any) -> Any:
    import jax

    return jax.tree.map(np.asarray, tree)
