"""Where a folder run writes, checked before any work is done.

The output folder must not be the input folder nor inside it (outputs would replace
originals, or be read as inputs by the next run), no output may be one of the inputs,
and the folder (or the one it will be made in) must take a file. Temporaries a killed run
left there (`atomic_files.remove_stale_partials`: they may hold face pixels) are removed at
the start, and the user is told.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterable

from dbaf_jax.core.errors import InputError
from dbaf_jax.storage import atomic_files


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_location(
    in_dir: Path, out_dir: Path, sources: Iterable[Path], targets: Iterable[Path]
) -> None:
    """InputError naming the folder when ``out_dir`` is ``in_dir`` or inside it, an
    output would be one of the inputs, or ``out_dir`` cannot be made or written to
    (the system's reason: permission denied, read-only file system, ...), probed with
    an unnamed temporary file in it or, when missing, in the folder it will be made in."""
    inside = _inside(out_dir.resolve(), in_dir.resolve())
    if inside:
        where = "is" if out_dir.resolve() == in_dir.resolve() else "is inside"
        raise InputError(
            f"{out_dir}: the output folder {where} the input folder {in_dir}; choose a folder outside it"
        )
    inputs = {source.resolve() for source in sources}
    for target in targets:
        if target.resolve() in inputs:
            raise InputError(
                f"{target}: an output would replace this input; choose another output folder"
            )
    existing = next(parent for parent in (out_dir, *out_dir.parents) if parent.exists())
    if not existing.is_dir():
        raise InputError(f"{out_dir}: cannot be the output folder, {existing} is a file")
    try:
        # In the folder, or where it will be made: nothing is created before the run is sure to start.
        with tempfile.TemporaryFile(dir=existing) as probe:  # a byte, so a full disk shows here too
            probe.write(b"\0")
            probe.flush()
    except OSError as err:
        raise InputError(
            f"{out_dir}: cannot write to the output folder ({err.strerror or err})"
        ) from None


def clear_stale_temporaries(out_dir: Path, name: str | None = None) -> list[str]:
    """Removes the temporaries killed runs left below ``out_dir`` (with ``name``: only
    those of ``out_dir/name``); a note per file."""
    return [
        f"removed {path}, a temporary file an interrupted run left (it may hold face pixels)"
        for path in atomic_files.remove_stale_partials(out_dir, name)
    ]
