"""Which re-detected face is which face ledger entry (`ledger`), and the entries of a
photo's anonymized faces.

A photo that lost its metadata (re-saved by a sharing site, re-encoded as JPEG,
rescaled) is recovered with a key file: detection finds the faces again. Detection
alone cannot tell an anonymized face from one that never was (a face left by
``--min-face-size``, a photo never anonymized, a false detection on a wall), and its
left-to-right numbering shifts every key after a missed face. So each ledger entry
holds the face's key index, where it sits in the photo (centre and side as fractions of
the photo's width, and the photo's aspect ratio: all unchanged by rescaling), a coarse
signature of the anonymized face as published (`signature`: the colour means of 8 x 8
cells over the centre of its aligned crop; robust to JPEG and rescaling) and its
separation: how far the original face's signature lay from it. Recovery restores a
re-detected candidate only when one ledger entry matches it in place and size and its
signature is much nearer the published face's than the original face's was (`match`),
and then with that entry's key index; other candidates, the original face among them
(an anonymization may keep pose, light and colours, so place and a loose likeness
cannot tell the original from its anonymized version), are left exactly as they are
and counted.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dbaf_jax.faces import align
from dbaf_jax.faces.ledger import GRID, Entry

CENTRE = 0.5  # the signature reads the crop's central half: the face, not its background
# A candidate matches an entry within these (measured in docs/photos.md):
MAX_ASPECT_CHANGE = 0.02  # relative change of the photo's width/height
MAX_CENTRE_SHIFT = 0.3  # of the face's side
MAX_SIDE_CHANGE = math.log(1.35)  # |log(side ratio)|
# A candidate's signature must lie within SEPARATION_FRACTION of the entry's separation
# from the published face's, and within MAX_DISTANCE (RMS, colours in [0, 1]): nearer
# the anonymized face than the original ever was, so an unmatched face stays as it is.
SEPARATION_FRACTION = 0.5
MAX_DISTANCE = 0.05
# Recovery of a matched face changes pixels only within this radius (of the anonymized
# crop's side) of the entry's centre: inside the square the box mask changed at
# anonymization (its margin is 0.1 of the side), so a re-detection that moved cannot
# spill the recovered face onto pixels anonymization left alone.
RECOVERY_RADIUS = 0.4


def signature(crop: np.ndarray) -> np.ndarray:
    """(GRID**2 * 3,) colour means of GRID x GRID cells over the central half of an
    aligned crop (S, S, 3) in [-1, 1], mapped to [0, 1]."""
    size = crop.shape[0]
    lo, hi = round(size * (1 - CENTRE) / 2), round(size * (1 + CENTRE) / 2)
    centre = (np.asarray(crop[lo:hi, lo:hi], np.float64) + 1) / 2
    edges = np.linspace(0, centre.shape[0], GRID + 1).round().astype(int)
    cells = [
        [centre[a:b, c:d].mean(axis=(0, 1)) for c, d in zip(edges[:-1], edges[1:])]
        for a, b in zip(edges[:-1], edges[1:])
    ]
    return np.asarray(cells).reshape(-1)


def distance(a: np.ndarray, b: np.ndarray) -> float:
    """The RMS difference of two signatures."""
    return float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))


def place(
    photo_shape: Sequence[int], transform: np.ndarray, size: int
) -> tuple[float, tuple[float, float], float]:
    """(aspect, centre, side) of the face an aligned crop of ``size`` holds (see `Entry`)."""
    height, width = photo_shape[:2]
    inverse = align.invert(transform)
    centre = align.apply(inverse, np.array([[size / 2, size / 2]]))[0]
    side = size * math.sqrt(abs(np.linalg.det(inverse[:, :2])))
    return width / height, (float(centre[0]) / width, float(centre[1]) / width), side / width


def transform_at(
    entry: Entry, transform: np.ndarray, size: int, photo_shape: Sequence[int]
) -> np.ndarray:
    """The (2, 3) photo-to-crop transform with ``transform``'s rotation whose crop of
    ``size`` is centred on ``entry``'s face with its side, in a photo of ``photo_shape``."""
    width = photo_shape[1]
    _, _, side = place(photo_shape, transform, size)
    linear = transform[:, :2] * (side / entry.side)
    centre = np.array(entry.centre) * width
    return np.concatenate([linear, (size / 2 - linear @ centre)[:, None]], axis=1)


def region(entry: Entry, photo_shape: Sequence[int]) -> tuple[tuple[float, float], float]:
    """The photo disc ((x, y), radius in pixels) recovery of ``entry``'s face may change,
    in a photo of ``photo_shape`` (H, W, ...), which may be a rescaled copy."""
    width = photo_shape[1]
    return (entry.centre[0] * width, entry.centre[1] * width), RECOVERY_RADIUS * entry.side * width


def entries(
    photo_shape: Sequence[int],
    indices: Sequence[int],
    transforms: Sequence[np.ndarray],
    crops: np.ndarray,
    originals: np.ndarray | None = None,
    original_signatures: Sequence[np.ndarray] | None = None,
) -> list[Entry]:
    """The ledger entries of a photo's anonymized faces: their key ``indices``, alignment
    ``transforms`` and ``crops`` (N, S, S, 3) of the *output* photo at those transforms,
    with ``originals`` (N, S, S, 3) the input photo's crops, or their `signature`s
    ``original_signatures`` (a photo's run lets its crops go batch by batch); neither for
    re-detected candidates."""
    if originals is not None:
        original_signatures = [signature(original) for original in originals]
    size = crops.shape[1] if len(crops) else 0
    made = []
    for i, (index, transform, crop) in enumerate(zip(indices, transforms, crops)):
        aspect, centre, side = place(photo_shape, transform, size)
        published = signature(crop)
        separation = (
            distance(original_signatures[i], published) if original_signatures is not None else 0.0
        )
        made.append(Entry(int(index), aspect, centre, side, published, separation))
    return made


def in_place(entry: Entry, aspect: float, centre: tuple[float, float], side: float) -> bool:
    """Whether a face at (``aspect``, ``centre``, ``side``) (`place`) lies within the
    place and size bounds of ``entry``."""
    return (
        abs(aspect / entry.aspect - 1) <= MAX_ASPECT_CHANGE
        and math.dist(centre, entry.centre) <= MAX_CENTRE_SHIFT * entry.side
        and abs(math.log(side / entry.side)) <= MAX_SIDE_CHANGE
    )


def near_enough(entry: Entry, near: float) -> bool:
    """Whether a signature ``near`` (`distance`) from ``entry``'s is near enough
    (`SEPARATION_FRACTION`, `MAX_DISTANCE`)."""
    return near <= min(MAX_DISTANCE, SEPARATION_FRACTION * entry.separation)


def match(ledger: Sequence[Entry], candidate: Entry, taken: set[int] = frozenset()) -> int | None:
    """The position in ``ledger`` of the entry ``candidate`` (from a re-detected face)
    is, or None: the nearest signature among entries within the place and size bounds
    (`in_place`), not ``taken``, and near enough (`near_enough`)."""
    best, best_distance = None, math.inf
    for position, entry in enumerate(ledger):
        if position in taken or not in_place(
            entry, candidate.aspect, candidate.centre, candidate.side
        ):
            continue
        near = distance(candidate.signature, entry.signature)
        if near_enough(entry, near) and near < best_distance:
            best, best_distance = position, near
    return best
