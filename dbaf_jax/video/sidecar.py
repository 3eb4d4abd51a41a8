"""The recovery sidecar of an anonymized clip, ``OUT.mp4.dbaf.json``.

It holds `metadata.anonymization` (key record and model fingerprint, never the
password), the clip's upright size and frame count, the crop size, and every track:
its number (which chooses its key) and its frame-to-crop transforms, one per frame
from its first. Read back as untrusted input: `read` checks every field and raises
InputError naming the file and the field.

The same content also travels inside the clip, as the container metadata tag `TAG`
(`as_tag`: zlib-compressed JSON in base64), where the container holds such tags (MP4,
MOV, Matroska, WebM; not AVI): a clip shared without its sidecar file can still be
recovered with the password alone. `from_tag` checks it like the file, and bounds
the decompressed size before parsing.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from dbaf_jax import images, metadata
from dbaf_jax.errors import InputError

SUFFIX = ".dbaf.json"
FORMAT = "dbaf-jax-video"
VERSION = 1
FIELDS = {"format", "version", "anonymization", "clip", "size", "tracks"}
MAX_TRACKS = 100_000
MAX_FRAMES = 10_000_000
MAX_BYTES = 1 << 30
TAG = "dbaf_jax_video"  # the container metadata key (Matroska stores it upper-case)
MAX_TAG_CHARS = 64 << 20  # a larger encoded sidecar stays beside the clip only


def path_for(video: str | Path) -> Path:
    video = Path(video)
    return video.with_name(video.name + SUFFIX)


def content(anonymization: dict, shape: tuple[int, int], frames: int, size: int, tracks: list[tuple[int, int, np.ndarray]]) -> dict:
    """The sidecar of a clip of upright ``shape`` (H, W) and ``frames`` frames; ``tracks``
    as (number, first frame, transforms (T, 2, 3))."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "anonymization": anonymization,
        "clip": {"height": int(shape[0]), "width": int(shape[1]), "frames": int(frames)},
        "size": int(size),
        "tracks": [
            {"number": int(n), "first": int(first), "transforms": [[round(float(v), 6) for v in t.reshape(-1)] for t in stack]}
            for n, first, stack in tracks
        ],
    }


def _text(data: dict) -> str:
    return json.dumps(data, separators=(",", ":"))


def write(path: Path, data: dict, overwrite: bool) -> Path:
    text = _text(data)
    return images.write_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), overwrite)


def as_tag(data: dict) -> str | None:
    """The sidecar ``data`` as a container tag value, or None when it is too long for one."""
    tag = base64.b64encode(zlib.compress(_text(data).encode("utf-8"), 9)).decode("ascii")
    return tag if len(tag) <= MAX_TAG_CHARS else None


class Sidecar:
    """A checked sidecar: the anonymization, clip shape (H, W), frame count, crop size and tracks."""

    def __init__(self, made: metadata.Anonymization, shape: tuple[int, int], frames: int, size: int, tracks):
        self.made, self.shape, self.frames, self.size, self.tracks = made, shape, frames, size, tracks


def _int(value: Any, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], not {str(value)[:40]}")
    return value


def _transforms(values: Any, number: int) -> np.ndarray:
    if not isinstance(values, list) or not values:
        raise ValueError(f"track {number}: transforms must be a non-empty list")
    for t in values:
        if not isinstance(t, list) or len(t) != 6 or not all(type(v) in (int, float) and math.isfinite(v) for v in t):
            raise ValueError(f"track {number}: each transform must be a list of 6 finite numbers")
    stack = np.asarray(values, np.float64).reshape(-1, 2, 3)
    if np.any(np.abs(np.linalg.det(stack[:, :, :2])) < 1e-12):
        raise ValueError(f"track {number}: a transform is not invertible")
    return stack


def check(data: Any) -> Sidecar:
    """``data`` (parsed JSON) checked field by field; ValueError saying which is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} sidecar")
    if data.get("version") != VERSION:
        raise ValueError(f"version {str(data.get('version'))[:20]} is not supported (this is {VERSION})")
    if set(data) != FIELDS:
        raise ValueError(f"fields must be exactly {sorted(FIELDS)}")
    if not isinstance(data["anonymization"], dict):
        raise ValueError("anonymization must be an object")
    made = metadata.check_anonymization(data["anonymization"])
    clip = data["clip"]
    if not isinstance(clip, dict) or set(clip) != {"height", "width", "frames"}:
        raise ValueError("clip must be an object with exactly frames, height and width")
    height, width = (_int(clip[k], f"clip.{k}", 1, 1 << 16) for k in ("height", "width"))
    frames = _int(clip["frames"], "clip.frames", 0, MAX_FRAMES)
    size = _int(data["size"], "size", 1, 4096)
    entries = data["tracks"]
    if not isinstance(entries, list) or len(entries) > MAX_TRACKS:
        raise ValueError(f"tracks must be a list of at most {MAX_TRACKS}")
    tracks, numbers = [], set()
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) != {"number", "first", "transforms"}:
            raise ValueError("each track must be an object with exactly number, first and transforms")
        number = _int(entry["number"], "a track number", 0, MAX_TRACKS - 1)
        if number in numbers:
            raise ValueError(f"track number {number} repeats")
        numbers.add(number)
        first = _int(entry["first"], f"track {number}: first", 0, max(frames - 1, 0))
        stack = _transforms(entry["transforms"], number)
        if first + len(stack) > frames:
            raise ValueError(f"track {number} runs past the clip's {frames} frames")
        tracks.append((number, first, stack))
    return Sidecar(made, (height, width), frames, size, tracks)


def _parsed(text: str | bytes, where: str) -> Sidecar:
    """The checked sidecar in JSON ``text``; InputError starting with ``where`` otherwise."""
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise InputError(f"{where} is not JSON") from None
    try:
        return check(data)
    except ValueError as err:
        raise InputError(f"{where} is malformed: {err}") from None


def read(path: str | Path) -> Sidecar:
    """The checked sidecar at ``path``; InputError naming it when missing or malformed."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise InputError(f"{path}: a sidecar over {MAX_BYTES} bytes is refused")
        text = path.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read the sidecar {path}: {err.strerror}") from None
    return _parsed(text, f"{path}: the sidecar")


def from_tag(tag: str, video: Path) -> Sidecar:
    """The checked sidecar carried in ``video``'s container tag `TAG`; InputError naming the clip otherwise."""
    where = f"{video}: the sidecar in the container's metadata"
    try:
        if len(tag) > MAX_TAG_CHARS:
            raise ValueError(f"over {MAX_TAG_CHARS} characters")
        inflate = zlib.decompressobj()
        text = inflate.decompress(base64.b64decode(tag, validate=True), MAX_BYTES)
        if inflate.unconsumed_tail or not inflate.eof:
            raise ValueError(f"truncated, or over {MAX_BYTES} bytes once decompressed")
    except (ValueError, binascii.Error, zlib.error) as err:
        raise InputError(f"{where} cannot be decoded ({err})") from None
    return _parsed(text, where)
