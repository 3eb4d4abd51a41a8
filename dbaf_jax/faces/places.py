"""Where a recorded face may lie: the bounds an anonymized photo's metadata
(`dbaf_jax.faces.metadata`) and a clip's sidecar (`dbaf_jax.video.sidecar`) hold their faces
to, and which faces anonymize can record (`unrecordable`).

A face is recorded as its photo-to-crop transform; its place is the side and centre of
its crop in the photo (`face_places`). Recovery reads recorded faces as untrusted input,
so one image's faces buy no more work than an honest image of its size: each face's
crop at least `MIN_RECORDED_SIDE` pixels and centred inside the image or at most
`OUTSIDE_MARGIN` of its side beyond its edge (a face cut by the edge: the top row of a
crowd, a clip's face leaving the frame, centred up to a tenth of its side above the
frame measured), at most one face per `FACE_AREA_PER_FACE` square pixels of the image
(and `MAX_FACES`), and no more than `STACK` faces at one place (`at_one_place`: centres
within half the smaller side).

Several faces at one place happen in honest images: a crowd's faces partly behind each
other, whose centres lie within 0.7 of a face's width (with a pair allowed, 4 of 60
generated crowds of tests/video/test_recoverable.py were refused, with three none), and
a clip track's interpolated frames crossing another face; one face recorded twice is
what the detectors' merge (`detectors.ensemble`) prevents. So photos and clips allow
three; the count per image bounds the work whatever the overlaps.

Anonymize records only what recovery takes: a face smaller than recorded or centred
beyond the edge (`unrecordable`) is hidden by the fallback instead (`faces.photos`,
`video.sidecar.recordable`).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

MIN_RECORDED_SIDE = 8.0
OUTSIDE_MARGIN = 0.25
FACE_AREA_PER_FACE = 32 * 32
MAX_FACES = 1024  # more in one image is refused as malformed
STACK = 3  # faces one place of an image may hold (module doc)


def max_recorded_faces(photo_shape: Sequence[int]) -> int:
    """The most faces a photo or frame of this (H, W, ...) shape may record."""
    return max(1, min(MAX_FACES, int(photo_shape[0]) * int(photo_shape[1]) // FACE_AREA_PER_FACE))


def face_places(transforms: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(sides (N,), centres (N, 2) as x, y) in pixels of the faces whose photo-to-crop
    ``transforms`` (N, 2, 3) make crops of ``size``."""
    linear = transforms[:, :, :2]
    sides = size / np.sqrt(np.abs(np.linalg.det(linear)))
    centres = np.linalg.solve(linear, (size / 2 - transforms[:, :, 2])[..., None])[..., 0]
    return sides, centres


def misplaced(
    sides: np.ndarray, centres: np.ndarray, photo_shape: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(N,) bool each: which faces (`face_places`) are smaller than anonymize records, and
    which are centred outside a photo or frame of ``photo_shape`` (H, W, ...), farther
    than `OUTSIDE_MARGIN` of their side beyond its edge."""
    height, width = int(photo_shape[0]), int(photo_shape[1])
    margin = OUTSIDE_MARGIN * sides
    outside = (
        (centres[:, 0] < -margin)
        | (centres[:, 0] > width + margin)
        | (centres[:, 1] < -margin)
        | (centres[:, 1] > height + margin)
    )
    return sides < MIN_RECORDED_SIDE, outside


def unrecordable(transforms: np.ndarray, size: int, photo_shape: Sequence[int]) -> np.ndarray:
    """(N,) bool: which faces of ``transforms`` (N, 2, 3), crops of ``size``, no record can
    hold (`misplaced`: too small, or centred beyond the edge of ``photo_shape``)."""
    if not len(transforms):
        return np.zeros(0, bool)
    small, outside = misplaced(*face_places(np.asarray(transforms, np.float64), size), photo_shape)
    return small | outside


def check_places(
    sides: np.ndarray, centres: np.ndarray, photo_shape: Sequence[int], name: Callable[[int], str]
) -> None:
    """ValueError when a face (`face_places`, named by ``name(position)``) is smaller than
    anonymize records or centred outside a photo or frame of ``photo_shape`` (H, W, ...)."""
    small, outside = (np.flatnonzero(mask) for mask in misplaced(sides, centres, photo_shape))
    if small.size:
        raise ValueError(
            f"{name(small[0])} is {sides[small[0]]:.1f} px, below the {MIN_RECORDED_SIDE:g} px anonymize records"
        )
    if outside.size:
        raise ValueError(
            f"{name(outside[0])} is centred outside the {'photo' if len(photo_shape) != 2 else 'frame'} "
            f"by more than {OUTSIDE_MARGIN:g} of its side"
        )


def at_one_place(sides: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """(G, N, N) bool: which faces of each group, sides (G, N) and centres (G, N, 2), are
    centred within half the smaller one's side of each other; a face is not at one place
    with itself."""
    distance = np.hypot(*np.moveaxis(centres[:, :, None, :] - centres[:, None, :, :], -1, 0))
    close = distance < 0.5 * np.minimum(sides[:, :, None], sides[:, None, :])
    close[:, np.arange(sides.shape[1]), np.arange(sides.shape[1])] = False
    return close


def overlapping(
    sides: np.ndarray, centres: np.ndarray, together: int = STACK
) -> tuple[int, int, int, int] | None:
    """The first (group, i, j, count) where face i of a group, sides (G, N) and centres
    (G, N, 2), has ``count`` >= ``together`` other faces of its group at one place
    (`at_one_place`; j the first of them), or None. The default: more than `STACK`
    faces at one place."""
    close = at_one_place(sides, centres)
    counts = close.sum(axis=-1)
    found = np.argwhere(counts >= together)
    if not found.size:
        return None
    group, i = (int(v) for v in found[0])
    return group, i, int(np.flatnonzero(close[group, i])[0]), int(counts[group, i])
