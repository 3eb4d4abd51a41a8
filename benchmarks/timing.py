"""Wall-clock timing shared by the benchmarks."""

import statistics
import time


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
