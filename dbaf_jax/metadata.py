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
(`faces.photos.photo_metadata`, checked by `faces.photos.faces_from_metadata`).

Outputs are shared, so they carry no path, user or machine name: the model is named
by its fingerprint alone. Files of earlier versions also recorded ``model.path``; it is
still accepted when reading (checked, then dropped from `Anonymization.fields`, so a
recovery's output does not carry it forward).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from dbaf_jax import __version__, images, keys
from dbaf_jax.errors import InputError

ANONYMIZE = "anonymize"
FIELDS = {"dbaf_jax", "operation", "key", "model"}
PHOTO_FIELDS = {"photo", "faces"}
MODEL_FIELDS = {"fingerprint"}
LEGACY_MODEL_FIELDS = {"path", "fingerprint"}
FINGERPRINT = re.compile(r"[0-9a-f]{16}")
MAX_TEXT = 4096  # longest accepted version or model path string


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
    """The metadata anonymize writes beside every output (photos add `photo_metadata`)."""
    return {"dbaf_jax": __version__, "operation": ANONYMIZE, "key": record.to_dict(), "model": {"fingerprint": fingerprint}}


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ValueError(f"{name} must be a string of at most {MAX_TEXT} characters")
    return value


def check_anonymization(meta: dict[str, Any]) -> Anonymization:
    """``meta`` (a JSON object) checked against the schema; ValueError saying which
    field is wrong. Photo fields are checked here for presence and shape only; their
    values against the image by `faces.photos.faces_from_metadata`."""
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
