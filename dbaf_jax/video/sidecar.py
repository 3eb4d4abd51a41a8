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
(`faces.places`, one home): on each frame at most `places.max_recorded_faces` faces for
the frame's area, none smaller than anonymize records or centred outside the frame, no
more than `places.STACK` faces at one place, and one transform per track per frame (a
track is one run of frames); the count per frame bounds the work whatever the overlaps.

Before it is parsed, a sidecar file or tag is refused by its size against what the
clip's pixels can hold (`max_bytes`: its frames times their area, one face per
`places.FACE_AREA_PER_FACE` square pixels, each face one transform as `content` writes
it, each track's own fields): a file by its size, a tag by its base64 length, then by
the length it inflates to, counted chunk by chunk without holding it
(`INFLATE_CHUNK`), before it is inflated for the parser. The frames are the clip's video
packets (`clip.packet_count`: demuxed, not decoded, so a header cannot overstate them).

One function decides what recovery accepts (`accepted`, with `clip_limit` and
`check_use`): `recover_video` reads a sidecar through it, and `anonymize_video` holds
what it is about to write to it before the second pass, then the written clip and its
tag before the clip is put in place; a sidecar it would refuse fails the run, and no
clip is written.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dbaf_jax.core.errors import InputError, ModelMismatchError
from dbaf_jax.faces import metadata, places
from dbaf_jax.storage import atomic_files
from dbaf_jax.video import clip

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
# writes it (6 numbers within +-metadata.MAX_TRANSFORM_VALUE at 6 decimals, at most 18
# characters each, 5 commas, brackets, the comma after it); a track's other fields
# (number, first, the keys and brackets) at most BYTES_PER_TRACK, and a track has a face
# on at least one frame; the fields of the clip (the key record and model are under 1 KiB).
BYTES_PER_FACE = 6 * 18 + 8
BYTES_PER_TRACK = 64
FIXED_BYTES = 16 << 10
INFLATE_CHUNK = 1 << 20  # a tag is inflated this much at a time while its length is counted
ZLIB_SLACK = 1 << 10  # zlib's largest growth of incompressible data at these sizes
OVERLAP_BATCH = 1 << 22  # face pairs compared at once (their distances: 32 MiB)


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
    """The longest sidecar (JSON bytes) a clip of ``frames`` frames of upright ``shape``
    (H, W) can have: as many faces as its pixels hold (one per
    `places.FACE_AREA_PER_FACE` square pixels, and no more on a frame than `check`
    takes), each on one frame of a track of its own as far as `MAX_TRACKS` allows."""
    pixels = int(frames) * int(shape[0]) * int(shape[1])
    faces = min(pixels // places.FACE_AREA_PER_FACE, int(frames) * places.max_recorded_faces(shape))
    return min(
        MAX_BYTES,
        FIXED_BYTES + faces * BYTES_PER_FACE + min(faces, MAX_TRACKS) * BYTES_PER_TRACK,
    )


def clip_limit(video: Path, shape: Sequence[int]) -> int:
    """`max_bytes` of the clip ``video`` of upright ``shape``, its frames counted as its
    video packets (`clip.packet_count`)."""
    return max_bytes(shape, clip.packet_count(video))


def text(data: dict) -> str:
    """The sidecar ``data`` as the JSON text written (compact)."""
    return json.dumps(data, separators=(",", ":"))


def write(path: Path, data: dict | str, overwrite: bool) -> Path:
    """Writes the sidecar ``data`` (its content, or its `text`) at ``path``."""
    written = data if isinstance(data, str) else text(data)
    return atomic_files.write_file(
        path, lambda tmp: tmp.write_text(written, encoding="utf-8"), overwrite
    )


def as_tag(data: dict) -> str | None:
    """The sidecar ``data`` as a container tag value, or None when it is too long for one."""
    tag = base64.b64encode(zlib.compress(text(data).encode("utf-8"), 9)).decode("ascii")
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
    photos' rules refuse (`places.check_places`, `places.overlapping`)."""
    if not tracks:
        return
    numbers = np.concatenate([np.full(len(stack), number) for number, _, stack in tracks])
    frames = np.concatenate([np.arange(first, first + len(stack)) for _, first, stack in tracks])
    sides, centres = places.face_places(np.concatenate([stack for _, _, stack in tracks]), size)
    places.check_places(sides, centres, shape, lambda k: f"track {numbers[k]} on frame {frames[k]}")
    order = np.argsort(frames, kind="stable")
    frames, numbers, sides, centres = frames[order], numbers[order], sides[order], centres[order]
    on_frame, starts, counts = np.unique(frames, return_index=True, return_counts=True)
    most = places.max_recorded_faces(shape)
    if counts.max() > most:
        crowded = int(np.argmax(counts))
        raise ValueError(
            f"frame {on_frame[crowded]} holds {counts[crowded]} faces, more than the {most} a {shape[1]}x{shape[0]} frame can"
        )
    for count in np.unique(counts[counts > 1]):  # the frames with as many faces, checked together
        chosen, step = starts[counts == count], max(1, OVERLAP_BATCH // int(count) ** 2)
        for at in range(0, len(chosen), step):
            rows = chosen[at : at + step, None] + np.arange(count)  # (G, count) positions
            found = places.overlapping(sides[rows], centres[rows], places.STACK)
            if found is not None:
                a, b = rows[found[0], found[1]], rows[found[0], found[2]]
                raise ValueError(
                    f"track {numbers[a]} overlaps {found[3]} other tracks on frame {frames[a]}, track {numbers[b]} among them "
                    f"(at most {places.STACK} faces at one place: one face recorded over and over?)"
                )


@dataclasses.dataclass(frozen=True)
class Run:
    """Offsets ``start`` .. ``stop - 1`` of the ``track``-th track given to `recordable`,
    recorded as the sidecar's track ``number``."""

    track: int
    start: int
    stop: int
    number: int


def recordable(
    tracks: Sequence[tuple[int, int, np.ndarray]],
    detected: Sequence[np.ndarray],
    shape: tuple[int, int],
    size: int,
) -> tuple[list[Run], list[tuple[int, int]]]:
    """How anonymize records a clip's ``tracks`` (number, first frame, transforms (T, 2, 3)
    for crops of ``size``), of which frames ``detected`` (T,) bool were detected, on
    frames of upright ``shape`` (H, W) so that `check` takes them, and the faces it
    cannot record, as (track, offset), for the fallback to hide.

    On each frame a face `check` cannot record (smaller than anonymize records, centred
    outside the frame: a face leaving by an edge) is left out, to be hidden. Then, while
    the frame holds more faces than its area allows or a place holds more than `places.STACK`,
    an interpolated face (its track not detected on that frame) at the most crowded
    place is left out, not hidden: its track's face was only guessed to be there, where
    other faces are anonymized. A track with frames left out between others is recorded
    as several runs: the first keeps its number, the others get numbers after every
    track's (other keys). Detected faces are never left out for crowding: if they alone
    break the bounds, `check` refuses the sidecar and anonymize writes nothing."""
    if not tracks:
        return [], []
    lengths = [len(stack) for _, _, stack in tracks]
    owner = np.repeat(np.arange(len(tracks)), lengths)
    offset = np.concatenate([np.arange(length) for length in lengths])
    frame = np.concatenate([np.arange(first, first + len(stack)) for _, first, stack in tracks])
    seen = np.concatenate([np.asarray(d, bool) for d in detected])
    sides, centres = places.face_places(np.concatenate([stack for _, _, stack in tracks]), size)
    small, outside = places.misplaced(sides, centres, shape)
    keep = ~(small | outside)
    unplaced = [(int(owner[k]), int(offset[k])) for k in np.flatnonzero(~keep)]
    most = places.max_recorded_faces(shape)
    order = np.argsort(frame, kind="stable")
    _, starts = np.unique(frame[order], return_index=True)
    for here in np.split(order, starts[1:]):
        here = here[keep[here]]
        while len(here) > 1:
            close = places.at_one_place(sides[here][None], centres[here][None])[0]
            counts = close.sum(1)
            crowded = counts >= places.STACK
            if not crowded.any() and len(here) <= most:
                break
            at_crowd = (
                crowded | close[crowded].any(0) if crowded.any() else np.ones(len(here), bool)
            )
            guessed = at_crowd & ~seen[here]
            if not guessed.any():
                break  # detected faces alone: `check` names them
            drop = int(np.argmax(np.where(guessed, counts, -1)))
            keep[here[drop]] = False
            here = np.delete(here, drop)
    runs, extra = [], []
    spare = max(number for number, _, _ in tracks) + 1
    position = 0
    for index, length in enumerate(lengths):
        kept = keep[position : position + length]
        position += length
        edges = np.flatnonzero(np.diff(np.concatenate([[0], kept.astype(np.int8), [0]])))
        for k, (start, stop) in enumerate(zip(edges[::2], edges[1::2])):
            if k == 0:
                runs.append(Run(index, int(start), int(stop), tracks[index][0]))
            else:
                extra.append(Run(index, int(start), int(stop), spare))
                spare += 1
    return runs + extra, unplaced


def accepted(json_text: str | bytes, where: str, limit: int) -> Sidecar:
    """The checked sidecar in ``json_text`` of a clip whose sidecar can take ``limit``
    bytes (`clip_limit`); InputError starting with ``where`` when it is longer, not JSON,
    or malformed. What recovery accepts, and what anonymize holds its output to."""
    length = len(json_text.encode("utf-8")) if isinstance(json_text, str) else len(json_text)
    if length > limit:
        raise InputError(
            f"{where}: a sidecar of {length} bytes is more than the clip it is for can hold ({limit} bytes); refused"
        )
    try:
        data = json.loads(json_text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise InputError(f"{where} is not JSON") from None
    try:
        return check(data)
    except ValueError as err:
        raise InputError(f"{where} is malformed: {err}") from None


def check_use(
    recorded: Sidecar,
    where: str,
    fingerprint: str,
    shape: tuple[int, int],
    size: int,
    ignore_model_mismatch: bool = False,
) -> None:
    """ModelMismatchError when ``recorded`` was made by another model than ``fingerprint``
    (unless ``ignore_model_mismatch``), InputError when it is for another clip shape (H, W)
    or crop size than ``shape`` and ``size``; ``where`` names it."""
    if recorded.made.fingerprint != fingerprint and not ignore_model_mismatch:
        raise ModelMismatchError(
            f"{where}: made by the model {recorded.made.fingerprint}, not {fingerprint} (--ignore-model-mismatch to go on)"
        )
    if recorded.shape != tuple(shape) or recorded.size != size:
        raise InputError(
            f"{where}: records a {recorded.shape} clip and {recorded.size}-pixel crops, not this clip's {tuple(shape)} and the model's {size}"
        )


def read(path: str | Path, limit: int | None = None) -> Sidecar:
    """The checked sidecar at ``path`` (`accepted`); InputError naming it when missing,
    malformed, or longer than ``limit`` bytes (`clip_limit` of the clip it is for; default
    `MAX_BYTES`), which is refused by the file's size before it is read."""
    path, limit = Path(path), MAX_BYTES if limit is None else limit
    try:
        length = path.stat().st_size
        if length > limit:
            raise InputError(
                f"{path}: a sidecar of {length} bytes is more than the clip it is for can hold ({limit} bytes); refused"
            )
        stored = path.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read the sidecar {path}: {err.strerror}") from None
    return accepted(stored, f"{path}: the sidecar", limit)


def _inflated_length(data: bytes, limit: int) -> int:
    """How many bytes zlib ``data`` inflates to, counted `INFLATE_CHUNK` at a time and
    never past ``limit`` + 1 (nothing held but one chunk); ValueError when it is truncated."""
    inflate, total, pending = zlib.decompressobj(), 0, data
    while total <= limit:
        out = inflate.decompress(pending, INFLATE_CHUNK)
        total += len(out)
        pending = inflate.unconsumed_tail
        if inflate.eof or not (out or pending):
            break
    if total <= limit and not inflate.eof:
        raise ValueError("truncated")
    return total


def from_tag(tag: str, video: Path, limit: int | None = None) -> Sidecar:
    """The checked sidecar carried in ``video``'s container tag `TAG` (`accepted`);
    InputError naming the clip otherwise, or when it is, compressed or inflated, longer
    than ``limit`` bytes (`clip_limit` of the clip; default `MAX_BYTES`): its inflated
    length is counted before it is inflated whole."""
    where, limit = (
        f"{video}: the sidecar in the container's metadata",
        MAX_BYTES if limit is None else limit,
    )
    try:
        if len(tag) > min(MAX_TAG_CHARS, 4 * (limit + ZLIB_SLACK) // 3 + 4):
            raise ValueError(
                f"{len(tag)} characters, more than a sidecar this clip can hold ({limit} bytes) takes compressed"
            )
        data = base64.b64decode(tag, validate=True)
        if _inflated_length(data, limit) > limit:
            raise ValueError(
                f"over {limit} bytes once decompressed, more than this clip's sidecar can take"
            )
        inflated = zlib.decompress(data)
    except (ValueError, binascii.Error, zlib.error) as err:
        raise InputError(f"{where} cannot be decoded ({err})") from None
    return accepted(inflated, where, limit)


def of_clip(
    video: Path, shape: tuple[int, int], file: Path | None = None
) -> tuple[Sidecar, str] | None:
    """The sidecar recovery takes for the clip ``video`` of upright ``shape`` and where it
    was: the file ``file`` when given, else the copy in the container's metadata; None when
    there is neither. Each held to `accepted` with the clip's `clip_limit`."""
    if file is not None:
        return read(file, clip_limit(video, shape)), str(file)
    tag = clip.read_tag(video, TAG)
    if tag is None:
        return None
    return (
        from_tag(tag, video, clip_limit(video, shape)),
        f"{video} (its container's sidecar)",
    )
