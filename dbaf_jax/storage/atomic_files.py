"""Files created atomically (`write_file`): a reader never sees a torn file, a run killed
meanwhile leaves no readable pixels behind, and an existing file is never replaced
unless asked; the named temporaries a killed run left elsewhere are cleared on the next
run (`remove_stale_partials`). Every output of the commands is written this way.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import secrets
from pathlib import Path
from typing import Callable

from dbaf_jax.core.errors import OutputExistsError, OutputWriteError

# A named temporary: `.NAME.<pid>.<hex>.partial` (older versions: `.NAME.<hex>.partial`).
PARTIAL_NAME = re.compile(r"^\..+?\.(?:(?P<pid>\d+)\.)?[0-9a-f]{8}\.partial$")


def _partial_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.partial")


def _unnamed_file(folder: Path) -> int | None:
    """A file descriptor of a new file without a name in ``folder`` (Linux O_TMPFILE):
    if the process is killed, nothing is left to find. None where the system or file
    system has no such files; other failures (permission, read-only, full) raise."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None:
        return None
    try:
        return os.open(folder, flag | os.O_RDWR, 0o666)
    except OSError as err:
        if err.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return None
        raise


def _exists_error(path: Path) -> OutputExistsError:
    return OutputExistsError(
        f"{path} exists already (made by another run?); pass --overwrite to replace it"
    )


def write_file(path: str | Path, write: Callable[[Path], None], overwrite: bool = False) -> Path:
    """Creates ``path`` atomically: ``write(tmp)`` fills a temporary file, which then
    becomes ``path`` in one step, so a reader never sees a torn file.

    On Linux the temporary file has no name (O_TMPFILE, ``tmp`` is its /proc/self/fd
    link) until it is linked into place: a run killed meanwhile leaves no readable
    pixels behind. Elsewhere it is ``.NAME.<pid>.<hex>.partial`` beside ``path``, which
    `remove_stale_partials` clears on the next run into that folder once the process
    is gone. Without ``overwrite`` the file is created exclusively: if ``path`` exists
    (another run made it meanwhile), OutputExistsError and nothing is replaced. Any
    other failure is OutputWriteError naming ``path`` and the system's reason
    (permission, read-only file system, full disk); the temporary file is removed.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = _unnamed_file(path.parent)
        if fd is None:
            _write_named(path, write, overwrite)
            return path
        try:
            write(Path(f"/proc/self/fd/{fd}"))
            _link_into_place(fd, path, overwrite)
        finally:
            os.close(fd)
    except OSError as err:
        if isinstance(err, OutputExistsError):
            raise
        raise OutputWriteError(f"{path}: cannot write it ({err.strerror or err})") from None
    return path


def _link(fd: int, path: Path) -> None:
    """linkat(/proc/self/fd/FD, path, AT_SYMLINK_FOLLOW): names an unnamed file. A
    src_dir_fd makes Python call linkat with the flag; plain os.link would link the
    /proc symlink itself (EXDEV)."""
    proc = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(str(fd), path, src_dir_fd=proc, follow_symlinks=True)
    finally:
        os.close(proc)


def _link_into_place(fd: int, path: Path, overwrite: bool) -> None:
    """Gives the unnamed file ``fd`` the name ``path``."""
    if not overwrite:
        try:
            _link(fd, path)
        except FileExistsError:
            raise _exists_error(path) from None
        return
    # link() never replaces, so a name for the instant between link and rename.
    tmp = _partial_path(path)
    try:
        _link(fd, tmp)
        os.replace(tmp, path)
    finally:
        _remove_quietly(tmp)


def _write_named(path: Path, write: Callable[[Path], None], overwrite: bool) -> None:
    tmp = _partial_path(path)
    try:
        write(tmp)
        place(tmp, path, overwrite)
    finally:
        _remove_quietly(tmp)


def place(done: str | Path, path: str | Path, overwrite: bool = False) -> None:
    """Gives the complete file ``done`` the name ``path`` (on the same file system) in one
    step, so a reader sees no file or the whole one; ``path`` is replaced only with
    ``overwrite``, else OutputExistsError when it exists. OSError for the system's other
    refusals; ``done`` may still be there then."""
    done, path = Path(done), Path(path)
    if overwrite:
        os.replace(done, path)
        return
    try:
        os.link(done, path)
    except FileExistsError:
        raise _exists_error(path) from None
    except OSError:  # no hard links here: an exclusively created placeholder reserves the name
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            raise _exists_error(path) from None
        os.replace(done, path)
        return
    os.unlink(done)


def _remove_quietly(path: Path) -> None:
    """Removes a temporary file; a failure here (read-only) must not hide the error that
    brought us here, and the next run's `remove_stale_partials` retries."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def process_alive(pid: int) -> bool:
    """Whether the process ``pid`` runs (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_partials(folder: str | Path, name: str | None = None) -> list[Path]:
    """Removes the named temporaries (`write_file`) below ``folder`` that a killed run
    left (their process is gone, or an older version named no process) and returns them.
    They may hold the pixels of faces. A running process's temporaries stay. With
    ``name``: only those of the file ``folder/name``, for a run that writes one file
    into a folder it does not own (a clip into a home folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    for path in (
        folder.rglob(".*.partial")
        if name is None
        else folder.glob(f".{glob.escape(name)}.*.partial")
    ):
        match = PARTIAL_NAME.match(path.name)
        if match is None or not path.is_file():
            continue
        pid = match.group("pid")
        if pid is not None and process_alive(int(pid)):
            continue
        path.unlink(missing_ok=True)
        removed.append(path)
    return sorted(removed)
