"""Wall-clock timing shared by the benchmarks."""

import contextlib
import fcntl
import os
import statistics
import sys
import time

from dbaf_jax.core.compilation_cache import CompileWatch

_START = time.perf_counter()


def median_seconds(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, after one warm-up call
    (which also compiles, for JAX). ``fn`` must block until its result is ready."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def progress(message: str) -> None:
    """``message`` on stderr with the seconds since the benchmark started: a run cut
    off by a time limit (a long compile on a GPU) still shows how far it got."""
    print(f"[{time.perf_counter() - _START:7.1f} s] {message}", file=sys.stderr, flush=True)


# A lock file that benchmarks running side by side on one device (benchmarks/gpu/quick.sh's
# two lanes) take in turn for their timed windows.
DEVICE_LOCK_VARIABLE = "DBAF_BENCH_DEVICE_LOCK"


@contextlib.contextmanager
def device_turn():
    """Holds the lock file named by ``$DBAF_BENCH_DEVICE_LOCK`` (when set) for the block:
    no two processes time the device at once, while their building and compiling,
    which need only the host, overlap. Without the variable, nothing is held."""
    path = os.environ.get(DEVICE_LOCK_VARIABLE)
    if not path:
        yield
        return
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def steady_state_seconds(step, carry, steps: int, sync):
    """Seconds per call of ``carry = step(carry)`` over ``steps`` calls dispatched back
    to back with one ``sync(carry)`` at the end (so asynchronous dispatch overlaps the
    host's work with the device's, as in a training loop), and the final carry.

    The caller runs and syncs warm-up calls first: this times the steady state only,
    in its `device_turn`.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    with device_turn():
        start = time.perf_counter()
        for _ in range(steps):
            carry = step(carry)
        sync(carry)
        return (time.perf_counter() - start) / steps, carry


def compile_watched(jitted, *args, **kwargs):
    """(the lowered program of a jitted function for these arguments, its compiled
    executable, a `CompileWatch` of the lowering and compilation: seconds, and whether
    the executable came from the persistent compilation cache)."""
    with CompileWatch() as watch:
        lowered = jitted.lower(*args, **kwargs)
        compiled = lowered.compile()
    return lowered, compiled, watch


def compile_cell(watch: CompileWatch) -> str:
    """A table cell: the seconds, marked "(cache)" for a load from the compilation cache."""
    return f"{watch.seconds:.1f}{' (cache)' if watch.from_cache else ''}"


def model_flops(lowered) -> float:
    """XLA's FLOP count of a lowered program before its optimisations: the multiply-adds
    the program asks for, 2 FLOPs each, for the whole global batch. The backend's own
    count when it gives one (the CPU does); otherwise (a GPU plugin's `cost_analysis`
    gives none) the CPU backend's count of the same lowered module (`cpu_flops`), so the
    figure exists on every backend. Not the compiled program's count: on a GPU, XLA hands
    convolutions to cuDNN as custom calls, which its cost analysis leaves out (an H100's
    anonymization counted 1.5 GFLOP per image compiled, 207 lowered), and a partitioned
    program counts one device's share."""
    flops = _flops(lowered.cost_analysis())
    return cpu_flops(lowered) if flops is None else flops


def cpu_flops(lowered) -> float:
    """The CPU backend's FLOP count of ``lowered``'s HLO module, whatever backend it was
    lowered for: XLA's HloCostAnalysis run by the CPU client on the same pre-optimisation
    program. Raises rather than answer NaN when this JAX offers no such count."""
    import jax.extend.backend

    # XLA's analysis of an HLO module is reachable only through jaxlib's extension (public
    # `Lowered.cost_analysis` calls it with the lowering's own backend, which a PJRT plugin
    # refuses); present under this name in JAX 0.10 and 0.11.
    from jax._src.lib import _jax

    module = lowered.compiler_ir("hlo").as_hlo_module()
    flops = _flops(_jax.hlo_module_cost_analysis(jax.extend.backend.get_backend("cpu"), module))
    if flops is None:
        raise RuntimeError("XLA's CPU cost analysis gave no FLOP count for this program")
    return flops


def _flops(costs) -> float | None:
    """The ``flops`` entry of a cost analysis (a dict or, in some JAX versions, a list
    with one dict per program), or None."""
    if isinstance(costs, (list, tuple)):
        costs = costs[0] if costs else None
    flops = (costs or {}).get("flops")
    return None if flops is None else float(flops)


def throughput(
    batch: int, seconds: float, flops: float, peaks: dict[str, float], devices: int = 1
) -> dict:
    """Figures of a step that processes ``batch`` images in ``seconds`` and computes
    ``flops`` over ``devices`` devices: images/s, achieved FLOP/s, and MFU (achieved
    FLOP/s over ``devices`` x the peak) for each named peak of one device."""
    achieved = flops / seconds
    return {
        "images_per_s": batch / seconds,
        "flops_per_s": achieved,
        "mfu": {label: achieved / (devices * peak) for label, peak in peaks.items()},
    }
