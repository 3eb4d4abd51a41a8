"""A trace of a few training steps, for finding where a step's time goes.

With ``--config.profile_steps N`` the loop records steps S+2 ... S+N+1 of a run that
starts at step S (the first two are left out: they compile, or load from the cache,
and warm up) with `jax.profiler` into ``W/profile/``: open it with TensorBoard's
Profile tab (``tensorboard --logdir W/profile``) or Perfetto. The trace holds every
kernel the device ran, with its duration and the name of the network and layer that
issued it.
"""

from __future__ import annotations

from pathlib import Path

import jax

FOLDER = "profile"
WARM_UP_STEPS = 2


class StepProfile:
    """Starts a trace before step ``first`` and stops it once ``count`` steps are done."""

    def __init__(self, workdir: Path, start: int, count: int):
        self.folder = Path(workdir) / FOLDER
        self.first = start + WARM_UP_STEPS
        self.last = self.first + count  # the trace stops after this many steps are done
        self.count = count
        self.active = False

    def before(self, step: int) -> None:
        """Called before training step number ``step`` is dispatched."""
        if self.count > 0 and step == self.first:
            self.folder.mkdir(parents=True, exist_ok=True)
            jax.profiler.start_trace(str(self.folder))
            self.active = True

    def after(self, done: int, state) -> None:
        """Called once ``done`` steps are dispatched; ``state`` is that step's output."""
        if self.active and done == self.last:
            jax.block_until_ready(state)  # the traced steps' kernels, not just their dispatch
            self.stop()

    def stop(self) -> None:
        if self.active:
            jax.profiler.stop_trace()
            self.active = False
            print(
                f"profile of {self.count} step(s) in {self.folder} (tensorboard --logdir {self.folder})"
            )
