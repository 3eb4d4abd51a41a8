"""Joining the Ray cluster, what each stage of a run asks of it, and the check that every
node sees the run's paths.

`join` joins (or starts) the cluster for a run: ``--ray`` alone starts one on this
machine (or, inside ``ray job submit``, joins the job's: Ray reads ``RAY_ADDRESS``),
an address joins that one. Ray Data is told to drop no block (``max_errored_blocks``
0: a failed block stops the run rather than losing its photos) and to draw no
progress bars of its own (the driver shows one line per input).

`Layout`: one model actor per GPU of the cluster (``num_gpus=1``), or ``--ray-actors``
CPU actors. On CPUs each model actor, detection task and clip task asks for the same
share of a CPU, at most one, so that the actors and at least one detection task fit the
cluster together (two actors on a 2-CPU machine: two thirds each). CPU stages run
with ``JAX_PLATFORMS=cpu``. The model actors and clip tasks draw no progress bars
(``TQDM_DISABLE``): the driver's is the run's.

`check_paths` runs a task on every node before any work: each must read the sampled
inputs (same sizes as the driver sees), the model's files, and the staging folder's
token, and write into that folder; the first that cannot is one InputError naming the
path and the node.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from pathlib import Path
from typing import Any, Sequence

from dbaf_jax.core.errors import ConfigError, InputError
from dbaf_jax.distributed.options import LOCAL

CPU_ENV = {"JAX_PLATFORMS": "cpu"}
QUIET_ENV = {"TQDM_DISABLE": "1"}
ANSWER_SECONDS = 300  # a node that has not run its path check by then is named


def ray_module() -> Any:
    """The ``ray`` module, or ConfigError saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401 - Ray Data comes with the ray[data] extra
    except ImportError:
        raise ConfigError(
            "--ray needs Ray Data: pip install 'dbaf-jax[distributed]' (ray[data] 2.60.0)"
        ) from None
    return ray


def join(address: str) -> Any:
    """The ``ray`` module, joined to the cluster at ``address`` (`options.LOCAL`: this
    machine's). A connection this process already has is used as it is (a test's, a
    notebook's); one made here lasts until the process ends (Ray closes it then)."""
    ray = ray_module()
    if not ray.is_initialized():
        try:
            ray.init(
                address=None if address == LOCAL else address,
                log_to_driver=False,  # the workers' logs stay in Ray's session folder
                logging_level=logging.WARNING,
            )
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ConfigError(f"--ray {address}: cannot join the Ray cluster ({err})") from None
    context = ray.data.DataContext.get_current()
    context.max_errored_blocks = 0
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    return ray


@dataclasses.dataclass(frozen=True)
class Layout:
    """How many model actors, on GPUs or CPUs, and the CPU share (at most 1) each CPU
    stage asks for."""

    actors: int
    gpus: bool
    share: float

    def model(self) -> dict[str, Any]:
        """Ray's arguments of a model actor (and of a clip task, which runs the model too)."""
        if self.gpus:
            return {"num_gpus": 1, "num_cpus": 1, "runtime_env": {"env_vars": QUIET_ENV}}
        return {"num_cpus": self.share, "runtime_env": {"env_vars": {**CPU_ENV, **QUIET_ENV}}}

    def detection(self) -> dict[str, Any]:
        """Ray's arguments of a detection task."""
        return {"num_cpus": self.share, "runtime_env": {"env_vars": CPU_ENV}}

    def describe(self) -> str:
        kind = "GPU" if self.gpus else f"CPU ({self.share:.2f} CPU each)"
        return f"Ray: {self.actors} {kind} model actor(s); detection on CPU tasks"


def layout(resources: dict[str, float], asked: int | None) -> Layout:
    """The `Layout` for a cluster with ``resources`` (`ray.cluster_resources`) and
    ``--ray-actors`` ``asked`` (None: one per GPU, or 1 without)."""
    gpus, cpus = int(resources.get("GPU", 0)), float(resources.get("CPU", 0))
    if gpus:
        if asked is not None and asked > gpus:
            raise ConfigError(
                f"--ray-actors {asked}: the cluster has {gpus} GPU(s), and a model actor takes one"
            )
        return Layout(asked or gpus, True, 1.0)
    actors = asked or 1
    if cpus <= 0:
        raise ConfigError("--ray: the cluster has no CPU to run on")
    # Rounded down to Ray's resource grain (1e-4), or the last share would not fit.
    return Layout(actors, False, min(1.0, math.floor(cpus / (actors + 1) * 10_000) / 10_000))


@dataclasses.dataclass(frozen=True)
class PathCheck:
    """What every node must see: files with the size the driver sees, folders, and the
    staging folder (its token read, a file written there)."""

    files: tuple[tuple[str, int], ...]
    folders: tuple[str, ...]
    staging: str
    token: str


def path_check(
    files: Sequence[Path], folders: Sequence[Path], staging: Path, token: str
) -> PathCheck:
    """The `PathCheck` of ``files`` (their sizes as the driver sees them) and ``folders``."""
    return PathCheck(
        tuple((str(path), path.stat().st_size) for path in files),
        tuple(str(folder) for folder in folders),
        str(staging),
        token,
    )


def unseen(check: PathCheck) -> str | None:
    """On a worker: the first path of ``check`` this node cannot see as the driver does,
    with why; None when it sees them all."""
    for folder in check.folders:
        if not os.path.isdir(folder):
            return f"{folder}: no such folder here"
    for path, size in check.files:
        try:
            here = os.stat(path).st_size
            with open(path, "rb") as file:
                file.read(1)
        except OSError as err:
            return f"{path}: {err.strerror or err}"
        if here != size:
            return f"{path}: {here} bytes here, {size} on the driver (another file?)"
    staging = Path(check.staging)
    try:
        seen = (staging / "probe").read_text()
    except OSError as err:
        return f"{staging}: {err.strerror or err}"
    if seen != check.token:
        return f"{staging}: another folder of that name (its token differs from the driver's)"
    written = staging / f"probe.{os.getpid()}"
    try:
        written.write_bytes(b"\0")
        written.unlink()
    except OSError as err:
        return f"{staging}: cannot write there ({err.strerror or err})"
    return None


def check_paths(ray: Any, check: PathCheck) -> None:
    """Runs `unseen` on every node of the cluster (no CPU asked, so it runs beside any
    work); InputError naming the first path a node cannot see, before any work."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(unseen)
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    pending = {
        probe.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote(check): node["NodeManagerAddress"]
        for node in nodes
    }
    done, late = ray.wait(list(pending), num_returns=len(pending), timeout=ANSWER_SECONDS)
    for ref in late:
        ray.cancel(ref, force=True)
        raise InputError(
            f"the Ray node {pending[ref]} did not check the run's paths within {ANSWER_SECONDS} s"
        )
    for ref in done:
        why = ray.get(ref)
        if why is not None:
            raise InputError(
                f"{why} (seen from the Ray node {pending[ref]}): inputs, outputs and the model must lie on "
                "storage every node mounts at the same path (docs/distributed.md)"
            )
