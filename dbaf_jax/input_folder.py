"""What a folder run finds below its input folder: every entry is an image, a video, a
file that belongs to one of our outputs, or refused with its reason, so that nothing in
the folder is passed over in silence.

Images: a suffix PIL opens (TIFF and GIF among them), or any other file whose header
PIL recognises. Videos: `VIDEO_SUFFIXES`. Companions: what our runs write beside an
output and read with it (``NAME.latents.npz`` beside ``NAME.png``, ``CLIP.dbaf.json``
beside a clip). Links are followed only to a file inside the folder: a link to a
folder, out of the folder, dangling or in a loop is refused, and so is anything that is
not a regular file (reading a FIFO would block the run).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from PIL import Image

from dbaf_jax.errors import InputError
from dbaf_jax.images import Skipped

# The clips a folder run hands to the video path; video/clip.py's FORMATS has a muxer
# for each (a test holds the two together).
VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".webm", ".avi")
LATENTS_SUFFIX = ".latents.npz"  # beside an aligned output: its latents (``--save-latents``)
SIDECAR_SUFFIX = ".dbaf.json"  # beside an anonymized clip: its sidecar (video/sidecar.py)


def image_suffixes() -> frozenset[str]:
    """The suffixes of every format PIL can open (lower case, with the dot)."""
    Image.init()
    return frozenset(
        suffix for suffix, name in Image.registered_extensions().items() if name in Image.OPEN
    )


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


def _sniffed(path: Path) -> str | None:
    """None when PIL recognises ``path``'s header as an image, else why it is refused."""
    try:
        with Image.open(path):
            return None
    except OSError as err:
        if (
            err.errno is not None
        ):  # the system's reason (permission denied, I/O error), not the decoder's
            return f"cannot be read ({err.strerror or err})"
    except Exception:  # noqa: BLE001 - any other decoder failure means "not an image PIL knows"
        pass
    return "not an image or video this tool reads (unknown type): not processed"


def _companion(path: Path, names: set[str], suffixes: frozenset[str]) -> str | None:
    """What ``path`` is when it belongs to an image or clip beside it (by name), else None."""
    name = path.name
    if name.endswith(LATENTS_SUFFIX):
        stem = name[: -len(LATENTS_SUFFIX)]
        if any(
            Path(other).stem == stem and Path(other).suffix.lower() in suffixes for other in names
        ):
            return f"the latents of {stem}'s output: read with it (recover --aligned --mode latent)"
    if name.endswith(SIDECAR_SUFFIX):
        clip = name[: -len(SIDECAR_SUFFIX)]
        if clip in names and Path(clip).suffix.lower() in VIDEO_SUFFIXES:
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
    suffixes = image_suffixes()
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
                suffix = path.suffix.lower()
                if suffix in VIDEO_SUFFIXES:
                    videos.append(path)
                    continue
                if suffix in suffixes:
                    found_images.append(path)
                    continue
                belongs = _companion(path, set(files), suffixes)
                if belongs is not None:
                    companions.append(Skipped(path, f"{path}: {belongs}"))
                    continue
                why = _sniffed(path)
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
