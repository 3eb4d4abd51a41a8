"""The recovery sidecar of an anonymized clip, ``OUT.mp4.dbaf.json``.

It holds `metadata.anonymization` (key record and model fingerprint, never the
password), the clip's upright size and frame count, the crop size, and every track:
its number (which chooses its key) and its frame-to-crop transforms, one per frame
from its first. Read back as untrusted input: `read` checks every field and raises
InputError naming the file and the field.

The same content also travels inside the clip, as the container metadata tag `TAG`
(`as_tag`: zlib-compressed JSON in base64), where the container holds such tags (MP4,
MOV, Matroska, WebM; not AVI): a clip shared without its sidecar file can still be
recovered with the password alone. `from_tag` checks it like the file.

What one sidecar can make recovery do is bounded by the clip's pixels, as for photos
(`metadata`'s rules, one home): on each frame at most `metadata.max_recorded_faces`
faces for the frame's area, none smaller than anonymize records or centred outside the
frame, no face recorded more than twice at one place, and one transform per track per
frame (a track is one run of frames). Two at one place happen in honest clips (a
track's interpolated frames under another track's one-frame detection of the same face:
measured on a pan over office5.jpg), so `STACK` allows a pair; the count per frame
bounds the work whatever the overlaps. Before it is parsed, a sidecar file or tag is refused by its size against what
the clip can hold (`max_bytes`: its frames times its faces per frame times
`BYTES_PER_FACE`): the compressed tag, then its inflated JSON, which is never inflated
past that bound.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dbaf_jax import atomic_files, metadata
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
# What the JSON of one clip can take: a face on one frame is one transform as `content`
# writes it (6 numbers within +-metadata.MAX_TRANSFORM_VALUE at 6 decimals: at most
# 6 * 18 + 7 bytes) and at most one track's other fields (a track has a face on at least
# one frame); and the fields of the clip (the key record and model are under 1 KiB).
BYTES_PER_FACE = 128 + 64
FIXED_BYTES = 16 << 10
ZLIB_SLACK = 1 << 10  # zlib's largest growth of incompressible data at these sizes
OVERLAP_BATCH = 1 << 22  # face pairs compared at once (their distances: 32 MiB)
STACK = 2  # faces one place of a frame may hold (module doc)


def path_for(video: str | Path) -> Path:
    video = Path(video)
    return video.with_name(video.name + SUFFIX)


def content(
    anonymization: dict,
    shape: tuple[int, int],
    frames: int,
    size: int,
    tracks: list[tuple[int, int, np.ndarray]],
) -> dict:
    """The sidecar of a clip of upright ``shape`` (H, W) and ``frames`` frames; ``tracks``
    as (number, first frame, transforms (T, 2, 3))."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "anonymization": anonymization,
        "clip": {"height": int(shape[0]), "width": int(shape[1]), "frames": int(frames)},
        "size": int(size),
        "tracks": [
            {
                "number": int(n),
                "first": int(first),
                "transforms": [[round(float(v), 6) for v in t.reshape(-1)] for t in stack],
            }
            for n, first, stack in tracks
        ],
    }


def max_bytes(shape: Sequence[int], frames: int) -> int:
    """The longest sidecar (JSON bytes) a clip of upright ``shape`` (H, W) and ``frames``
    frames can have: as many faces on every frame as its area allows."""
    return min(
        MAX_BYTES, FIXED_BYTES + frames * metadata.max_recorded_faces(shape) * BYTES_PER_FACE
    )


def _text(data: dict) -> str:
    return json.dumps(data, separators=(",", ":"))


def write(path: Path, data: dict, overwrite: bool) -> Path:
    text = _text(data)
    return atomic_files.write_file(
        path, lambda tmp: tmp.write_text(text, encoding="utf-8"), overwrite
    )


def as_tag(data: dict) -> str | None:
    """The sidecar ``data`` as a container tag value, or None when it is too long for one."""
    tag = base64.b64encode(zlib.compress(_text(data).encode("utf-8"), 9)).decode("ascii")
    return tag if len(tag) <= MAX_TAG_CHARS else None


class Sidecar:
    """A checked sidecar: the anonymization, clip shape (H, W), frame count, crop size and tracks."""

    def __init__(
        self, made: metadata.Anonymization, shape: tuple[int, int], frames: int, size: int, tracks
    ):
        self.made, self.shape, self.frames, self.size, self.tracks = (
            made,
            shape,
            frames,
            size,
            tracks,
        )


def _int(value: Any, name: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], not {str(value)[:40]}")
    return value


def _transforms(values: Any, number: int) -> np.ndarray:
    if not isinstance(values, list) or not values:
        raise ValueError(f"track {number}: transforms must be a non-empty list")
    for t in values:
        if (
            not isinstance(t, list)
            or len(t) != 6
            or not all(type(v) in (int, float) and math.isfinite(v) for v in t)
        ):
            raise ValueError(f"track {number}: each transform must be a list of 6 finite numbers")
        if max(map(abs, t)) > metadata.MAX_TRANSFORM_VALUE:
            raise ValueError(
                f"track {number}: a transform's numbers must lie within +-{metadata.MAX_TRANSFORM_VALUE:g}"
            )
    stack = np.asarray(values, np.float64).reshape(-1, 2, 3)
    if np.any(np.abs(np.linalg.det(stack[:, :, :2])) < 1e-12):
        raise ValueError(f"track {number}: a transform is not invertible")
    return stack


def check(data: Any) -> Sidecar:
    """``data`` (parsed JSON) checked field by field; ValueError saying which is wrong."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} sidecar")
    if data.get("version") != VERSION:
        raise ValueError(
            f"version {str(data.get('version'))[:20]} is not supported (this is {VERSION})"
        )
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
            raise ValueError(
                "each track must be an object with exactly number, first and transforms"
            )
        number = _int(entry["number"], "a track number", 0, MAX_TRACKS - 1)
        if number in numbers:
            raise ValueError(f"track number {number} repeats")
        numbers.add(number)
        first = _int(entry["first"], f"track {number}: first", 0, max(frames - 1, 0))
        stack = _transforms(entry["transforms"], number)
        if first + len(stack) > frames:
            raise ValueError(f"track {number} runs past the clip's {frames} frames")
        tracks.append((number, first, stack))
    _check_frames(tracks, (height, width), size)
    return Sidecar(made, (height, width), frames, size, tracks)


def _check_frames(
    tracks: list[tuple[int, int, np.ndarray]], shape: tuple[int, int], size: int
) -> None:
    """ValueError when a frame holds more faces than its area allows, or a face the
    photos' rules refuse (`metadata.check_places`, `metadata.overlapping`)."""
    if not tracks:
        return
    numbers = np.concatenate([np.full(len(stack), number) for number, _, stack in tracks])
    frames = np.concatenate([np.arange(first, first + len(stack)) for _, first, stack in tracks])
    sides, centres = metadata.face_places(np.concatenate([stack for _, _, stack in tracks]), size)
    metadata.check_places(
        sides, centres, shape, lambda k: f"track {numbers[k]} on frame {frames[k]}"
    )
    order = np.argsort(frames, kind="stable")
    frames, numbers, sides, centres = frames[order], numbers[order], sides[order], centres[order]
    on_frame, starts, counts = np.unique(frames, return_index=True, return_counts=True)
    most = metadata.max_recorded_faces(shape)
    if counts.max() > most:
        crowded = int(np.argmax(counts))
        raise ValueError(
            f"frame {on_frame[crowded]} holds {counts[crowded]} faces, more than the {most} a {shape[1]}x{shape[0]} frame can"
        )
    for count in np.unique(counts[counts > 1]):  # the frames with as many faces, checked together
        chosen, step = starts[counts == count], max(1, OVERLAP_BATCH // int(count) ** 2)
        for at in range(0, len(chosen), step):
            rows = chosen[at : at + step, None] + np.arange(count)  # (G, count) positions
            found = metadata.overlapping(sides[rows], centres[rows], STACK)
            if found is not None:
                a, b = rows[found[0], found[1]], rows[found[0], found[2]]
                raise ValueError(
                    f"track {numbers[a]} overlaps {found[3]} other tracks on frame {frames[a]}, track {numbers[b]} among them "
                    f"(at most {STACK} faces at one place: one face recorded over and over?)"
                )


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


def read(path: str | Path, limit: int | None = None) -> Sidecar:
    """The checked sidecar at ``path``; InputError naming it when missing, malformed, or
    longer than ``limit`` bytes (`max_bytes` of the clip it is for; default `MAX_BYTES`)."""
    path, limit = Path(path), MAX_BYTES if limit is None else limit
    try:
        length = path.stat().st_size
        if length > limit:
            raise InputError(
                f"{path}: a sidecar of {length} bytes is more than the clip it is for can hold ({limit} bytes); refused"
            )
        text = path.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read the sidecar {path}: {err.strerror}") from None
    return _parsed(text, f"{path}: the sidecar")


def from_tag(tag: str, video: Path, limit: int | None = None) -> Sidecar:
    """The checked sidecar carried in ``video``'s container tag `TAG`; InputError naming
    the clip otherwise, or when it is, compressed or inflated, longer than ``limit``
    bytes (`max_bytes` of the clip; default `MAX_BYTES`), which is all it is ever inflated to."""
    where, limit = (
        f"{video}: the sidecar in the container's metadata",
        MAX_BYTES if limit is None else limit,
    )
    try:
        if len(tag) > min(MAX_TAG_CHARS, 4 * (limit + ZLIB_SLACK) // 3 + 4):
            raise ValueError(
                f"{len(tag)} characters, more than a sidecar this clip can hold ({limit} bytes) takes compressed"
            )
        inflate = zlib.decompressobj()
        text = inflate.decompress(base64.b64decode(tag, validate=True), limit + 1)
        if len(text) > limit:
            raise ValueError(
                f"over {limit} bytes once decompressed, more than this clip's sidecar can take"
            )
        if inflate.unconsumed_tail or not inflate.eof:
            raise ValueError("truncated")
    except (ValueError, binascii.Error, zlib.error) as err:
        raise InputError(f"{where} cannot be decoded ({err})") from None
    return _parsed(text, where)
