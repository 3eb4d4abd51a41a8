"""Any detector over an image of any size in bounded memory: overlapping tiles of a
pyramid built level by level.

A detector's working memory grows with the pixels it is given (MTCNN's pyramid and
summed-area table, dlib's HOG on an image upsampled 4x per side: about 200 bytes a
pixel together), so a 100-megapixel photo given whole passes 12 GB. `Tiled` gives the
detector at most `TILE` x `TILE` pixels at once, and no more than it looks at in its own
pixels (its `base.largest_input`: CenterFace shrinks anything above 1920 px a side or
1920 x 1088 pixels, so its tiles are at most 1088 x 1920, their long side along the
image's):

- An image that fits in one tile goes to the detector as it is (the same detections,
  bit for bit, as without tiling).
- Otherwise level 0 is the image itself, at full resolution (no face too small to be
  found there is looked for on a smaller copy), cut into tiles that overlap by at least
  `OVERLAP` pixels. A detection is kept when it is a whole face of its tile: its side
  at most `max_side` and its box at least `EDGE_MARGIN` of its side away from every
  tile edge that is not the image's own edge. Every face of a side up to ``max_side``
  lies that far inside one tile at least (the overlap is ``max_side`` plus both
  margins), so a face cut by one tile's edge is kept whole from its neighbour.
- Larger faces are looked for on the next level, the previous one shrunk `FACTOR`
  times by averaging `FACTOR` x `FACTOR` blocks (a face over ``max_side`` at one
  level is over ``max_side / FACTOR``, about 57 pixels, at the next: larger than any
  detector's smallest face, and at least O-net's 48 pixels), tiled the same way,
  until a level fits in one tile, which is searched whole. A level above the first
  keeps faces from half that side on (`COARSE_SLACK`: a face's box is not drawn alike
  at two scales), not the smaller ones the finer level has looked at with more pixels
  (there, a coarse copy adds only its own false alarms).
- Boxes and landmarks are mapped back to the image's pixels, and the detections of
  all tiles and levels merged as the ensemble merges its detectors'
  (`ensemble.merge`): one face found by two tiles or two levels is one face, the
  finer level's (its landmarks come from more pixels), sure when either is.

The memory is one tile's detection plus the levels (a ninth of the image, then an
eighty-first, ...), whatever the image's size; the work is about 1.4 times the
untiled detector's on large images (the overlaps and the coarser levels).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dbaf_jax.faces.detectors.base import Detections, Detector, largest_input
from dbaf_jax.faces.detectors.ensemble import merge

TILE = (
    2048  # the largest side any detector is given: about 0.9 GB for MTCNN and dlib's HOG together
)
OVERLAP = 256  # pixels neighbouring tiles share at least
EDGE_MARGIN = 0.25  # of a detection's side: how far inside its tile a kept face lies
FACTOR = 3  # each level is the previous one shrunk this many times per side
COARSE_SLACK = 2  # a level above the first keeps faces from max_side / FACTOR / this on
ALIGN = 64  # tile sides are rounded up to a multiple of this (shared compiled programs)
BAND = 256  # rows of a level made at a time (its temporaries stay small)


def spans(length: int, tile: int = TILE, overlap: int = OVERLAP) -> list[tuple[int, int]]:
    """[start, end) of the tiles along a side of ``length`` pixels: one when it fits,
    else the fewest tiles of a side at most ``tile`` (rounded up to `ALIGN`) that
    cover it with neighbours sharing at least ``overlap`` pixels, spread evenly."""
    if length <= tile:
        return [(0, length)]
    count = math.ceil((length - overlap) / (tile - overlap))
    least = math.ceil((length + (count - 1) * overlap) / count)
    side = min(tile, -(-least // ALIGN) * ALIGN)
    starts = [(i * (length - side)) // (count - 1) for i in range(count)]
    return [(start, start + side) for start in starts]


def downscaled(image: np.ndarray, factor: int = FACTOR) -> np.ndarray:
    """(H, W, 3) uint8 -> (ceil(H / factor), ceil(W / factor), 3) uint8, each pixel the
    rounded mean of a ``factor`` x ``factor`` block (the last row and column of blocks
    repeat the image's edge pixels). Made `BAND` rows at a time."""
    height, width = image.shape[:2]
    rows, cols = -(-height // factor), -(-width // factor)
    out = np.empty((rows, cols, image.shape[2]), np.uint8)
    area = factor * factor
    for top in range(0, rows, BAND):
        bottom = min(top + BAND, rows)
        band = image[top * factor : bottom * factor]
        band = np.pad(
            band,
            ((0, (bottom - top) * factor - len(band)), (0, cols * factor - width), (0, 0)),
            mode="edge",
        )
        sums = band.reshape(bottom - top, factor, cols, factor, -1).sum((1, 3), dtype=np.uint32)
        out[top:bottom] = (sums + area // 2) // area
    return out


def _sides(boxes: np.ndarray) -> np.ndarray:
    return np.sqrt(
        np.clip(boxes[:, 2] - boxes[:, 0], 0, None) * np.clip(boxes[:, 3] - boxes[:, 1], 0, None)
    )


def whole_faces(
    found: Detections,
    shape: tuple[int, int],
    inner: tuple[bool, bool, bool, bool],
    sides: tuple[float, float],
) -> Detections:
    """The detections of a tile of ``shape`` (height, width) that are whole faces of the
    sizes its level looks for: side within ``sides`` (smallest, largest) and box
    `EDGE_MARGIN` of its side inside each edge marked ``inner`` (top, left, bottom,
    right; an edge shared with another tile). A box that is not finite is kept (the
    photo path hides it: fail closed)."""
    boxes = np.asarray(found.boxes, np.float64).reshape(-1, 4)
    side = _sides(boxes)
    margin = EDGE_MARGIN * side
    top, left, bottom, right = inner
    height, width = shape
    whole = (side >= sides[0]) & (side <= sides[1])
    if top:
        whole &= boxes[:, 1] >= margin
    if left:
        whole &= boxes[:, 0] >= margin
    if bottom:
        whole &= boxes[:, 3] <= height - margin
    if right:
        whole &= boxes[:, 2] <= width - margin
    whole |= ~np.isfinite(boxes).all(axis=1)
    return Detections(
        found.boxes[whole], found.probs[whole], found.landmarks[whole], found.confident()[whole]
    )


def in_image(found: Detections, top: int, left: int, scale: int) -> Detections:
    """Detections in a tile at (``top``, ``left``) of a level shrunk ``scale`` times ->
    in the image's pixels (a level pixel u covers image pixels [scale u, scale (u + 1)),
    centre scale u + (scale - 1) / 2)."""
    offset = np.float32((scale - 1) / 2)
    corner = np.array([left, top], np.float32)
    boxes = (np.asarray(found.boxes, np.float32).reshape(-1, 2, 2) + corner) * scale + offset
    landmarks = (np.asarray(found.landmarks, np.float32) + corner) * scale + offset
    return Detections(
        boxes.reshape(-1, 4).astype(np.float32),
        found.probs,
        landmarks.astype(np.float32),
        found.confident(),
    )


def tile_limits(detector: Detector, tile: int = TILE) -> tuple[int, int]:
    """(largest side, most pixels) of a tile for ``detector``: at most ``tile`` x ``tile``
    (memory), and no more than the detector looks at in its own pixels
    (`base.largest_input`)."""
    own = largest_input(detector)
    if own is None:
        return tile, tile * tile
    return min(tile, own[0]), min(tile * tile, own[1])


class Tiled:
    """``detector`` on images of any size in bounded memory (module docstring): an image
    within `tile_limits` (``tile``: the side any tile is kept to) goes to it whole;
    larger ones in tiles of at most those limits."""

    def __init__(
        self, detector: Detector, tile: int = TILE, overlap: int = OVERLAP, factor: int = FACTOR
    ):
        self.side, self.area = tile_limits(detector, tile)
        if not 0 < overlap < self.area // self.side:
            raise ValueError(
                f"the tiles' overlap must lie in (0, {self.area // self.side}), not {overlap}"
            )
        self.detector, self.overlap, self.factor = detector, overlap, factor
        self.name = detector.name
        # A face of this side lies EDGE_MARGIN of it inside one of two tiles sharing `overlap`.
        self.max_side = overlap / (1 + 2 * EDGE_MARGIN)

    def fits(self, shape: tuple[int, ...]) -> bool:
        """Whether an image of ``shape`` goes to the detector whole."""
        return max(shape[:2]) <= self.side and shape[0] * shape[1] <= self.area

    def tile_shape(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """(height, width) of the largest tile of an image of ``shape``: `tile_limits`,
        its long side along the image's (1088 x 1920 for CenterFace on a landscape photo)."""
        short = min(self.side, self.area // self.side)
        return (short, self.side) if shape[1] >= shape[0] else (self.side, short)

    def detect(self, image: np.ndarray) -> Detections:
        """Faces of one (H, W, 3) uint8 RGB image of any size."""
        if self.fits(image.shape):
            return self.detector.detect(image)
        found, level, scale = [], image, 1
        while True:
            coarsest = self.fits(level.shape)
            height, width = level.shape[:2]
            sides = (
                0.0 if scale == 1 else self.max_side / (self.factor * COARSE_SLACK),
                np.inf if coarsest else self.max_side,
            )
            tall, wide = self.tile_shape(level.shape)
            for top, bottom in spans(height, tall, self.overlap):
                for left, right in spans(width, wide, self.overlap):
                    tile = np.ascontiguousarray(level[top:bottom, left:right])
                    inner = (top > 0, left > 0, bottom < height, right < width)
                    detections = whole_faces(
                        self.detector.detect(tile), tile.shape[:2], inner, sides
                    )
                    found.append(in_image(detections, top, left, scale))
            if coarsest:
                return merge(found)
            level, scale = downscaled(level, self.factor), scale * self.factor

    def detect_many(self, images: Sequence[np.ndarray]) -> list[Detections]:
        """Faces of each image; images that fit go to the detector together."""
        if all(self.fits(image.shape) for image in images):
            return self.detector.detect_many(images)
        return [self.detect(image) for image in images]
