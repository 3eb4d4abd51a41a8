"""The web page's jobs: where uploads and results live, who may see them, and when they go.

Everything lives below one private folder (mode 0700) made when the server starts and
removed when it stops (`store.JobStore`); each job has a folder of its own inside it, removed when its
results have been downloaded (the zip, or every result one by one), when it has been
idle for `Limits.keep_seconds`, or when its page asks. A job belongs to the session
secret that created it: a request needs the job's id and that secret, both unguessable,
and learns nothing about jobs of other sessions (another browser tab is another
session). File names from the browser are only shown and offered back as download
names (`display_name`); on disk an upload is ``in/<index>/input<suffix>``.

A photo is also refused by its header before any of it is stored: one declaring more
than `Limits.pixels` (the server's ``--max-pixels``, default `MAX_PIXELS`) is answered
with the command line's line (`images.size_refusal`) and nothing of it is kept.

No HTTP here: the server (`dbaf_jax.web.server`) streams bodies into `Job.upload`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import threading
import time
import unicodedata
from pathlib import Path
from typing import Any, Callable, Iterator

from dbaf_jax.faces import ledger
from dbaf_jax.storage import file_kinds, images

OPERATIONS = ("anonymize", "recover")
KEY_FILE_NAME = "dbaf.key"  # the job's key file, uploaded or new; its ledger beside it
KEY_FILE_BYTES = 64 << 10  # a key file is a few hundred bytes of JSON
MAX_NAME = 120  # characters of a file name shown or offered back
# The page's --max-pixels: a 108-megapixel phone photo (12000 x 9000) passes, a 13000 x
# 13000 PNG (164 KB on the wire) is refused. A photo's run costs about 24 bytes a pixel
# above the model (docs/performance.md), so one run of the largest photo stays near 3 GB.
MAX_PIXELS = 120_000_000
PIXEL_LIMIT = "the server's --max-pixels"  # what a refusal on the page names as its limit
HEADER_BYTES = (
    1 << 20
)  # an upload's first bytes held to read its size; past them it is stored unjudged


class LimitError(Exception):
    """An upload or job past a bound of `Limits`; the message says which and how to go on."""


class NotFound(Exception):
    """No job of this session has that id (or it was deleted: the message says why)."""


class UnknownSession(NotFound):
    """The session secret is none the server holds (its page was closed, or it expired)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Bounds on what one server holds: bytes per file and per job, files per job, jobs at
    once (over all sessions), how long an idle job or session is kept, how long a job
    may wait to be started, sessions (pages) per client, and the pixels a photo may
    declare (refused on upload, by its header)."""

    file_bytes: int = 1 << 30
    job_bytes: int = 4 << 30
    files: int = 200
    jobs: int = 16
    keep_seconds: float = 3600.0
    open_seconds: float = 300.0
    sessions: int = 64
    pixels: int = MAX_PIXELS

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def display_name(name: str, fallback: str) -> str:
    """A browser's file name made safe to show and to offer back as a download name: its
    last path component, control and separator characters dropped, at most `MAX_NAME`
    characters; ``fallback`` when nothing is left. Never used as a path on disk."""
    name = unicodedata.normalize("NFC", name or "")
    name = re.split(r"[/\\]", name)[-1]
    name = "".join(c for c in name if unicodedata.category(c)[0] not in "CZ" or c == " ").strip(
        " ."
    )
    if len(name) > MAX_NAME:
        stem, suffix = os.path.splitext(name)
        name = stem[: MAX_NAME - len(suffix)] + suffix
    return name or fallback


def kind_of(name: str) -> str:
    """``photo`` or ``clip`` by the name's suffix (`file_kinds.kind_by_name`), ``sidecar``
    (a clip's sidecar, read with its clip), or ``unknown``: stored, then `sniffed` as the
    command line does (a photo whatever its suffix when PIL recognises its header)."""
    if name.lower().endswith(file_kinds.SIDECAR_SUFFIX):
        return "sidecar"
    return file_kinds.kind_by_name(name) or "unknown"


def sniffed(entry: "Entry") -> None:
    """An ``unknown`` entry's kind from its stored bytes: ``photo`` when PIL recognises its
    header, else skipped and named with the command line's reason."""
    why = file_kinds.sniffed(entry.stored)
    if why is None:
        entry.kind = file_kinds.PHOTO
    else:
        entry.kind, entry.stored = "other", None
        entry.state, entry.message = "skipped", f"{entry.name}: {why}"


def _fields(record: Any, *names: str) -> dict[str, Any]:
    """``record``'s attributes ``names`` by name: what the page is shown of it."""
    return {name: getattr(record, name) for name in names}


@dataclasses.dataclass
class Output:
    """A result file: its name for the browser, its path, and whether it was downloaded."""

    name: str
    path: Path
    downloaded: bool = False


@dataclasses.dataclass
class Entry:
    """One dropped file: its index and shown name, its kind (`kind_of`; ``other`` once
    sniffed as no photo), where it was stored (None when refused), its state (``uploaded``, ``queued``, ``working``, ``done``,
    ``skipped``, ``failed``), what to say about it, and its results."""

    index: int
    name: str
    kind: str
    stored: Path | None = None
    size: int = 0
    state: str = "uploaded"
    message: str = ""
    outputs: list[Output] = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict:
        shown = _fields(self, "index", "name", "kind", "size", "state", "message")
        return shown | {"outputs": [output.name for output in self.outputs]}


@dataclasses.dataclass
class Job:
    """One anonymize or recover run of one page: its uploads, key file, state and results."""

    id: str
    session: str
    operation: str
    folder: Path
    limits: Limits
    touched: float = dataclasses.field(default_factory=time.monotonic)
    entries: list[Entry] = dataclasses.field(default_factory=list)
    key_file: Path | None = None
    state: str = "open"  # open (taking files), queued, running, done
    summary: str = ""
    status: int | None = None
    extras: list[Output] = dataclasses.field(
        default_factory=list
    )  # a new key file, the face ledger
    error: str = ""
    serving: int = 0  # downloads in flight (`store.JobStore.begin_download`)
    zip_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    @property
    def bytes(self) -> int:
        return sum(entry.size for entry in self.entries)

    def new_entry(self, browser_name: str, declared: int | None) -> Entry:
        """A new entry for a dropped file, after checking the job's bounds (LimitError)."""
        if self.state != "open":
            raise LimitError("this job has started; drop the files on a new one")
        index = len(self.entries)
        name = display_name(browser_name, f"file{index + 1}")
        if index >= self.limits.files:
            raise LimitError(
                f"{name}: at most {self.limits.files} files per run; start another run for the rest"
            )
        entry = Entry(index, name, kind_of(name))
        self.entries.append(entry)
        if declared is not None:
            try:
                self.check_size(name, declared, 0)
            except (
                LimitError
            ) as err:  # refused before a byte is read, and still named in the run's summary
                entry.state, entry.message = "skipped", str(err)
                raise
        return entry

    def check_size(self, name: str, size: int, before: int) -> None:
        """LimitError when a file of ``size`` bytes (``before`` of it already counted) passes a bound."""
        if size > self.limits.file_bytes:
            raise LimitError(f"{name}: {over_the_limit(size, self.limits.file_bytes)} per file")
        if self.bytes - before + size > self.limits.job_bytes:
            raise LimitError(
                f"{name}: the run would hold more than {_megabytes(self.limits.job_bytes)}; start another run for the rest"
            )

    def upload(self, entry: Entry) -> "Upload":
        """Where the entry's bytes go, within the bounds: its private input file. Past a
        bound the `Upload` raises LimitError and removes what it wrote; a photo (or a
        file of no known suffix) whose header declares more than `Limits.pixels` is
        refused before anything is written (`Upload.refusal`); a file of no known suffix
        is kept only when its header is a photo's (`sniffed`)."""
        suffix = (
            file_kinds.SIDECAR_SUFFIX
            if entry.kind == "sidecar"
            else os.path.splitext(entry.name.lower())[1]
            if entry.kind != "unknown"
            else ""  # never a suffix of the browser's choosing on disk
        )
        path = self.folder / "in" / str(entry.index) / ("input" + suffix)

        def check(size: int) -> None:
            self.check_size(entry.name, size, entry.size)
            entry.size = size
            self.touched = time.monotonic()

        def finished(ok: bool, error: str) -> None:
            entry.stored = path if ok else None
            if not ok:
                entry.size, entry.state, entry.message = 0, "skipped", error
            elif entry.kind == "unknown":
                sniffed(entry)
                if entry.stored is None:  # not a photo: nothing of it stays
                    path.unlink(missing_ok=True)
                    with contextlib.suppress(OSError):
                        path.parent.rmdir()
            self.touched = time.monotonic()

        return Upload(path, check, finished, self._pixel_check(entry))

    def _pixel_check(self, entry: Entry) -> Callable[[bytes], str | None] | None:
        """The refusal of a photo's first bytes (`images.size_refusal` against
        `Limits.pixels`), naming the file; None for a clip or a sidecar."""
        if entry.kind not in (file_kinds.PHOTO, "unknown"):
            return None

        def refusal(first: bytes) -> str | None:
            why = images.size_refusal(io.BytesIO(first), self.limits.pixels, PIXEL_LIMIT)
            return f"{entry.name}: {why}" if why else None

        return refusal

    def key_upload(self, part: str) -> "Upload":
        """Where the job's key file (``part`` ``key``) or its face ledger (``ledger``,
        beside the key file where `ledger.ledger_path` looks) goes, within
        `KEY_FILE_BYTES` or `Limits.file_bytes`."""
        if self.state != "open":
            raise LimitError("this run has started; give the key file before starting")
        key = self.folder / "key" / KEY_FILE_NAME
        path, bound = (
            (key, KEY_FILE_BYTES)
            if part == "key"
            else (ledger.ledger_path(key), self.limits.file_bytes)
        )
        what = "key file" if part == "key" else "face ledger"

        def check(size: int) -> None:
            if size > bound:
                raise LimitError(f"the {what} is over the limit of {_megabytes(bound)}")

        def finished(ok: bool, error: str) -> None:
            if part == "key":
                self.key_file = key if ok else None

        return Upload(path, check, finished)

    def output_path(self, entry: Entry) -> Path:
        """The private output folder of ``entry``."""
        folder = self.folder / "out" / str(entry.index)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        return folder

    def downloads(self) -> Iterator[Output]:
        for entry in self.entries:
            yield from entry.outputs
        yield from self.extras

    def as_dict(self) -> dict:
        shown = _fields(self, "id", "operation", "state", "summary", "status", "error")
        return shown | {
            "files": [entry.as_dict() for entry in self.entries],
            "extras": [extra.name for extra in self.extras],
        }


class Upload:
    """A file being received: ``write`` each chunk, then ``close(ok)``; ``check(size)``
    raises LimitError past a bound, and a failed or refused upload leaves nothing on
    disk. ``finished(ok, error)`` records the outcome.

    With ``header`` (first bytes -> a refusal or None; ValueError while they do not
    hold the header yet), nothing is written until it answers or `HEADER_BYTES` have
    come: the bytes wait in memory. A refused file's ``refusal`` is set and the rest of
    its body is read and dropped (a browser that is still sending gets the answer, not
    a broken connection); ``close`` then records it as refused."""

    def __init__(
        self,
        path: Path | None,
        check: Callable[[int], None],
        finished: Callable[[bool, str], None],
        header: Callable[[bytes], str | None] | None = None,
    ):
        self.path, self.size, self._check, self._finished = path, 0, check, finished
        self._header, self._head = header, bytearray()
        self.refusal: str | None = None
        self._out = None
        if header is None:
            self._open()

    def _open(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.path.unlink(missing_ok=True)  # a key file given again replaces the first
            self._out = open(self.path, "xb", opener=_private)

    def write(self, chunk: bytes) -> None:
        self._check(self.size + len(chunk))
        self.size += len(chunk)
        if self.refusal is not None:
            return
        if self._header is not None:
            self._head += chunk
            if not self._judged():
                return
            if self.refusal is not None:
                self._head = bytearray()
                return
            chunk = self._take_head()
        if self._out is not None:
            self._out.write(chunk)

    def _judged(self) -> bool:
        """Whether the header check has answered (or `HEADER_BYTES` came without one)."""
        try:
            self.refusal = self._header(bytes(self._head))
        except ValueError:  # not all there yet, or no image PIL reads: stored unjudged
            if len(self._head) < HEADER_BYTES:
                return False
        self._header = None
        return True

    def _take_head(self) -> bytes:
        """The bytes held for the header, the file opened to take them."""
        head, self._head, self._header = bytes(self._head), bytearray(), None
        self._open()
        return head

    def close(self, ok: bool, error: str = "") -> None:
        if ok and self.refusal is not None:
            ok, error = False, self.refusal
        if ok and self._header is not None:  # all of it came before the header check answered
            head = self._take_head()
            if self._out is not None:
                self._out.write(head)
        if self._out is not None:
            self._out.close()
            if not ok:
                self.path.unlink(missing_ok=True)
                with contextlib.suppress(
                    OSError
                ):  # the upload's own folder; a folder still holding others stays
                    self.path.parent.rmdir()
        self._finished(ok, error)


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def _megabytes(size: int) -> str:
    """``size`` bytes as the page shows it (also in app.js): MB, KB under 1 MB, bytes under 1 KB."""
    return (
        f"{size / (1 << 20):.1f} MB"
        if size >= 1 << 20
        else f"{size / 1024:.1f} KB"
        if size >= 1024
        else f"{size} bytes"
    )


def over_the_limit(size: int, bound: int) -> str:
    """The words ``SIZE is over the limit of BOUND``, each as `_megabytes` shows it, or in
    bytes where those two would read alike (also in app.js)."""
    shown = [_megabytes(size), _megabytes(bound)]
    if shown[0] == shown[1]:
        shown = [f"{size:,} bytes", f"{bound:,} bytes"]
    return f"{shown[0]} is over the limit of {shown[1]}"
