"""The ``dbaf_jax`` metadata of anonymized images: what anonymize writes, and the
schema recovery checks it against.

A PNG's metadata comes back with the image from whoever sent it, so it is untrusted
input: `read_anonymization` accepts only the fields anonymize writes, with the types it
writes them with, and key records whose KDF cost is bounded (`keys.SCRYPT_LIMITS`).
Anything else is an `InputError` naming the file and the field; never a traceback,
and never minutes of work for one image. The fields of a recovery's output are the
checked ones only, so nothing unchecked is carried forward.

Layout (JSON object): ``dbaf_jax`` (the writing version, a string), ``operation``
(``"anonymize"``), ``key`` (`keys.KeyRecord.to_dict`), ``model`` (``{"fingerprint":
16 hex digits}``), and for whole photos ``photo`` and ``faces``
(`photo_fields`, checked by `recorded_faces` against the bounds of `faces.places`:
each face's size and centre, how many at one place, how many for the photo's area). A
recovery's output carries the checked
fields with ``operation`` ``"recover"`` and its ``mode`` (`recovery`); a recovery
without metadata records the key file's record and ``detected`` (`detected_recovery`);
a saved face crop records ``operation`` ``"crop"``, its photo and face (`crop`).

This module is the one writer and reader of these fields. What recover accepts is
decided once (`recorded_faces`, through `read_anonymization`); anonymize finds only faces
a record can hold (`faces.photos`: the others are hidden by the fallback) and holds each
photo's output to `photo_refusal` before writing it.

Outputs are shared, so they carry no path, user or machine name: the model is named
by its fingerprint alone. Files of earlier versions also recorded ``model.path``; it is
still accepted when reading (checked, then dropped from `Anonymization.fields`, so a
recovery's output does not carry it forward).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dbaf_jax import __version__
from dbaf_jax.core.errors import InputError
from dbaf_jax.faces.photos import AlignedFace
from dbaf_jax.faces.places import (
    MAX_FACES,
    STACK,
    check_places,
    face_places,
    max_recorded_faces,
    overlapping,
)
from dbaf_jax.storage import images, keys

ANONYMIZE = "anonymize"
RECOVER = "recover"
CROP = "crop"
FIELDS = {"dbaf_jax", "operation", "key", "model"}
PHOTO_FIELDS = {"photo", "faces"}
MODEL_FIELDS = {"fingerprint"}
LEGACY_MODEL_FIELDS = {"path", "fingerprint"}
FINGERPRINT = re.compile(r"[0-9a-f]{16}")
MAX_TEXT = 4096  # longest accepted version or model path string
MAX_TRANSFORM_VALUE = 1e9  # beyond any photo-to-crop scale or offset; keeps det() finite


@dataclasses.dataclass(frozen=True)
class Anonymization:
    """The checked metadata of an anonymized image: its key record, the fingerprint of
    the model that made it, and all checked fields (`fields`, for the recovery's output)."""

    record: keys.KeyRecord
    fingerprint: str
    fields: dict[str, Any]

    @property
    def is_photo(self) -> bool:
        return "faces" in self.fields


def anonymization(record: keys.KeyRecord, fingerprint: str) -> dict[str, Any]:
    """The metadata anonymize writes beside every output (photos add `photo_fields`)."""
    return {
        "dbaf_jax": __version__,
        "operation": ANONYMIZE,
        "key": record.to_dict(),
        "model": {"fingerprint": fingerprint},
    }


def recovery(made: Anonymization, mode: str) -> dict[str, Any]:
    """The metadata of the recovery (``mode`` "image" or "latent") of an image whose checked metadata is ``made``."""
    return {**made.fields, "operation": RECOVER, "mode": mode}


def detected_recovery(record: keys.KeyRecord) -> dict[str, Any]:
    """The metadata of a photo recovered without metadata, its faces found by detection
    and ``record`` a key file's (photos add `photo_fields` of the faces recovered)."""
    return {"key": record.to_dict(), "detected": True, "operation": RECOVER, "mode": "image"}


def crop(of: str, index: int) -> dict[str, Any]:
    """The metadata of the saved crop of face ``index`` of the output named ``of``."""
    return {"operation": CROP, "of": of, "face": index}


def is_crop(meta: dict[str, Any]) -> bool:
    return meta.get("operation") == CROP


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ValueError(f"{name} must be a string of at most {MAX_TEXT} characters")
    return value


def check_anonymization(meta: dict[str, Any]) -> Anonymization:
    """``meta`` (a JSON object) checked against the schema; ValueError saying which
    field is wrong. Photo fields are checked here for presence and shape only; their
    values against the image by `recorded_faces`."""
    operation = meta.get("operation")
    if operation != ANONYMIZE:
        shown = repr(operation)[:40]
        raise ValueError(f"not an anonymized image (operation {shown})")
    extra = set(meta) - FIELDS - PHOTO_FIELDS
    missing = FIELDS - set(meta)
    if missing or extra:
        raise ValueError(f"fields {sorted(missing)} missing, {sorted(extra)[:5]} unexpected")
    if set(meta) & PHOTO_FIELDS and not PHOTO_FIELDS <= set(meta):
        raise ValueError(f"a photo's metadata needs both {sorted(PHOTO_FIELDS)}")
    _text(meta["dbaf_jax"], "dbaf_jax (the version)")
    try:
        record = keys.KeyRecord.from_dict(meta["key"])
    except ValueError as err:
        raise ValueError(f"key: {err}") from None
    model = meta["model"]
    if not isinstance(model, dict) or set(model) not in (MODEL_FIELDS, LEGACY_MODEL_FIELDS):
        raise ValueError(f"model must be an object with exactly {sorted(MODEL_FIELDS)}")
    if "path" in model:
        _text(model["path"], "model.path")
    fingerprint = model["fingerprint"]
    if not isinstance(fingerprint, str) or not FINGERPRINT.fullmatch(fingerprint):
        raise ValueError("model.fingerprint must be 16 hex digits")
    return Anonymization(record, fingerprint, {**meta, "model": {"fingerprint": fingerprint}})


def read_anonymization(path: str | Path) -> Anonymization | None:
    """The checked metadata of the anonymized image ``path``; None when it has no
    ``dbaf_jax`` chunk (e.g. re-encoded after sharing); InputError naming the file
    when the chunk is there but unusable."""
    try:
        meta = images.read_metadata(path)
    except images.NoMetadataError:
        return None
    except ValueError as err:
        raise InputError(str(err)) from None
    try:
        return check_anonymization(meta)
    except ValueError as err:
        raise InputError(f"{path}: unusable {images.METADATA_CHUNK} metadata: {err}") from None


def _face_from_dict(entry: Any, size: int) -> AlignedFace:
    if not isinstance(entry, dict) or set(entry) != {"index", "transform", "size"}:
        raise ValueError("each face must be an object with exactly index, transform and size")
    index, values, face_size = entry["index"], entry["transform"], entry["size"]
    if type(index) is not int or not 0 <= index < MAX_FACES:
        raise ValueError(f"face index must be an integer in [0, {MAX_FACES}), got {index!r}")
    if type(face_size) is not int or face_size != size:
        raise ValueError(f"face crop size {face_size!r} is not this model's input size {size}")
    if (
        not isinstance(values, list)
        or len(values) != 6
        or not all(type(v) in (int, float) and math.isfinite(v) for v in values)
    ):
        raise ValueError("a face transform must be a list of 6 finite numbers")
    if max(abs(v) for v in values) > MAX_TRANSFORM_VALUE:
        raise ValueError(f"a face transform's numbers must lie within +-{MAX_TRANSFORM_VALUE:g}")
    transform = np.asarray(values, np.float64).reshape(2, 3)
    if abs(np.linalg.det(transform[:, :2])) < 1e-12:
        raise ValueError("a face transform must be invertible")
    return AlignedFace(index, transform, face_size)


def recorded_faces(
    meta: dict[str, Any], photo_shape: Sequence[int], size: int
) -> list[AlignedFace]:
    """The faces recorded in an output's metadata, checked against the photo they came
    with and the model's crop size; InputError saying what is wrong otherwise."""
    try:
        photo = meta["photo"]
        if not isinstance(photo, dict) or [photo.get("height"), photo.get("width")] != list(
            photo_shape[:2]
        ):
            raise ValueError(
                f"recorded photo size {photo!r} is not the image's {tuple(photo_shape[:2])}"
            )
        entries = meta["faces"]
        most = max_recorded_faces(photo_shape)
        if not isinstance(entries, list) or len(entries) > most:
            raise ValueError(
                f"faces must be a list of at most {most} for a {photo_shape[1]}x{photo_shape[0]} photo"
            )
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
    outside the photo, or at one place with `STACK` others (`faces.places`)."""
    if not faces:
        return
    sides, centres = face_places(np.stack([face.transform for face in faces]), faces[0].size)
    check_places(sides, centres, photo_shape, lambda k: f"face {faces[k].index}")
    found = overlapping(sides[None], centres[None], STACK)
    if found is not None:
        raise ValueError(
            f"face {faces[found[1]].index} overlaps {found[3]} other faces, face {faces[found[2]].index} among them "
            f"(at most {STACK} faces at one place: one face recorded over and over?)"
        )


def photo_refusal(meta: dict[str, Any], photo_shape: Sequence[int], size: int) -> str | None:
    """Why recover would refuse a photo output of ``photo_shape`` (H, W, ...) carrying
    ``meta`` (its metadata as written, `photo_fields` included) with a model of crop
    ``size``, read as recover reads it: the JSON `images.write_png` writes, parsed back,
    through `check_anonymization` and `recorded_faces`. None when recover takes it, and
    for metadata other than an anonymization's (a recovery's output is not recovered).
    What anonymize holds each photo's output to before writing it."""
    if meta.get("operation") != ANONYMIZE:
        return None
    try:
        read = json.loads(json.dumps(meta, sort_keys=True))
        recorded_faces(check_anonymization(read).fields, photo_shape, size)
    except (ValueError, InputError) as err:
        return str(err)
    return None


def photo_fields(photo_shape: Sequence[int], faces: Sequence[AlignedFace]) -> dict[str, Any]:
    """The metadata fields of a photo output (beside the key record and the model)."""
    return {
        "photo": {"height": int(photo_shape[0]), "width": int(photo_shape[1])},
        "faces": [f.to_dict() for f in faces],
    }
