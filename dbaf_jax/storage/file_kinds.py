"""Which files are photos and which are clips: the one answer the folder commands, the
video path, the web page's server and its script (which is served `for_page`) share.

Photos: a suffix of a format PIL opens (JPEG, PNG, WebP, BMP, TIFF, GIF and the rest
PIL registers), or, whatever the suffix, a file whose header PIL recognises
(`sniffed`). Clips: `CLIP_SUFFIXES`, by suffix only, since an output clip is written in
its input's container (video/clip.py has a muxer for each; a test holds the two
together). Companions: what our runs write beside an output and read with it
(``NAME.latents.npz`` beside an aligned ``NAME.png``, ``CLIP.dbaf.json`` beside a clip).
"""

from __future__ import annotations

import functools
from pathlib import Path

from PIL import Image

PHOTO, CLIP = "photo", "clip"
CLIP_SUFFIXES = (".mp4", ".mov", ".mkv", ".webm", ".avi")
SIDECAR_SUFFIX = ".dbaf.json"  # beside an anonymized clip: its sidecar (video/sidecar.py)
LATENTS_SUFFIX = ".latents.npz"  # beside an aligned output: its latents (``--save-latents``)
UNKNOWN_TYPE = "not an image or video this tool reads (unknown type): not processed"


@functools.cache
def photo_suffixes() -> frozenset[str]:
    """The suffixes of every format PIL can open (lower case, with the dot)."""
    Image.init()
    return frozenset(
        suffix for suffix, name in Image.registered_extensions().items() if name in Image.OPEN
    )


def kind_by_name(name: str | Path) -> str | None:
    """`PHOTO` or `CLIP` by the suffix of ``name`` (any case); None when the suffix says
    neither (the header may still: `sniffed`)."""
    suffix = Path(name).suffix.lower()
    if suffix in CLIP_SUFFIXES:
        return CLIP
    if suffix in photo_suffixes():
        return PHOTO
    return None


def sniffed(path: str | Path) -> str | None:
    """None when PIL recognises ``path``'s header as an image (a photo whatever its
    suffix), else why it is not processed."""
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
    return UNKNOWN_TYPE


def for_page() -> dict[str, list[str] | str]:
    """What the web page's script is told: the photo and clip suffixes and the sidecar's."""
    return {
        "photos": sorted(photo_suffixes()),
        "clips": list(CLIP_SUFFIXES),
        "sidecar": SIDECAR_SUFFIX,
    }
