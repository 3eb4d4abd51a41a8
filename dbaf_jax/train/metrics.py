"""Training metrics: scalars to stdout and TensorBoard, sample grids as PNG and TensorBoard images.

TensorBoard files are written with tensorboardX (pinned in pyproject.toml), not
with ``clu.metric_writers``: clu's writers import TensorFlow, which is not a runtime
dependency of this project (docs/decisions.md), while tensorboardX writes the same
event files with only numpy and protobuf. tensorboardX is imported when a writer
with ``tensorboard=True`` is made, not when this module is imported, because its
package import also imports torch where torch happens to be installed (it probes
for torch.Tensor); the training runtime has no torch, so there it imports nothing
else.

Only the primary process (``jax.process_index() == 0``) writes; on the others the
writer does nothing, so every host can call it unconditionally.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
from PIL import Image

from dbaf_jax.storage.images import to_uint8
from dbaf_jax.train.progress import StepClock

SAMPLES_DIR = "samples"


def format_duration(seconds: float) -> str:
    """'1:02:03' (h:mm:ss), or '?' when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class MetricsWriter:
    """Scalars (stdout + TensorBoard), images (PNG + TensorBoard), steps/s and ETA.

    ``clock`` (a `dbaf_jax.train.progress.StepClock`) gives steps/s and the ETA from
    training steps only; without one neither is logged.
    """

    def __init__(
        self,
        logdir: str | Path,
        clock: StepClock | None = None,
        tensorboard: bool = True,
        print_fn: Callable[[str], Any] = print,
        is_primary: bool | None = None,
    ):
        if is_primary is None:
            import jax

            is_primary = jax.process_index() == 0
        self.logdir = Path(logdir)
        self.clock = clock
        self.is_primary = is_primary
        self._print = print_fn
        self._tb = None
        if is_primary:
            self.logdir.mkdir(parents=True, exist_ok=True)
            if tensorboard:
                from tensorboardX import SummaryWriter

                self._tb = SummaryWriter(str(self.logdir), flush_secs=30)

    def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> dict[str, float]:
        """Logs ``scalars`` (numbers or 0-d arrays) at ``step`` plus steps_per_sec; returns them as floats."""
        if not self.is_primary:
            return {}
        values = {name: float(np.asarray(value)) for name, value in scalars.items()}
        parts = [f"step {step}" + (f"/{self.clock.total_steps}" if self.clock else "")]
        rate = self.clock.steps_per_sec() if self.clock else float("nan")
        if math.isfinite(rate):
            values["steps_per_sec"] = rate
            parts.append(f"{rate:.3g} steps/s")
            parts.append(f"ETA {format_duration(self.clock.eta_seconds(step))}")
        parts += [f"{name} {values[name]:.5g}" for name in scalars]
        self._print(" | ".join(parts))
        if self._tb is not None:
            for name, value in values.items():
                self._tb.add_scalar(name, value, step)
        return values

    def write_images(self, step: int, images: Mapping[str, np.ndarray]) -> list[Path]:
        """Writes each (H, W, 3) image (uint8, or float in [-1, 1]) as samples/<name>_<step>.png and to TensorBoard."""
        if not self.is_primary:
            return []
        paths = []
        for name, image in images.items():
            image = np.asarray(image)
            pixels = image if image.dtype == np.uint8 else to_uint8(image)
            path = self.logdir / SAMPLES_DIR / f"{name.replace('/', '_')}_{step:08d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(path)
            paths.append(path)
            if self._tb is not None:
                self._tb.add_image(name, pixels, step, dataformats="HWC")
        return paths

    def flush(self) -> None:
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self) -> "MetricsWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
