"""Where a training run's time goes, for honest progress lines.

Steps/s and the ETA count training steps only: compiling, evaluation, sample grids
and checkpoints are timed apart (`StepClock.other`) and reported as such, so a step
that also evaluates does not make the run look slower, and the first step's compile
does not make the ETA hours long. The step's first call is compiled ahead of time
(`compile_announced`) so the user reads "compiling ..." while it happens.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

from dbaf_jax.core.compilation_cache import CompileWatch


def compile_announced(jitted, what: str, announce: Callable[[str], Any], *args):
    """``jitted`` compiled for ``args``, saying "compiling <what> ..." before and how long
    it took (or that it came from the compilation cache) after."""
    announce(f"compiling {what} ...")
    with CompileWatch() as watch:
        program = jitted.lower(*args).compile()
    announce(watch.message(what))
    return program


class StepClock:
    """Seconds spent in training steps, and in everything else by name."""

    def __init__(self, total_steps: int, started: float | None = None):
        """``started``: the `time.perf_counter()` the run's total time counts from (default: now)."""
        self.total_steps = total_steps
        self.steps = 0  # timed by this run (a resumed run counts from where it resumed)
        self.train_seconds = 0.0
        self.other_seconds: dict[str, float] = {}
        self._started = time.perf_counter() if started is None else started

    @contextlib.contextmanager
    def training(self, steps: int = 1):
        """Times ``steps`` training steps (the block must wait for their results)."""
        start = time.perf_counter()
        yield
        self.train_seconds += time.perf_counter() - start
        self.steps += steps

    @contextlib.contextmanager
    def other(self, what: str):
        """Times work that is not a training step (``what``: 'evaluation', 'samples', ...)."""
        start = time.perf_counter()
        yield
        self.add(what, time.perf_counter() - start)

    def add(self, what: str, seconds: float) -> None:
        """Counts ``seconds`` of work that is not a training step, timed by the caller."""
        self.other_seconds[what] = self.other_seconds.get(what, 0.0) + seconds

    def steps_per_sec(self) -> float:
        return (
            self.steps / self.train_seconds
            if self.steps and self.train_seconds > 0
            else float("nan")
        )

    def eta_seconds(self, step: int) -> float:
        """Training time left after ``step`` at the rate so far (evaluation and the rest not included)."""
        return (self.total_steps - step) / self.steps_per_sec()

    def elapsed(self) -> float:
        return time.perf_counter() - self._started

    def summary(self) -> str:
        """'training 41.2 s (30 steps, 0.73 steps/s); compiling 48.0 s; evaluation 3.1 s'."""
        parts = [
            f"training {self.train_seconds:.1f} s ({self.steps} steps, {self.steps_per_sec():.3g} steps/s)"
        ]
        parts += [f"{what} {seconds:.1f} s" for what, seconds in self.other_seconds.items()]
        return "; ".join(parts)
