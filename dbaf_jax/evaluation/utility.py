"""Utility of anonymized faces for a face detector (the DBAF paper's Table III, MTCNN row).

The paper names the measures but not their definitions; these are ours:

- detection rate: the fraction of anonymized images in which MTCNN finds at least one face;
- bounding-box distance: for each image where MTCNN finds a face in both the original
  and the anonymized image, the L2 distance in pixels between corresponding corners of
  the two largest boxes, averaged over the two corners (top-left, bottom-right); then
  the mean over those images;
- landmark distance: likewise the L2 distance in pixels between corresponding
  landmarks of the two largest faces, averaged over MTCNN's five points (the paper
  uses 68 points from other detectors; MTCNN gives five), then the mean over images.

Distances are in the pixels of the images compared (the generator's output size).
With no image pair where both have a face, both distances are None.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dbaf_jax.faces.detectors.base import Detections, Detector
from dbaf_jax.storage.images import to_uint8


def largest_face_distances(original: Detections, other: Detections) -> tuple[float, float] | None:
    """(box distance, landmark distance) between the largest faces, or None if either has none."""
    if not len(original.boxes) or not len(other.boxes):
        return None
    corners = np.linalg.norm(
        original.boxes[0].reshape(2, 2) - other.boxes[0].reshape(2, 2), axis=-1
    )
    points = np.linalg.norm(original.landmarks[0] - other.landmarks[0], axis=-1)
    return float(corners.mean()), float(points.mean())


@dataclasses.dataclass
class DetectionUtility:
    """Accumulates detections of (original, anonymized) pairs batch by batch."""

    detector: Detector
    images: int = 0
    found_original: int = 0
    found: int = 0
    box_distances: list[float] = dataclasses.field(default_factory=list)
    landmark_distances: list[float] = dataclasses.field(default_factory=list)

    def update(self, originals: np.ndarray, anonymized: np.ndarray) -> None:
        """Originals and anonymized images (B, H, W, 3) in [-1, 1]."""
        for original, other in zip(to_uint8(originals), to_uint8(anonymized)):
            found_original, found = self.detector.detect(original), self.detector.detect(other)
            self.images += 1
            self.found_original += bool(len(found_original.boxes))
            self.found += bool(len(found.boxes))
            pair = largest_face_distances(found_original, found)
            if pair is not None:
                self.box_distances.append(pair[0])
                self.landmark_distances.append(pair[1])

    def result(self) -> dict[str, float | int | None]:
        mean = lambda values: float(np.mean(values)) if values else None  # noqa: E731
        return {
            "detection_rate": self.found / self.images if self.images else None,
            "detection_rate_original": self.found_original / self.images if self.images else None,
            "box_distance": mean(self.box_distances),
            "landmark_distance": mean(self.landmark_distances),
            "pairs": len(self.box_distances),
        }
