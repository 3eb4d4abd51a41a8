"""Faces in whole photos: find and align every face, paste results back.

`PhotoFaces` bundles what the photo path needs besides the DBAF model: the MTCNN
detector, an optional BiSeNet `FaceParser` for soft masks (else the box mask), the
crop size (the encoder's input) and the smallest face to anonymize (default 0: every
face the detector reports, however small; a small face's crop is upsampled from the
photo to the model's input size and pasted back at its own size). Faces are
numbered left to right by the x of their eye centre among the faces kept, so that a
re-detection on the anonymized photo (recovery without metadata) numbers them alike;
the number selects the face's key (`dbaf_jax.keys.face_seed`).

A detected face whose landmarks cannot be aligned (not finite, or a quad under
`MIN_USABLE_SIDE` pixels) is not given to the model; `find` returns its box in
`FoundFaces.unusable`, for the irreversible fallback (`paste.hide`).

`AlignedFace` is what the output's metadata records per face (index, transform, crop
size); `faces_from_metadata` validates it: image metadata is untrusted input.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from dbaf_jax.errors import ConfigError, InputError
from dbaf_jax.faces import align, paste
from dbaf_jax.faces.detect import FaceDetector

MIN_FACE_SIZE = 0.0  # default FFHQ quad side (pixels) below which faces are left alone: none is
MIN_USABLE_SIDE = 4.0  # a smaller quad has landmarks too degenerate to align a face from
MAX_FACES = 1024  # more in one image's metadata is refused as malformed
# Recorded faces are checked as anonymize could have written them, so that one image's
# metadata buys no more work than an honest photo of its size: each face's quad at
# least MIN_RECORDED_SIDE pixels and centred inside the photo, no two centred within
# half the smaller one's side (the same face twice), and at most one face per
# FACE_AREA_PER_FACE square pixels of the photo (and MAX_FACES).
MIN_RECORDED_SIDE = 8.0
FACE_AREA_PER_FACE = 32 * 32
MAX_TRANSFORM_VALUE = 1e9  # beyond any photo-to-crop scale or offset; keeps det() finite


def max_recorded_faces(photo_shape: Sequence[int]) -> int:
    """The most faces the metadata of a photo of this (H, W, ...) shape may record."""
    return max(1, min(MAX_FACES, int(photo_shape[0]) * int(photo_shape[1]) // FACE_AREA_PER_FACE))


@dataclasses.dataclass(frozen=True)
class AlignedFace:
    """One face of a photo: its index (which key), the (2, 3) photo-to-crop transform
    and the crop's size it is for."""

    index: int
    transform: np.ndarray
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "transform": [float(v) for v in self.transform.reshape(-1)], "size": self.size}


@dataclasses.dataclass(frozen=True)
class FoundFaces:
    """The faces of one photo to process, the quad sides (pixels) of those left alone
    as too small (the user's choice), and the (4,) boxes (x1, y1, x2, y2) of detected
    faces the model cannot take (to hide by the fallback)."""

    faces: list[AlignedFace]
    too_small: list[float]
    unusable: list[np.ndarray] = dataclasses.field(default_factory=list)

    @property
    def found(self) -> int:
        """Every face the detector reported."""
        return len(self.faces) + len(self.too_small) + len(self.unusable)


def _face_from_dict(entry: Any, size: int) -> AlignedFace:
    if not isinstance(entry, dict) or set(entry) != {"index", "transform", "size"}:
        raise ValueError("each face must be an object with exactly index, transform and size")
    index, values, face_size = entry["index"], entry["transform"], entry["size"]
    if type(index) is not int or not 0 <= index < MAX_FACES:
        raise ValueError(f"face index must be an integer in [0, {MAX_FACES}), got {index!r}")
    if type(face_size) is not int or face_size != size:
        raise ValueError(f"face crop size {face_size!r} is not this model's input size {size}")
    if not isinstance(values, list) or len(values) != 6 or not all(type(v) in (int, float) and math.isfinite(v) for v in values):
        raise ValueError("a face transform must be a list of 6 finite numbers")
    if max(abs(v) for v in values) > MAX_TRANSFORM_VALUE:
        raise ValueError(f"a face transform's numbers must lie within +-{MAX_TRANSFORM_VALUE:g}")
    transform = np.asarray(values, np.float64).reshape(2, 3)
    if abs(np.linalg.det(transform[:, :2])) < 1e-12:
        raise ValueError("a face transform must be invertible")
    return AlignedFace(index, transform, face_size)


def faces_from_metadata(meta: dict[str, Any], photo_shape: Sequence[int], size: int) -> list[AlignedFace]:
    """The faces recorded in an output's metadata, checked against the photo they came
    with and the model's crop size; InputError saying what is wrong otherwise."""
    try:
        photo = meta["photo"]
        if not isinstance(photo, dict) or [photo.get("height"), photo.get("width")] != list(photo_shape[:2]):
            raise ValueError(f"recorded photo size {photo!r} is not the image's {tuple(photo_shape[:2])}")
        entries = meta["faces"]
        most = max_recorded_faces(photo_shape)
        if not isinstance(entries, list) or len(entries) > most:
            raise ValueError(f"faces must be a list of at most {most} for a {photo_shape[1]}x{photo_shape[0]} photo")
        faces = [_face_from_dict(entry, size) for entry in entries]
        if len({face.index for face in faces}) != len(faces):
            raise ValueError("face indices repeat")
        _check_placement(faces, photo_shape)
    except KeyError as err:
        raise InputError(f"malformed face metadata: no {err}") from None
    except ValueError as err:
        raise InputError(f"malformed face metadata: {err}") from None
    return faces


def _check_placement(faces: Sequence[AlignedFace], photo_shape: Sequence[int]) -> None:
    """ValueError when a recorded face is smaller than anonymize records, centred
    outside the photo, or on another (repeated or overlapping transforms)."""
    if not faces:
        return
    linear = np.stack([face.transform[:, :2] for face in faces])  # (N, 2, 2) photo -> crop
    sides = np.array([face.size for face in faces]) / np.sqrt(np.abs(np.linalg.det(linear)))
    centres_in_crop = np.array([[face.size / 2, face.size / 2] for face in faces]) - np.stack([f.transform[:, 2] for f in faces])
    centres = np.linalg.solve(linear, centres_in_crop[..., None])[..., 0]  # (N, 2) x, y in the photo
    small = np.flatnonzero(sides < MIN_RECORDED_SIDE)
    if small.size:
        raise ValueError(f"face {faces[small[0]].index} is {sides[small[0]]:.1f} px, below the {MIN_RECORDED_SIDE:g} px anonymize records")
    height, width = int(photo_shape[0]), int(photo_shape[1])
    outside = np.flatnonzero((centres[:, 0] < 0) | (centres[:, 0] > width) | (centres[:, 1] < 0) | (centres[:, 1] > height))
    if outside.size:
        raise ValueError(f"face {faces[outside[0]].index} is centred outside the photo")
    distance = np.hypot(*(centres[:, None, :] - centres[None, :, :]).transpose(2, 0, 1))
    close = distance < 0.5 * np.minimum(sides[:, None], sides[None, :])
    np.fill_diagonal(close, False)
    if close.any():
        i, j = np.argwhere(close)[0]
        raise ValueError(f"faces {faces[i].index} and {faces[j].index} overlap (one face recorded twice?)")


def photo_metadata(photo_shape: Sequence[int], faces: Sequence[AlignedFace]) -> dict[str, Any]:
    """The metadata fields of a photo output (beside the key record and the model)."""
    return {"photo": {"height": int(photo_shape[0]), "width": int(photo_shape[1])}, "faces": [f.to_dict() for f in faces]}


class PhotoFaces:
    """Detection, alignment, masks and paste-back for the faces of whole photos."""

    def __init__(
        self,
        detector: FaceDetector,
        size: int,
        parser: paste.FaceParser | None = None,
        min_face_size: float = MIN_FACE_SIZE,
    ):
        if not min_face_size >= 0:
            raise ConfigError(f"min_face_size must not be negative, not {min_face_size}")
        self.detector = detector
        self.size = size
        self.parser = parser
        self.min_face_size = min_face_size

    def find(self, photo: np.ndarray) -> FoundFaces:
        """Detects the faces of ``photo`` (H, W, 3) uint8 and aligns the large enough ones."""
        detections = self.detector.detect(photo)
        kept, too_small, unusable = [], [], []
        for box, points in zip(detections.boxes, detections.landmarks):
            side = align.quad_side(points) if np.isfinite(points).all() else math.nan
            if not side >= MIN_USABLE_SIDE:
                unusable.append(np.asarray(box, np.float64))
            elif side < self.min_face_size:
                too_small.append(side)
            else:
                kept.append(points)
        kept.sort(key=lambda points: float(points[:2, 0].mean()))
        faces = [AlignedFace(i, align.alignment_transform(points, self.size), self.size) for i, points in enumerate(kept)]
        return FoundFaces(faces, too_small, unusable)

    def crops(self, photo: np.ndarray, faces: Sequence[AlignedFace]) -> np.ndarray:
        """The faces' aligned crops (N, size, size, 3) in [-1, 1]."""
        crops = [align.crop(photo, face.transform, self.size) for face in faces]
        return np.stack(crops).astype(np.float32) / np.float32(127.5) - 1 if crops else np.zeros((0, self.size, self.size, 3), np.float32)

    def masks(self, before: np.ndarray, after: np.ndarray) -> np.ndarray:
        """Masks (N, s, s) for pasting ``after`` (N, s, s, 3) over the region of ``before``
        (the same faces as they are in the photo, any size): the box mask, or the union
        of the parser's face regions in both."""
        count, size = after.shape[:2]
        if self.parser is None:
            return np.broadcast_to(paste.box_mask(size), (count, size, size))
        if before.shape[1] != size:
            before = np.stack([align.warp(face, align.scaled(np.eye(2, 3), before.shape[1] / size), (size, size)) for face in before])
        return np.maximum(self.parser.masks(before), self.parser.masks(after))

    def paste(self, photo: np.ndarray, faces: Sequence[AlignedFace], results: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """``photo`` with each face's result (N, s, s, 3) in [-1, 1] blended in through its mask."""
        for face, result, mask in zip(faces, results, masks):
            photo = paste.paste(photo, result, mask, align.scaled(face.transform, result.shape[0] / face.size))
        return photo
