"""The face ledger: how recovery without metadata knows which faces it may touch.

Anonymize with ``--key-file K`` appends to ``K.faces.jsonl`` one line per photo: for
each face an `Entry` (its key index, place, signature and separation; made and matched
by `ledger_match`, which says why). The ledger holds nothing that the published photos
do not show but the one separation number per face; it lives beside the key file, with
the user, and is read as untrusted input (`read`). A clip's faces are entries too,
sampled along each track and marked with the run's id and their frame
(`dbaf_jax.video.track_ledger`).

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

from dbaf_jax.core.errors import InputError, OutputWriteError

SUFFIX = ".faces.jsonl"
GRID = 8  # signature cells per side (times 3 colours)
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
