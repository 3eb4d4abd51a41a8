"""Evaluation during training: a held-out part of the dataset is measured every
``eval_every`` steps (`AdversarialStage.evaluate`), and the model directory of the
best value of ``best_metric`` is kept in ``W/best/``, as the reference keeps its best
networks in ``best_result/``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import ml_collections
import numpy as np

from dbaf_jax.core.errors import ConfigError, DatasetError
from dbaf_jax.storage import images
from dbaf_jax.train import data

BEST_EXPORT = "best"
BEST_FILE = "best.json"
MODES = ("max", "min")


def split_held_out(config: ml_collections.ConfigDict, source: data.ImageSource):
    """(training source, held-out images (N, H, W, 3) float32 or None): the last
    ``eval_images`` records are held out when evaluation is on."""
    if config.eval_every <= 0:
        return source, None
    if not 0 < config.eval_images < len(source):
        raise DatasetError(
            f"eval_images {config.eval_images}: must be between 1 and the dataset's {len(source) - 1}"
        )
    kept = len(source) - config.eval_images
    held_out = data.Subset(source, kept, len(source))
    return data.Subset(source, 0, kept), images.to_float(
        np.stack([held_out[i] for i in range(len(held_out))])
    )


class BestModel:
    """The best value of one eval metric so far; ``W/best/best.json`` keeps it across resumes."""

    def __init__(self, workdir: Path, metric: str, mode: str):
        if mode not in MODES:
            raise ConfigError(f"best_mode {mode!r}: expected one of {MODES}")
        self.directory = workdir / BEST_EXPORT
        self.metric, self.mode = metric, mode
        record = self.directory / BEST_FILE
        self.step, self.value = None, -math.inf if mode == "max" else math.inf
        if record.is_file():
            stored = json.loads(record.read_text())
            if stored.get("metric") == metric and stored.get("mode") == mode:
                self.step, self.value = stored["step"], stored["value"]

    def improves(self, metrics: dict[str, float]) -> bool:
        if self.metric not in metrics:
            raise ConfigError(
                f"best_metric {self.metric!r}: the evaluation measures {sorted(metrics)}"
            )
        value = metrics[self.metric]
        return value > self.value if self.mode == "max" else value < self.value

    def record(self, step: int, metrics: dict[str, float]) -> None:
        """Notes the new best (after its model directory was written)."""
        self.step, self.value = step, metrics[self.metric]
        record = {"step": step, "metric": self.metric, "mode": self.mode, "value": self.value}
        (self.directory / BEST_FILE).write_text(json.dumps(record, indent=2))
