"""Training checkpoints: Orbax's CheckpointManager over ``WORKDIR/checkpoints``.

Each checkpoint ``WORKDIR/checkpoints/<step>/`` holds two items:

- ``state``: the train state pytree (parameters, optimizer state, batch stats...),
  written by every process for its own shards and restored onto the shardings of
  the abstract state the caller passes (so a run may resume on another mesh);
- ``meta``: JSON with the caller's metadata (stage name, architecture config), the
  step, the data position (the loader's ``start_step``, equal to the step: the
  loader's order is a function of the step) and the RNG key as raw key data plus
  its implementation name.

Orbax writes a checkpoint under ``<step>.orbax-checkpoint-tmp-*`` and renames it
when complete, so a crash never leaves a readable half checkpoint; leftover tmp
directories are deleted on start. A ``<step>`` directory that is nevertheless
incomplete (a partial copy, a foreign file system without atomic rename) would be
listed by Orbax as a checkpoint: such directories (no ``_CHECKPOINT_METADATA`` or
no readable ``meta``) are renamed to ``<step>.incomplete`` on start and reported,
never read and never deleted.

Saving is asynchronous: `save` returns once the arrays are copied off the devices;
`close` (or leaving the ``with`` block) waits for the writes. The caller saves on
its schedule (`save` honours ``save_every``) and with ``force=True`` at the end and
when interrupted (KeyboardInterrupt, or SIGTERM via `catch_sigterm`).

On CPU devices one replica of each array writes it whole (`write_replicas_whole_on_cpu`):
Orbax otherwise splits each replicated array among its replicas, which compiles one
``slice`` program per array and shape, 256 of them (15 s) at the first save of the tiny
stage-1 state on 8 host devices, for writes that share one host's memory anyway.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import signal
from pathlib import Path
from typing import Any, Iterator, Mapping

import jax
import numpy as np
import orbax.checkpoint as ocp

from dbaf_jax.core.errors import ConfigError

CHECKPOINT_DIR = "checkpoints"
ORBAX_STEP_METADATA = "_CHECKPOINT_METADATA"
INCOMPLETE_SUFFIX = ".incomplete"


class IncompatibleCheckpointError(ConfigError):
    """A checkpoint made for another stage or architecture; the message names the fields."""


@dataclasses.dataclass(frozen=True)
class Restored:
    """A restored checkpoint: the state, its step, the RNG key and the metadata."""

    state: Any
    step: int
    rng: jax.Array
    data_position: int
    metadata: dict[str, Any]


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = list(value) if isinstance(value, tuple) else value
    return flat


def check_compatible(
    meta: Mapping[str, Any], expected: Mapping[str, Any], source: str = "checkpoint"
) -> None:
    """Raises IncompatibleCheckpointError naming every field of ``expected`` that ``meta`` lacks or differs in.

    Nested mappings compare field by field (``architecture.cid.depth``); tuples equal
    lists (JSON has no tuples); fields only in ``meta`` are not checked.
    """
    have, want = _flatten(meta), _flatten(expected)
    differences = []
    for name, value in want.items():
        if name not in have:
            differences.append(f"{name}: missing, expected {value!r}")
        elif have[name] != value:
            differences.append(f"{name}: {have[name]!r}, expected {value!r}")
    if differences:
        raise IncompatibleCheckpointError(
            f"{source} does not fit this run: " + "; ".join(differences)
        )


def _is_complete(step_dir: Path) -> bool:
    try:
        json.loads((step_dir / "meta" / "metadata").read_text())
    except (OSError, ValueError):
        return False
    return (step_dir / ORBAX_STEP_METADATA).is_file()


def _set_aside_incomplete(directory: Path) -> list[Path]:
    """Renames incomplete ``<step>`` directories to ``<step>.incomplete[.n]``; returns the new paths."""
    moved = []
    if not directory.is_dir():
        return moved
    for step_dir in sorted(p for p in directory.iterdir() if p.is_dir() and p.name.isdigit()):
        if _is_complete(step_dir):
            continue
        target = step_dir.with_name(step_dir.name + INCOMPLETE_SUFFIX)
        n = 1
        while target.exists():
            target = step_dir.with_name(f"{step_dir.name}{INCOMPLETE_SUFFIX}.{n}")
            n += 1
        step_dir.rename(target)
        logging.warning("checkpoint %s is incomplete; moved to %s and ignored", step_dir, target)
        moved.append(target)
    return moved


def _key_to_json(rng: jax.Array) -> dict[str, Any]:
    if jax.dtypes.issubdtype(rng.dtype, jax.dtypes.prng_key):
        data, impl = jax.random.key_data(rng), str(jax.random.key_impl(rng))
    else:  # a raw uint32 key (jax.random.PRNGKey)
        data, impl = rng, None
    data = np.asarray(jax.device_get(data))
    return {"key_data": data.tolist(), "dtype": str(data.dtype), "impl": impl}


def _key_from_json(stored: Mapping[str, Any]) -> jax.Array:
    data = np.asarray(stored["key_data"], dtype=stored["dtype"])
    return (
        jax.random.wrap_key_data(data, impl=stored["impl"])
        if stored["impl"]
        else jax.numpy.asarray(data)
    )


def write_replicas_whole_on_cpu() -> None:
    """On the CPU backend, Orbax's array handler without replica-parallel writes (its
    default on GPUs; see the module docstring). Orbax keeps one handler per type for the
    process, so this sets it for every Orbax save of the process; reading is unchanged."""
    if jax.default_backend() == "cpu":
        ocp.type_handlers.register_type_handler(
            jax.Array, ocp.type_handlers.ArrayHandler(use_replica_parallel=False), override=True
        )


class TrainingCheckpointer:
    """Periodic, resumable training checkpoints in ``WORKDIR/checkpoints``.

    ``metadata`` (JSON-serialisable: stage name, architecture config, ...) is
    written into every checkpoint; `restore_latest` reads it back for
    `check_compatible`.
    """

    def __init__(
        self, workdir: str | Path, save_every: int, keep: int, metadata: Mapping[str, Any]
    ):
        self.directory = Path(workdir).absolute() / CHECKPOINT_DIR
        self.metadata = dict(metadata)
        json.dumps(self.metadata)  # fail now, not at the first save
        write_replicas_whole_on_cpu()
        self.set_aside: list[Path] = []
        if jax.process_index() == 0:
            self.set_aside = _set_aside_incomplete(self.directory)
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("dbaf_jax checkpoint directory scanned")
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            save_interval_steps=save_every,
            create=True,
            cleanup_tmp_directories=True,
        )
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "meta")
        )

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def due(self, step: int) -> bool:
        """Whether `save` at ``step`` writes a checkpoint (a multiple of ``save_every``)."""
        return self._manager.should_save(step)

    def save(self, step: int, state: Any, rng: jax.Array, force: bool = False) -> bool:
        """Saves when ``step`` is a multiple of ``save_every`` (any step with ``force``); True if it did."""
        if force and step == self.latest_step():
            return False
        if not force and not self._manager.should_save(step):
            return (
                False  # before the metadata: reading the RNG would sync host and device every step
            )
        meta = {
            **self.metadata,
            "step": int(step),
            "data_position": int(step),
            "rng": _key_to_json(rng),
        }
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        return self._manager.save(step, args=args, force=force)

    def read_metadata(self, step: int | None = None) -> dict[str, Any]:
        """The metadata JSON of ``step`` (default: the latest)."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"{self.directory}: no checkpoint")
        return self._manager.restore(
            step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
        ).meta

    def restore(
        self, step: int, abstract_state: Any, expected: Mapping[str, Any] | None = None
    ) -> Restored:
        """Restores ``step`` onto the shapes, dtypes and shardings of ``abstract_state``.

        ``expected`` (if given) is checked against the stored metadata first
        (`check_compatible`), so an incompatible checkpoint is refused before its
        arrays are read.
        """
        meta = self.read_metadata(step)
        if expected is not None:
            check_compatible(meta, expected, source=f"checkpoint {self.directory / str(step)}")
        restored = self._manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state))
        )
        return Restored(
            restored.state,
            int(meta["step"]),
            _key_from_json(meta["rng"]),
            int(meta["data_position"]),
            meta,
        )

    def restore_latest(
        self, abstract_state: Any, expected: Mapping[str, Any] | None = None
    ) -> Restored | None:
        """`restore` of the latest complete checkpoint, or None when there is none."""
        step = self.latest_step()
        return None if step is None else self.restore(step, abstract_state, expected)

    def wait(self) -> None:
        """Blocks until the pending asynchronous save is on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> "TrainingCheckpointer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def abstract_like(tree: Any) -> Any:
    """ShapeDtypeStructs with the shardings of ``tree``'s arrays: the ``abstract_state`` to restore onto."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
        tree,
    )


@contextlib.contextmanager
def catch_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt, so one ``except`` saves on both.

    Only the main thread can install signal handlers; the previous handler is
    restored on exit.
    """

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
