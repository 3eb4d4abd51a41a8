"""Several detectors as one: every detector runs on the image and their detections are
merged, so that a face yields one detection however many detectors (or tiles, or
pyramid levels) found it.

One face or two (`same_face`): detectors draw boxes of different extents around one
face (dlib's stops at the brows, MTCNN's takes in the forehead, CenterFace's its own),
so boxes alone cannot say. Landmarks can: every detector gives the five points FFHQ
alignment uses, and two detections of one face put the eyes and the nose at the same
places, whatever their boxes. Two detections are one face when their boxes overlap
(the intersection covers at least `MERGE_OVERLAP` of the smaller box), the sides of
their FFHQ quads (the face's size as the landmarks measure it, `align.ffhq_quad`)
differ by at most a factor `MERGE_SIDE_RATIO`, and each eye and the nose of one lie
within `LANDMARK_TOLERANCE` of the smaller quad's side of the other's. Measured on
tests/data's photos and the frames of a real clip (docs/video.md): one face's two
detections by MTCNN and dlib's HOG agree within 0.15 of the side; the nearest two
faces' detections are 0.39 apart.

Landmarks can also disagree on one face: MTCNN extrapolates them beyond the edge of a
face the frame cuts. So two detections of different detectors are also one face when
their boxes say so (the intersection covers at least `BOX_OVERLAP` of the smaller box,
their sides within a factor `BOX_SIDE_RATIO`) and their quads are at one place as a
record counts places (`faces.places.at_one_place`: centres within half the smaller
side), or when either has no landmarks to compare (not finite, or collapsed to a point).
Two faces that close would be recorded as one face twice.

Of one face's detections the first detector's is kept (its box and landmarks: the
default order puts the detector first whose points FFHQ alignment is made for), and the
face is sure when any of its detections is. A detector's own detections of one face
(two boxes its suppression kept) are merged by the same rule. The video tracker joins
tracks by this rule too (`video.tracks`), so one face is one track; photos and clip
frames are merged by it even when one detector runs (`faces.photos`, `video.tracks`).

What the merge leaves of a low-confidence detection on a sure face (a box on part of
the face, or landmarks that disagree) is that face or part of it when its box lies
mostly inside the sure face's box (`on_faces`: at least `ON_FACE` of its area): a
different person's face that far behind another shows less than a fifth of itself. The
fallback does not pixelate such a detection over the face anonymized there, whose
recovery needs its pixels; a low-confidence box that only touches a face is hidden.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dbaf_jax.faces import align, places
from dbaf_jax.faces.detectors.base import (
    LANDMARKS,
    Detections,
    Detector,
    empty,
    largest_first,
    overlap_of_smaller,
)

MERGE_OVERLAP = 0.3
MERGE_SIDE_RATIO = 1.5
LANDMARK_TOLERANCE = 0.25
BOX_OVERLAP = 0.5
BOX_SIDE_RATIO = 2.0
SAME_POINTS = [align.LEFT_EYE, align.RIGHT_EYE, align.NOSE]  # the points detectors agree on
ON_FACE = 0.8  # of a low-confidence box's area inside a sure face's box: that face (`on_faces`)


def quads(landmarks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N, 5, 2) -> the centres (N, 2) and sides (N,) in pixels of the faces' FFHQ quads
    (where their crops are cut: `align.ffhq_quad`); NaN where the landmarks are not
    finite or collapse to a point (nothing to compare)."""
    centres, sides = np.full((len(landmarks), 2), np.nan), np.full(len(landmarks), np.nan)
    for i, points in enumerate(landmarks):
        if np.isfinite(points).all():
            with np.errstate(invalid="ignore", divide="ignore"):  # collapsed points: NaN
                quad = align.ffhq_quad(points)
            side = float(np.hypot(*(quad[3] - quad[0])))
            if side > 0:
                centres[i], sides[i] = quad.mean(0), side
    return centres, sides


def _box_sides(boxes: np.ndarray) -> np.ndarray:
    return np.sqrt(
        np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)
    )


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a, b) / np.maximum(np.minimum(a, b), 1e-6)


def same_face(
    boxes: np.ndarray, landmarks: np.ndarray, source: np.ndarray | None = None
) -> np.ndarray:
    """(N, N) bool: which pairs of the detections ``boxes`` (N, 4) and ``landmarks``
    (N, 5, 2) are one face (module doc); the diagonal is True. With ``source`` (N,)
    (which detector found each), the boxes' rule never joins two of one detector: its
    suppression already kept them apart."""
    return _compared(boxes, landmarks, source)[0]


def _compared(
    boxes: np.ndarray, landmarks: np.ndarray, source: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`same_face`, and how near each pair is (N, N), higher nearer: pairs whose points
    agree first, then pairs with points to compare, each by their quads' centres
    (relative to the smaller side), then pairs compared by boxes alone (by overlap)."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    landmarks = np.asarray(landmarks, np.float64).reshape(len(boxes), LANDMARKS, 2)
    count = len(boxes)
    overlap = (
        np.stack([overlap_of_smaller(box, boxes) for box in boxes]) if count else np.zeros((0, 0))
    )
    centres, sides = quads(landmarks)
    usable = np.isfinite(sides)
    both = usable[:, None] & usable[None, :]
    with np.errstate(invalid="ignore"):
        smaller = np.minimum(sides[:, None], sides[None, :])
        apart = np.linalg.norm(
            landmarks[:, None, SAME_POINTS] - landmarks[None, :, SAME_POINTS], axis=-1
        ).max(-1)
        by_points = (
            both
            & (overlap >= MERGE_OVERLAP)
            & (_ratio(sides[:, None], sides[None, :]) <= MERGE_SIDE_RATIO)
            & (apart <= LANDMARK_TOLERANCE * smaller)
        )
        one_place = places.at_one_place(sides[None], centres[None])[0]
    box_sides = _box_sides(boxes)
    by_boxes = (
        (overlap >= BOX_OVERLAP)
        & (_ratio(box_sides[:, None], box_sides[None, :]) <= BOX_SIDE_RATIO)
        & (one_place | ~both)
    )
    if source is not None:
        by_boxes &= source[:, None] != source[None, :]
    same = by_points | by_boxes
    np.fill_diagonal(same, True)
    with np.errstate(invalid="ignore", divide="ignore"):
        apart_centres = np.linalg.norm(centres[:, None] - centres[None, :], axis=-1) / smaller
    nearness = np.where(by_points, 4.0, 0.0) + np.where(
        both, 2.0 - np.nan_to_num(apart_centres, nan=1.0), overlap - 1.0
    )
    return same, nearness


def merge(found: Sequence[Detections]) -> Detections:
    """One image's detections by several detectors (in priority order) -> one detection
    per face, largest first; a merged face is sure when any of its detections is."""
    if not found:
        return empty()
    boxes = np.concatenate([f.boxes for f in found]).astype(np.float32)
    probs = np.concatenate([f.probs for f in found]).astype(np.float32)
    landmarks = np.concatenate([f.landmarks for f in found]).astype(np.float32)
    sure = np.concatenate([f.confident() for f in found])
    source = np.concatenate([np.full(len(f.boxes), i) for i, f in enumerate(found)])
    same, nearness = _compared(boxes, landmarks, source)
    kept: list[int] = []
    for i in range(len(boxes)):  # by detector, then as each found them
        matches = [k for k in kept if same[i, k]]
        if matches:  # one face: the nearest (another kept detection is another face)
            nearest = max(matches, key=lambda k: nearness[i, k])
            sure[nearest] |= sure[i]
            continue
        kept.append(i)
    rows = np.asarray(kept, np.int64)
    return largest_first(Detections(boxes[rows], probs[rows], landmarks[rows], sure[rows]))


class Ensemble:
    """``detectors`` (priority order) run on every image, their detections merged (`merge`)."""

    def __init__(self, detectors: Sequence[Detector]):
        if not detectors:
            raise ValueError("an ensemble needs at least one detector")
        self.detectors = list(detectors)
        self.name = "+".join(d.name for d in self.detectors)

    def detect(self, image: np.ndarray) -> Detections:
        return merge([d.detect(image) for d in self.detectors])

    def detect_many(self, images: Sequence[np.ndarray]) -> list[Detections]:
        per_detector = [d.detect_many(images) for d in self.detectors]
        return [merge(found) for found in zip(*per_detector)]


def inside(boxes: np.ndarray, regions: np.ndarray) -> np.ndarray:
    """(N, M): the share of each of ``boxes`` (N, 4)'s area that lies inside each of
    ``regions`` (M, 4), boxes as (x1, y1, x2, y2); 0 for a box of no area or not finite."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 1, 4)
    regions = np.asarray(regions, np.float64).reshape(1, -1, 4)
    width = np.minimum(boxes[..., 2], regions[..., 2]) - np.maximum(boxes[..., 0], regions[..., 0])
    height = np.minimum(boxes[..., 3], regions[..., 3]) - np.maximum(boxes[..., 1], regions[..., 1])
    area = (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.clip(width, 0, None) * np.clip(height, 0, None) / area
    return np.where(np.isfinite(share) & (area > 0), share, 0.0)


def on_faces(boxes: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """(N,) bool: which low-confidence detections ``boxes`` (N, 4) lie on one of the sure
    faces ``faces`` (M, 4) (their boxes): at least `ON_FACE` of a box's area inside one
    face's box (module doc). A box not finite, or of no area, lies on none (hidden)."""
    if not len(boxes) or not len(faces):
        return np.zeros(len(boxes), bool)
    return np.asarray((inside(boxes, faces) >= ON_FACE).any(axis=1), bool)
