"""What every face detector gives and how detections are compared.

`Detector` is the seam (a `typing.Protocol`): ``detect(image)`` and
``detect_many(images)`` on (H, W, 3) uint8 RGB images give `Detections`, boxes,
scores and the five landmarks FFHQ alignment needs (eye centres, nose, mouth corners,
in that order: `faces.align` reads them so), and ``name`` says which detector ran.
A detection is either *sure* (anonymized) or in the detector's low-confidence band
(`Detections.confident` False: hidden irreversibly by the photo path, never left).

A detector that shrinks images above some size before looking at them says so in an
optional attribute ``largest_input``: (largest side, most pixels) of an image it looks
at in its own pixels (CenterFace's 1920 and 1920 x 1088); the tiles of a larger photo
(`detectors.tiling`) are cut no larger, so that no face is looked for on a shrunk copy.
Without it (MTCNN, dlib) a detector takes any size at full resolution (`largest_input`).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, Sequence

import numpy as np

LANDMARKS = 5  # left eye, right eye, nose, left mouth corner, right mouth corner (image left/right)


class Detections(NamedTuple):
    """Faces found in one image, largest box first.

    boxes: (N, 4) float32 (x1, y1, x2, y2) in pixels.
    probs: (N,) float32 the detector's own scores (not comparable across detectors).
    landmarks: (N, 5, 2) float32 (x, y) of the two eyes, the nose and the two mouth
      corners, image left before image right.
    sure: (N,) bool, False for a detection of the low-confidence band; None when the
      detector has no band (every detection sure).
    """

    boxes: np.ndarray
    probs: np.ndarray
    landmarks: np.ndarray
    sure: np.ndarray | None = None

    def confident(self) -> np.ndarray:
        """(N,) bool: which detections are sure."""
        return np.ones(len(self.boxes), bool) if self.sure is None else np.asarray(self.sure, bool)


def empty(points: int = LANDMARKS) -> Detections:
    """No face."""
    return Detections(
        np.zeros((0, 4), np.float32),
        np.zeros((0,), np.float32),
        np.zeros((0, points, 2), np.float32),
        np.zeros((0,), bool),
    )


def rgb_frames(images: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``images`` as arrays, each an (H, W, 3) uint8 RGB image and all of one size (what
    `Detector.detect_many` takes: a clip's frames); ValueError naming what is not."""
    images = [np.asarray(image) for image in images]
    for image in images:
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(
                f"expected an (H, W, 3) uint8 RGB image, got {image.dtype} {image.shape}"
            )
    if len({image.shape for image in images}) > 1:
        raise ValueError(
            f"detect_many takes images of one size, not {sorted({image.shape for image in images})}"
        )
    return images


def largest_first(found: Detections) -> Detections:
    """``found`` reordered by box area, largest first (ties keep their order)."""
    boxes = found.boxes
    order = np.argsort(-(boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), kind="stable")
    return Detections(
        boxes[order], found.probs[order], found.landmarks[order], found.confident()[order]
    )


def overlap_of_smaller(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection of ``box`` (4,) with each of ``boxes`` (N, 4) over the smaller of the
    two areas, (N,) in [0, 1]: detectors draw boxes of different extents around one
    face (dlib's stops at the brows, MTCNN's takes in the forehead), so a face found by
    two detectors overlaps far more by this measure than by IoU."""
    w = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    h = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)

    def area(b):
        return np.clip(b[..., 2] - b[..., 0], 0, None) * np.clip(b[..., 3] - b[..., 1], 0, None)

    smaller = np.minimum(area(box), area(boxes))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(smaller > 0, w * h / smaller, 0.0)


class Detector(Protocol):
    """A face detector (`detectors.registry` builds them by name)."""

    name: str  # what the run summary says ran, e.g. "mtcnn" or "mtcnn+dlib-hog"

    def detect(self, image: np.ndarray) -> Detections:
        """Faces of one (H, W, 3) uint8 RGB image."""

    def detect_many(self, images: Sequence[np.ndarray]) -> list[Detections]:
        """Faces of each of several images of one size (a clip's frames)."""


def largest_input(detector: Detector) -> tuple[int, int] | None:
    """(largest side, most pixels) of an image ``detector`` looks at in its own pixels
    (its optional ``largest_input``), or None: any. An ensemble (a detector holding
    ``detectors``) runs each of them at full resolution: the smallest of theirs."""
    inputs = [
        each
        for each in [
            getattr(detector, "largest_input", None),
            *map(largest_input, getattr(detector, "detectors", ())),
        ]
        if each is not None
    ]
    if not inputs:
        return None
    return min(side for side, _ in inputs), min(area for _, area in inputs)
