"""A Ray run's staging folder, ``OUT/.dbaf-ray-<id>/``: the workers write each output
there under its own relative name (atomically, as every output is written), and the
driver moves it into place (`Staging.commit`) only after appending its face-ledger
entries, so that, as on one machine, no output is ever in place without its entries. A
retried batch writes the same bytes under the same staged name again; an actor killed
mid-write leaves nothing readable (`atomic_files.write_file`).

The driver holds an exclusive lock on the folder's ``lock`` file while the run lasts
and removes the folder when it ends, whatever the outcome. A staging folder whose lock
is free belongs to a run that was killed: it may hold faces (recovered ones too), so
`clear_stale` removes it before the next Ray run into that output folder does any work,
with a note.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
from pathlib import Path

from dbaf_jax.core.errors import OutputExistsError, OutputWriteError
from dbaf_jax.storage import atomic_files

PREFIX = ".dbaf-ray-"
LOCK = "lock"
PROBE = "probe"  # a token the path check reads from every node (`cluster.check_paths`)


def _locked(folder: Path) -> int | None:
    """A descriptor holding the exclusive lock of ``folder``'s lock file, or None when
    another process holds it."""
    fd = os.open(folder / LOCK, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def clear_stale(out_dir: Path) -> list[str]:
    """Removes the staging folders of killed runs below ``out_dir`` (their lock is free); a
    note for each, and for each one a running run still holds (left as it is)."""
    notes = []
    for folder in sorted(out_dir.glob(f"{PREFIX}*")) if out_dir.is_dir() else []:
        if not folder.is_dir() or folder.is_symlink():
            continue
        fd = _locked(folder)
        if fd is None:
            notes.append(f"{folder}: the staging folder of a Ray run still going; left as it is")
            continue
        try:
            shutil.rmtree(folder)
        finally:
            os.close(fd)
        notes.append(
            f"removed {folder}, the staging folder an interrupted Ray run left (it may hold faces)"
        )
    return notes


class Staging:
    """The staging folder of one run below ``out_dir``, made (private to its user) and
    locked; `close` removes it."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.root = out_dir / f"{PREFIX}{secrets.token_hex(8)}"
        try:
            self.root.mkdir(mode=0o700, parents=True)
            self._lock = _locked(self.root)
        except OSError as err:
            raise OutputWriteError(
                f"{self.root}: cannot make the run's staging folder ({err.strerror or err})"
            ) from None
        self.token = secrets.token_hex(16)
        (self.root / PROBE).write_text(self.token)

    def path(self, target: Path) -> Path:
        """Where a worker writes the output ``target`` (below ``out_dir``)."""
        return self.root / target.relative_to(self.out_dir)

    def target(self, staged: Path) -> Path:
        """The output a staged file becomes."""
        return self.out_dir / staged.relative_to(self.root)

    def commit(self, staged: Path, overwrite: bool) -> Path:
        """Moves ``staged`` into place (`atomic_files.place`): an existing output is
        replaced only with ``overwrite``, else OutputExistsError. Returns the output."""
        target = self.target(staged)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_files.place(staged, target, overwrite)
        except OutputExistsError:
            raise
        except OSError as err:
            raise OutputWriteError(
                f"{target}: cannot put it in place from {staged} ({err.strerror or err})"
            ) from None
        return target

    def close(self) -> None:
        """Removes the folder and whatever was not committed (a failed or stopped run's
        outputs are never put in place), then releases the lock."""
        try:
            shutil.rmtree(self.root, ignore_errors=True)
        finally:
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
