"""Several detectors as one: every detector runs on the image and their detections
are merged, so that a face found by two of them is one face.

Two detections of different detectors are one face when the intersection of their
boxes covers at least `MERGE_OVERLAP` of the smaller box and their sides differ by
at most a factor `MERGE_SIDE_RATIO` (a small face in front of or behind a large one
stays a face of its own). Of one face's detections the first detector's is kept
(its box and landmarks), and the face is sure when any of its detections is: the
default order puts MTCNN first, whose O-net is trained for the five points FFHQ
alignment uses, while dlib's are mapped from its 68 (`dlib_detectors`). Detections of one detector
are never merged with each other (each detector has its own suppression).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dbaf_jax.faces.detectors.base import (
    Detections,
    Detector,
    empty,
    largest_first,
    overlap_of_smaller,
)

MERGE_OVERLAP = 0.5
MERGE_SIDE_RATIO = 2.0


def _sides(boxes: np.ndarray) -> np.ndarray:
    return np.sqrt(
        np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)
    )


def merge(
    found: Sequence[Detections],
    overlap: float = MERGE_OVERLAP,
    side_ratio: float = MERGE_SIDE_RATIO,
) -> Detections:
    """One image's detections by several detectors (in priority order) -> one face per
    face, largest first; a merged face is sure when any of its detections is."""
    if not found:
        return empty()
    boxes = np.concatenate([f.boxes for f in found]).astype(np.float32)
    probs = np.concatenate([f.probs for f in found]).astype(np.float32)
    landmarks = np.concatenate([f.landmarks for f in found]).astype(np.float32)
    sure = np.concatenate([f.confident() for f in found])
    source = np.concatenate([np.full(len(f.boxes), i) for i, f in enumerate(found)])
    sides = _sides(boxes)
    kept: list[int] = []
    for i in range(len(boxes)):  # by detector, then as each found them
        if kept:
            others = np.asarray(kept)
            ratio = np.maximum(sides[others], sides[i]) / np.maximum(
                np.minimum(sides[others], sides[i]), 1e-6
            )
            same = (
                (source[others] != source[i])
                & (overlap_of_smaller(boxes[i], boxes[others]) >= overlap)
                & (ratio <= side_ratio)
            )
            if same.any():
                sure[others[same]] |= sure[i]
                continue
        kept.append(i)
    rows = np.asarray(kept, np.int64)
    return largest_first(Detections(boxes[rows], probs[rows], landmarks[rows], sure[rows]))


class Ensemble:
    """``detectors`` (priority order) run on every image, their detections merged (`merge`)."""

    def __init__(self, detectors: Sequence[Detector], overlap: float = MERGE_OVERLAP):
        if not detectors:
            raise ValueError("an ensemble needs at least one detector")
        self.detectors = list(detectors)
        self.overlap = overlap
        self.name = "+".join(d.name for d in self.detectors)

    def detect(self, image: np.ndarray) -> Detections:
        return merge([d.detect(image) for d in self.detectors], self.overlap)

    def detect_many(self, images: Sequence[np.ndarray]) -> list[Detections]:
        per_detector = [d.detect_many(images) for d in self.detectors]
        return [merge(found, self.overlap) for found in zip(*per_detector)]
