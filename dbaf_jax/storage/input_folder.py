"""What a folder run finds below its input folder: every entry is an image, a video, a
file that belongs to one of our outputs, or refused with its reason, so that nothing in
the folder is passed over in silence.

Which files are images (photos), videos (clips) and companions (what our runs write
beside an output and read with it) is `dbaf_jax.storage.file_kinds`'s answer. Links are followed only to a file inside the folder: a link to a
folder, out of the folder, dangling or in a loop is refused, and so is anything that is
not a regular file (reading a FIFO would block the run).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from dbaf_jax.core.errors import InputError
from dbaf_jax.storage import file_kinds
from dbaf_jax.storage.images import Skipped


@dataclasses.dataclass(frozen=True)
class Listing:
    """The entries below a folder, each list sorted: ``images`` and ``videos`` to
    process, ``companions`` (read with their image or clip, with what they are) and
    ``refused`` (with why)."""

    images: list[Path]
    videos: list[Path]
    companions: list[Skipped]
    refused: list[Skipped]


def _link_refusal(path: Path, root: Path) -> str | None:
    """Why the link ``path`` is not followed, or None: it leads to a file inside ``root``."""
    try:
        target = path.resolve(strict=True)
    except RuntimeError:  # Python 3.11 reports a loop so
        return "a link loop: not read"
    except FileNotFoundError:
        return "a dangling link (what it names does not exist): not read"
    except OSError as err:
        return f"a link that cannot be followed ({err.strerror or err}): not read"
    if target.is_dir():
        return "a link to a folder: not followed (pass that folder itself to process its files)"
    if root not in target.parents:
        return "a link leading outside the input folder: not followed (copy the file in, or pass its folder)"
    if not target.is_file():
        return "a link to something that is not a regular file: not read"
    return None


def _companion(path: Path, names: set[str]) -> str | None:
    """What ``path`` is when it belongs to an image or clip beside it (by name), else None."""
    name = path.name
    if name.endswith(file_kinds.LATENTS_SUFFIX):
        stem = name[: -len(file_kinds.LATENTS_SUFFIX)]
        if any(
            Path(other).stem == stem and file_kinds.kind_by_name(other) == file_kinds.PHOTO
            for other in names
        ):
            return f"the latents of {stem}'s output: read with it (recover --aligned --mode latent)"
    if name.endswith(file_kinds.SIDECAR_SUFFIX):
        clip = name[: -len(file_kinds.SIDECAR_SUFFIX)]
        if clip in names and file_kinds.kind_by_name(clip) == file_kinds.CLIP:
            return f"the sidecar of the clip {clip}: read with it"
    return None


def list_inputs(in_dir: str | Path) -> Listing:
    """Every entry below ``in_dir`` (any nesting), classified (module docstring);
    InputError naming ``in_dir`` when it is missing or a file."""
    in_dir = Path(in_dir)
    if not in_dir.exists():
        raise InputError(f"{in_dir}: no such input folder")
    if not in_dir.is_dir():
        raise InputError(f"{in_dir}: the input is a file, not a folder of images")
    root = in_dir.resolve()
    found_images, videos, companions, refused = [], [], [], []

    def unlisted(err: OSError) -> None:
        refused.append(
            Skipped(
                Path(err.filename),
                f"{err.filename}: a folder that cannot be listed ({err.strerror or err}): its files are not processed",
            )
        )

    for folder, dirs, files in os.walk(
        in_dir, onerror=unlisted
    ):  # links to folders are not walked into
        here = Path(folder)
        for name in [d for d in dirs if (here / d).is_symlink()] + files:
            path = here / name
            if path.is_symlink():
                why = _link_refusal(path, root)
            else:
                why = (
                    None
                    if path.is_file()
                    else "not a regular file (a FIFO, socket or device): not read"
                )
            if why is None:
                kind = file_kinds.kind_by_name(path)
                if kind is not None:
                    (videos if kind == file_kinds.CLIP else found_images).append(path)
                    continue
                belongs = _companion(path, set(files))
                if belongs is not None:
                    companions.append(Skipped(path, f"{path}: {belongs}"))
                    continue
                why = file_kinds.sniffed(path)
                if why is None:
                    found_images.append(path)
                    continue
            refused.append(Skipped(path, f"{path}: {why}"))
    by_path = lambda item: item.path  # noqa: E731
    return Listing(
        sorted(found_images),
        sorted(videos),
        sorted(companions, key=by_path),
        sorted(refused, key=by_path),
    )
