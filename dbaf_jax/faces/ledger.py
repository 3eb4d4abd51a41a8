"""The face ledger: how recovery without metadata knows which faces it may touch.

A photo that lost its metadata (re-saved by a sharing site, re-encoded as JPEG,
rescaled) is recovered with a key file: detection finds the faces again. Detection
alone cannot tell an anonymized face from one that never was (a face left by
``--min-face-size``, a photo never anonymized, a false detection on a wall), and its
left-to-right numbering shifts every key after a missed face. So anonymize with
``--key-file K`` also appends to ``K.faces.jsonl`` one line per photo: for each face,
its key index, where it sits in the photo (centre and side as fractions of the photo's
width, and the photo's aspect ratio: all unchanged by rescaling), a coarse signature
of the anonymized face as published (`signature`: the colour means of 8 x 8 cells over
the centre of its aligned crop; robust to JPEG and rescaling) and its separation: how
far the original face's signature lay from it. Recovery restores a re-detected
candidate only when one ledger entry matches it in place and size and its signature is
much nearer the published face's than the original face's was (`match`), and then with
that entry's key index; other candidates, the original face among them (an
anonymization may keep pose, light and colours, so place and a loose likeness cannot
tell the original from its anonymized version), are left exactly as they are and
counted. The ledger holds nothing that the published photos do not show but the one
separation number per face; it lives beside the key file, with the user, and is read
as untrusted input. A clip's faces are entries too, sampled along each track and
marked with the run's id and their frame (`dbaf_jax.video.track_ledger`).

The ledger is an append-only log that cannot tear: `append` writes a run's complete
lines in one write on an O_APPEND descriptor under an exclusive lock, syncs them, and
cuts them off again if the write fails (a full disk), so each entry is there whole or
not at all. A torn last line (no line end), left by an older version or a crash, is
skipped by `read` (said once in its notes) and removed before the next append, never
appended onto. `check_appendable` lets a run check, before any work, that the ledger
can be written and has room.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dbaf_jax.errors import InputError, OutputWriteError
from dbaf_jax.faces import align

SUFFIX = ".faces.jsonl"
GRID = 8  # signature cells per side (times 3 colours)
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
MAX_LINE = 1 << 20  # bytes per ledger line (a photo's faces, or part of a clip's)
LINE_ENTRIES = 256  # entries per line: about 0.4 MiB, well under MAX_LINE
ENTRY_BYTES = 2048  # room asked per entry before work (`check_appendable`): one is about 1.5 KB
TAIL_CHUNK = 1 << 16  # bytes read at a time looking back for the last line end
MAX_ENTRIES = 1 << 20
MAX_FRAME = 1 << 31
CLIP_FIELDS = ("clip", "frame")


def ledger_path(key_file: str | Path) -> Path:
    """The ledger of ``key_file``: ``KEY.faces.jsonl`` beside it."""
    key_file = Path(key_file)
    return key_file.with_name(key_file.name + SUFFIX)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One anonymized face: its key index, the photo's aspect ratio (W / H), the face's
    centre (x, y) and side as fractions of the photo's width, its signature
    (GRID**2 * 3,) and the distance of the original face's signature from it (0 for a
    re-detected candidate, which has no original)."""

    index: int
    aspect: float
    centre: tuple[float, float]
    side: float
    signature: np.ndarray
    separation: float = 0.0
    clip: str | None = None  # a clip's faces: the anonymization's run id (hex) ...
    frame: int | None = None  # ... and the frame the face was on; None for a photo

    def to_dict(self) -> dict[str, Any]:
        fields = {
            "index": self.index,
            "aspect": round(self.aspect, 6),
            "centre": [round(v, 6) for v in self.centre],
            "side": round(self.side, 6),
            "signature": [round(float(v), 4) for v in self.signature],
            "separation": round(self.separation, 6),
        }
        return fields | ({"clip": self.clip, "frame": self.frame} if self.clip is not None else {})


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
) -> list[Entry]:
    """The ledger entries of a photo's anonymized faces: their key ``indices``, alignment
    ``transforms`` and ``crops`` (N, S, S, 3) of the *output* photo at those transforms,
    with ``originals`` (N, S, S, 3) the input photo's crops (None for re-detected candidates)."""
    size = crops.shape[1] if len(crops) else 0
    made = []
    for i, (index, transform, crop) in enumerate(zip(indices, transforms, crops)):
        aspect, centre, side = place(photo_shape, transform, size)
        published = signature(crop)
        separation = distance(signature(originals[i]), published) if originals is not None else 0.0
        made.append(Entry(int(index), aspect, centre, side, published, separation))
    return made


def _lines(entries: Sequence[Entry]) -> bytes:
    """``entries`` as complete ledger lines, at most `LINE_ENTRIES` a line."""
    return b"".join(
        json.dumps(
            [entry.to_dict() for entry in entries[start : start + LINE_ENTRIES]],
            separators=(",", ":"),
        ).encode()
        + b"\n"
        for start in range(0, len(entries), LINE_ENTRIES)
    )


def _cut_torn_tail(fd: int) -> int:
    """Truncates the open ledger ``fd`` after its last line end (a torn last line, cut
    short by a crash or a full disk, is never appended onto); the bytes removed."""
    size = end = os.fstat(fd).st_size
    while end > 0:
        start = max(0, end - TAIL_CHUNK)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end == size:
        return 0
    os.ftruncate(fd, end)
    return size - end


def _open_for_append(path: Path) -> tuple[int, bool]:
    """(fd, created) of the ledger at ``path`` opened to append, locked against other
    writers; OSError when it cannot be (a folder, not a regular file, no permission,
    a read-only file system)."""
    # Read too (to find a torn tail); O_NONBLOCK: a FIFO named like a ledger does not hang the run.
    flags = os.O_RDWR | os.O_APPEND | os.O_NONBLOCK
    try:
        fd, created = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600), True
    except FileExistsError:
        fd, created = os.open(path, flags), False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX)  # two runs with one key file append in turn
    except OSError:
        os.close(fd)
        raise
    return fd, created


def check_appendable(path: Path, entries: int) -> str | None:
    """Checks, before any work, that ``entries`` more entries can be appended to the
    ledger at ``path``: a regular file or creatable, writable, and about `ENTRY_BYTES`
    each free on its file system. OutputWriteError naming ``path`` and the system's
    reason otherwise. A torn last line is removed here (module doc): the note saying
    so, else None."""
    try:
        fd, created = _open_for_append(path)
        try:
            cut = _cut_torn_tail(fd)
            volume = os.fstatvfs(fd)
        finally:
            os.close(fd)
            if created:  # only probed: a ledger exists once it holds an entry
                path.unlink()
    except OSError as err:
        raise OutputWriteError(
            f"{path}: the key file's face ledger cannot be written ({err.strerror or err})"
        ) from None
    free, needed = volume.f_bavail * volume.f_frsize, max(entries, 1) * ENTRY_BYTES
    if free < needed:
        raise OutputWriteError(
            f"{path}: the key file's face ledger cannot be written ({os.strerror(errno.ENOSPC)}: {free} bytes free, "
            f"about {needed} needed for {max(entries, 1)} entries)"
        )
    return (
        f"{path}: removed a torn last line ({cut} bytes without a line end, left by a crash or a full disk)"
        if cut
        else None
    )


def append(path: Path, new_entries: Sequence[Entry]) -> None:
    """Adds ``new_entries`` to the ledger at ``path`` whole or not at all: complete
    lines written with one write on an O_APPEND descriptor, then synced; a failed
    write is cut off again, and a torn last line found first is removed.
    OutputWriteError naming ``path`` and the system's reason when it fails."""
    if not new_entries:
        return
    data = memoryview(_lines(new_entries))
    try:
        fd, _ = _open_for_append(path)
        try:
            _cut_torn_tail(fd)
            size = os.fstat(fd).st_size
            try:
                while data:  # a regular file takes it in one write unless the disk fills
                    data = data[os.write(fd, data) :]
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
        if size == 0:  # a new ledger: its name must survive a crash too
            directory = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
    except OSError as err:
        raise OutputWriteError(
            f"{path}: cannot append to the key file's face ledger ({err.strerror or err})"
        ) from None


def _entry(value: Any) -> Entry:
    fields = ("index", "aspect", "centre", "side", "signature", "separation")
    if not isinstance(value, dict) or set(value) not in (
        set(fields),
        set(fields) | set(CLIP_FIELDS),
    ):
        raise ValueError(
            f"an entry must be an object with exactly {', '.join(fields)} (and {' and '.join(CLIP_FIELDS)} for a clip's face)"
        )
    index, aspect, centre, side, sig, separation = (value[k] for k in fields)
    clip, frame = value.get("clip"), value.get("frame")
    if "clip" in value and not (
        isinstance(clip, str) and 0 < len(clip) <= 32 and all(c in "0123456789abcdef" for c in clip)
    ):
        raise ValueError("clip must be a run id of at most 32 lowercase hex digits")
    if "frame" in value and not (type(frame) is int and 0 <= frame < MAX_FRAME):
        raise ValueError(f"frame must be an integer in [0, {MAX_FRAME})")
    numbers = [
        aspect,
        side,
        separation,
        *(centre if isinstance(centre, list) else [None]),
        *(sig if isinstance(sig, list) else [None]),
    ]
    if type(index) is not int or not 0 <= index < MAX_ENTRIES:
        raise ValueError(f"index must be an integer in [0, {MAX_ENTRIES})")
    if (
        not isinstance(centre, list)
        or len(centre) != 2
        or not isinstance(sig, list)
        or len(sig) != GRID * GRID * 3
    ):
        raise ValueError(f"centre must hold 2 numbers and signature {GRID * GRID * 3}")
    if not all(type(v) in (int, float) and math.isfinite(v) for v in numbers) or not (
        aspect > 0 and side > 0 and separation >= 0
    ):
        raise ValueError(
            "aspect, centre, side, separation and signature must be finite numbers, aspect and side positive"
        )
    return Entry(
        index,
        float(aspect),
        (float(centre[0]), float(centre[1])),
        float(side),
        np.asarray(sig, np.float64),
        float(separation),
        clip,
        frame,
    )


def read(path: Path, notes: list[str] | None = None) -> list[Entry]:
    """Every entry of the ledger at ``path``; InputError naming the file and line when a
    line is not what `append` writes. A torn last line (no line end) is left out, and
    said once in ``notes``."""
    found: list[Entry] = []
    try:
        with open(path, "rb") as file:
            for number, raw in enumerate(iter(lambda: file.readline(MAX_LINE + 1), b""), 1):
                if len(raw) > MAX_LINE:
                    raise InputError(
                        f"{path}: line {number} is longer than {MAX_LINE} bytes: not a face ledger"
                    )
                if not raw.endswith(b"\n"):
                    if notes is not None:
                        notes.append(
                            f"{path}: line {number} is torn (no line end: a write cut short by a crash or a full disk); "
                            "it is ignored, and the next anonymize with this key file removes it"
                        )
                    break
                try:
                    values = json.loads(raw)
                    if not isinstance(values, list):
                        raise ValueError("a line must be a list of entries")
                    found += [_entry(value) for value in values]
                except ValueError as err:
                    raise InputError(f"{path}: line {number}: {err}") from None
                if len(found) > MAX_ENTRIES:
                    raise InputError(f"{path}: more than {MAX_ENTRIES} faces: not a face ledger")
    except OSError as err:
        raise InputError(f"{path}: cannot read the face ledger ({err.strerror})") from None
    return found


def read_for_key_file(
    key_file: str | Path | None, notes: list[str] | None = None
) -> list[Entry] | None:
    """The entries of ``key_file``'s ledger (`ledger_path`, `read`); None without a key file or ledger."""
    if key_file is None or not ledger_path(key_file).is_file():
        return None
    return read(ledger_path(key_file), notes)


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
