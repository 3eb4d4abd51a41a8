"""Faces in whole photos: find and align every face, paste results back.

`PhotoFaces` bundles what the photo path needs besides the DBAF model: the face
detector (`detectors.registry`: by default every installed detector, merged; a photo
larger than a tile goes to it in overlapping tiles of a pyramid, `detectors.tiling`,
so that its memory does not grow with the photo), an
optional BiSeNet `FaceParser` for soft masks (else the box mask), the crop size (the
encoder's input) and the smallest face to anonymize (default 0: every face the
detector reports, however small; a small face's crop is upsampled from the
photo to the model's input size and pasted back at its own size). Faces are
numbered left to right by the x of their eye centre among the faces kept, so that a
re-detection on the anonymized photo (recovery without metadata) numbers them alike;
the number selects the face's key (`dbaf_jax.storage.keys.face_seed`).

A photo's detections are merged into one per face (`detectors.ensemble.merge`) even
when one detector runs, as a clip's frames are (`video.tracks`). A detected face whose
landmarks cannot be aligned (not finite, or a quad under `MIN_USABLE_SIDE` pixels) is
not given to the model; `find` returns its box in `FoundFaces.unusable`, for the
irreversible fallback (`paste.hide`). So does, when anonymizing, a face no record of
its place can hold (`places.unrecordable`: a crop under 8 px, or centred beyond the
photo's edge), so that what anonymize records, recover takes (`metadata`). A detection
of the detectors' low-confidence band (`FoundFaces.doubtful`) is hidden when
anonymizing: it may be a face, so it is hidden rather than left, unless it lies on a
face anonymized there (`ensemble.on_faces`: that face or part of it, whose recovery
needs its pixels); recovery (``hide_doubtful=False``) takes it as a face, since an
anonymized face may score lower than the original did.

`AlignedFace` is what the output's metadata records per face (index, transform, crop
size; written and checked by `dbaf_jax.faces.metadata`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.faces import align, paste, places
from dbaf_jax.faces.detectors import ensemble, tiling
from dbaf_jax.faces.detectors.base import Detector

MIN_FACE_SIZE = 0.0  # default FFHQ quad side (pixels) below which faces are left alone: none is
MIN_USABLE_SIDE = 4.0  # a smaller quad has landmarks too degenerate to align a face from


@dataclasses.dataclass(frozen=True)
class AlignedFace:
    """One face of a photo: its index (which key), the (2, 3) photo-to-crop transform
    and the crop's size it is for."""

    index: int
    transform: np.ndarray
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "transform": [float(v) for v in self.transform.reshape(-1)],
            "size": self.size,
        }


def usable_side(points: np.ndarray) -> float | None:
    """The FFHQ quad side (pixels) of a detection's landmarks (5, 2), or None when the
    model cannot take the face: landmarks not finite, or a quad under `MIN_USABLE_SIDE`."""
    if not np.isfinite(points).all():
        return None
    side = align.quad_side(points)
    return side if side >= MIN_USABLE_SIDE else None


@dataclasses.dataclass(frozen=True)
class FoundFaces:
    """The faces of one photo to process, the quad sides (pixels) of those left alone
    as too small (the user's choice), the (4,) boxes (x1, y1, x2, y2) of detected
    faces the model cannot take or no record can hold and of low-confidence detections
    (both hidden by the fallback), and optionally for each face
    the photo disc ((x, y), radius in pixels) outside which its paste changes nothing
    (recovery without metadata: `faces.ledger_match.region`)."""

    faces: list[AlignedFace]
    too_small: list[float]
    unusable: list[np.ndarray] = dataclasses.field(default_factory=list)
    regions: list[tuple[tuple[float, float], float]] | None = None
    doubtful: list[np.ndarray] = dataclasses.field(default_factory=list)

    @property
    def found(self) -> int:
        """Every face the detector reported."""
        return len(self.faces) + len(self.too_small) + len(self.unusable) + len(self.doubtful)

    @property
    def to_hide(self) -> list[np.ndarray]:
        """The boxes the fallback hides: unusable faces, then low-confidence detections."""
        return self.unusable + self.doubtful


class PhotoFaces:
    """Detection, alignment, masks and paste-back for the faces of whole photos.
    ``notes`` are what a run's summary must say about detection (which detector did
    not run and why, `detectors.registry.build`); ``tile``: the largest side any
    detector is given at once, less for one that looks at less in its own pixels
    (`detectors.tiling.Tiled`, `detectors.tiling.tile_limits`)."""

    def __init__(
        self,
        detector: Detector,
        size: int,
        parser: paste.FaceParser | None = None,
        min_face_size: float = MIN_FACE_SIZE,
        hide_doubtful: bool = True,
        notes: Sequence[str] = (),
        tile: int = tiling.TILE,
    ):
        if not min_face_size >= 0:
            raise ConfigError(f"min_face_size must not be negative, not {min_face_size}")
        self.detector = detector
        self.size = size
        self.parser = parser
        self.min_face_size = min_face_size
        self.hide_doubtful = hide_doubtful
        self.notes = list(notes)
        self.tile = tile

    def sharing(self, hide_doubtful: bool) -> PhotoFaces:
        """These faces' detectors, parser and bounds (loaded once, their weights hashed
        once), with low-confidence detections hidden (``hide_doubtful``: anonymizing) or
        taken as faces (recovering)."""
        return PhotoFaces(
            self.detector,
            self.size,
            self.parser,
            self.min_face_size,
            hide_doubtful,
            self.notes,
            self.tile,
        )

    def describe(self) -> str:
        """The detection line of a run's summary."""
        band = (
            "low-confidence detections pixelated"
            if self.hide_doubtful
            else "low-confidence detections taken as faces"
        )
        return f"detectors: {self.detector.name} ({band})"

    def find(self, photo: np.ndarray) -> FoundFaces:
        """Detects the faces of ``photo`` (H, W, 3) uint8 of any size (in tiles when it is
        larger than one), one detection per face (`ensemble.merge`, as a clip's frames are),
        and aligns the large enough ones. Anonymizing (``hide_doubtful``), a face no record
        can hold (`places.unrecordable`: smaller than recorded, centred beyond the edge) is
        hidden instead, and a low-confidence detection lying on an anonymized face
        (`ensemble.on_faces`) is not hidden over it."""
        detections = ensemble.merge([tiling.Tiled(self.detector, self.tile).detect(photo)])
        kept, boxes, too_small, unusable, doubtful = [], [], [], [], []
        for box, points, sure in zip(
            detections.boxes, detections.landmarks, detections.confident()
        ):
            side = usable_side(points)
            box = np.asarray(box, np.float64)
            if not sure and self.hide_doubtful:
                doubtful.append(box)
            elif side is None:
                unusable.append(box)
            elif side < self.min_face_size:
                too_small.append(side)
            else:
                kept.append(points)
                boxes.append(box)
        transforms = [align.alignment_transform(points, self.size) for points in kept]
        if self.hide_doubtful:
            cannot = places.unrecordable(np.reshape(transforms, (-1, 2, 3)), self.size, photo.shape)
            unusable += [box for box, hidden in zip(boxes, cannot) if hidden]
            kept, boxes, transforms = (
                [each for each, hidden in zip(values, cannot) if not hidden]
                for values in (kept, boxes, transforms)
            )
            on_face = ensemble.on_faces(np.reshape(doubtful, (-1, 4)), np.reshape(boxes, (-1, 4)))
            doubtful = [box for box, on in zip(doubtful, on_face) if not on]
        order = sorted(range(len(kept)), key=lambda i: float(kept[i][:2, 0].mean()))
        faces = [AlignedFace(n, transforms[i], self.size) for n, i in enumerate(order)]
        return FoundFaces(faces, too_small, unusable, doubtful=doubtful)

    def crops(self, photo: np.ndarray, faces: Sequence[AlignedFace]) -> np.ndarray:
        """The faces' aligned crops (N, size, size, 3) in [-1, 1]."""
        crops = [align.crop(photo, face.transform, self.size) for face in faces]
        return (
            np.stack(crops).astype(np.float32) / np.float32(127.5) - 1
            if crops
            else np.zeros((0, self.size, self.size, 3), np.float32)
        )

    def masks(self, before: np.ndarray, after: np.ndarray) -> np.ndarray:
        """Masks (N, s, s) for pasting ``after`` (N, s, s, 3) over the region of ``before``
        (the same faces as they are in the photo, any size): the box mask, or the union
        of the parser's face regions in both."""
        count, size = after.shape[:2]
        if self.parser is None:
            return np.broadcast_to(paste.box_mask(size), (count, size, size))
        if before.shape[1] != size:
            before = np.stack(
                [
                    align.warp(
                        face, align.scaled(np.eye(2, 3), before.shape[1] / size), (size, size)
                    )
                    for face in before
                ]
            )
        return np.maximum(self.parser.masks(before), self.parser.masks(after))

    def paste(
        self,
        photo: np.ndarray,
        faces: Sequence[AlignedFace],
        results: np.ndarray,
        masks: np.ndarray,
        regions: Sequence[tuple[tuple[float, float], float]] | None = None,
        in_place: bool = False,
    ) -> np.ndarray:
        """``photo`` with each face's result (N, s, s, 3) in [-1, 1] blended in through its
        mask, limited to its region (a photo disc, `FoundFaces.regions`) when given:
        ``photo`` itself, changed, with ``in_place`` (no copy of a large photo), else a copy."""
        out = photo if in_place else photo.copy()
        for i, (face, result, mask) in enumerate(zip(faces, results, masks)):
            transform = align.scaled(face.transform, result.shape[0] / face.size)
            if regions is not None:
                mask = mask * paste.disc_mask(transform, result.shape[0], *regions[i])
            paste.paste_into(out, result, mask, transform)
        return out
