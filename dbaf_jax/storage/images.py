"""Reading and writing the face images of the user commands.

Images are (H, W, 3) float32 RGB in [-1, 1] in memory. Outputs are PNG files whose
text chunk ``dbaf_jax`` holds JSON metadata (the key's salt and KDF parameters and
the model that made them; never the password).

Photos are checked against a pixel limit (``--max-pixels``, default `MAX_PIXELS`) read
from their header before any pixel is decoded (`size_refusal`): a small
file can declare a huge image (a 164 KB PNG of 13000 x 13000 pixels), and what a photo
costs grows with its pixels. PIL's own decompression-bomb limit is raised to ours (its
warning silenced), so that the refusal is ours, in one line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageOps, PngImagePlugin

from dbaf_jax.core import pipeline
from dbaf_jax.core.errors import InputError
from dbaf_jax.storage import file_kinds
from dbaf_jax.storage.atomic_files import write_file

METADATA_CHUNK = "dbaf_jax"
# zlib level 1: 2.7-3.3x faster to encode than PIL's default 6 for 6-8% larger files
# (python -m benchmarks.speed.png_encoding); on a fast device PNG encoding bounds a folder run.
PNG_COMPRESS_LEVEL = 1
# The default of --max-pixels: a 200-megapixel phone photo (16320 x 12240) passes, and a
# photo's run needs about 10 bytes a pixel besides its detector's tiles (docs/performance.md).
MAX_PIXELS = 250_000_000
LIMIT_NAME = "--max-pixels"  # what a refusal names as the limit it is over
DECODE_BAND = 512  # rows of a decoded photo copied out of PIL at a time

# Our limit is checked on each photo's header (`size_refusal`) before it is decoded. PIL's
# default (89 megapixels) would warn below it, in a line of its own, and refuse at twice that.
Image.MAX_IMAGE_PIXELS = max(Image.MAX_IMAGE_PIXELS or 0, MAX_PIXELS)
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A file that could not be used, and why."""

    path: Path
    reason: str


def list_images(folder: str | Path) -> list[Path]:
    """Every image file below ``folder`` (any nesting), sorted; by suffix, case-insensitive
    (`file_kinds.photo_suffixes`)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder}: not a directory")
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and p.suffix.lower() in file_kinds.photo_suffixes()
    )


def read_image(path: str | Path, size: int, max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """Decodes ``path`` to (size, size, 3) float32 in [-1, 1].

    Faces are expected aligned and square; other sizes are resized with bilinear
    filtering (as the reference's transforms.Resize does). Raises ValueError naming
    the file when it cannot be decoded or its header declares more than ``max_pixels``.
    """
    _allow(max_pixels)
    try:
        with Image.open(path) as img:
            refusal = _many_frames(img) or _over_limit(img.size, max_pixels)
            if not refusal:
                img = as_rgb8(img)[0]
                if img.size != (size, size):
                    img = img.resize((size, size), Image.BILINEAR)
                pixels = np.asarray(img, dtype=np.float32)
    except Exception as err:  # noqa: BLE001 - any decoder failure means "not a usable image"
        raise ValueError(f"{path}: {_unreadable(err, max_pixels)}") from None
    if refusal:
        raise ValueError(f"{path}: {refusal}")
    return to_float(pixels)


def read_photo(path: str | Path, max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """`read_photo_noted` without its note."""
    return read_photo_noted(path, max_pixels)[0]


def read_photo_noted(
    path: str | Path, max_pixels: int = MAX_PIXELS
) -> tuple[np.ndarray, str | None]:
    """Decodes a photo of any size to (H, W, 3) uint8 RGB, upright: its EXIF orientation
    applied (cameras store rotated pixels and say so there), any mode converted by
    `as_rgb8`; with its note (a dropped alpha channel) or None. ValueError naming the
    file when it cannot be decoded, holds several frames (`_many_frames`) or its header
    declares more than ``max_pixels`` (then nothing is decoded).

    The array is the caller's own (writable, pasted into in place): PIL's decoded image
    (4 bytes a pixel) is copied into it a band of rows at a time, so the peak is 7
    bytes a pixel (11 while a rotated photo is turned upright)."""
    _allow(max_pixels)
    try:
        with Image.open(path) as img:
            refusal = _many_frames(img) or _over_limit(img.size, max_pixels)
            if not refusal:
                frames = getattr(img, "n_frames", 1)
                ImageOps.exif_transpose(img, in_place=True)
                rgb, note = as_rgb8(img)
                notes = [note] if note else []
                if frames > 1:  # a multi-picture JPEG (MPO): the others are views of the same scene
                    notes.append(
                        f"its {frames - 1} other picture(s) (the camera's previews or second view) are not in the output"
                    )
                return _pixels(rgb), (f"{path}: {'; '.join(notes)}" if notes else None)
    except Exception as err:  # noqa: BLE001 - any decoder failure means "not a usable image"
        raise ValueError(f"{path}: {_unreadable(err, max_pixels)}") from None
    raise ValueError(f"{path}: {refusal}")


def _pixels(img: Image.Image) -> np.ndarray:
    """An RGB image's pixels (H, W, 3) uint8 in a writable array of their own, copied
    `DECODE_BAND` rows at a time (no second whole copy beside PIL's)."""
    width, height = img.size
    pixels = np.empty((height, width, 3), np.uint8)
    for top in range(0, height, DECODE_BAND):
        bottom = min(top + DECODE_BAND, height)
        pixels[top:bottom] = np.asarray(img.crop((0, top, width, bottom)))
    return pixels


def size_refusal(
    source: str | Path | IO[bytes], max_pixels: int = MAX_PIXELS, limit: str = LIMIT_NAME
) -> str | None:
    """Why a photo is not to be decoded, in a summary's words, or None: its header
    declares more than ``max_pixels`` pixels (``limit`` names the setting). Reads the
    header alone: ``source`` is a path or a binary file object at the image's start (the
    first bytes of an upload in an io.BytesIO do: a PNG's size is in its first 24
    bytes, a JPEG's after its metadata segments, rarely past 256 KB). ValueError when
    the header is not an image PIL reads, or not all there. The web page checks its
    uploads with this, before storing them."""
    _allow(max_pixels)
    try:
        with Image.open(source) as img:
            return _over_limit(img.size, max_pixels, limit)
    except Image.DecompressionBombError as err:
        return _unreadable(err, max_pixels, limit)
    except Exception as err:  # noqa: BLE001 - any decoder failure means "not an image"
        raise ValueError(_unreadable(err, max_pixels, limit)) from None


def declared_pixels(path: str | Path) -> int:
    """The pixels ``path``'s header declares; 0 when it cannot be read (its decode then
    fails and says why)."""
    try:
        with Image.open(path) as img:
            width, height = img.size
    except Exception:  # noqa: BLE001 - not an image PIL reads: read_photo_noted names it
        return 0
    return width * height


def _over_limit(size: tuple[int, int], max_pixels: int, limit: str = LIMIT_NAME) -> str | None:
    width, height = size
    if width * height <= max_pixels:
        return None
    return (
        f"{width} x {height} = {width * height:,} pixels, over the limit of {max_pixels:,} "
        f"({limit}): not decoded"
    )


def _allow(max_pixels: int) -> None:
    """PIL's decompression-bomb limit raised to ``max_pixels``: ours is the one that refuses."""
    if max_pixels > (Image.MAX_IMAGE_PIXELS or max_pixels):
        Image.MAX_IMAGE_PIXELS = max_pixels


def _unreadable(err: Exception, max_pixels: int, limit: str = LIMIT_NAME) -> str:
    """A decoder's failure in a summary's words: PIL's refusal past twice its limit
    (`_allow`: at least ours) is ours."""
    if isinstance(err, Image.DecompressionBombError):
        return (
            f"it declares more than {2 * (Image.MAX_IMAGE_PIXELS or 0):,} pixels, over the limit "
            f"of {max_pixels:,} ({limit}): not decoded"
        )
    return f"cannot read image ({err})"


def _many_frames(img: Image.Image) -> str | None:
    """Why an image of several frames (an animated GIF, PNG or WebP, a multi-page TIFF)
    is refused, or None: only its first frame would be processed, and the output (one
    PNG) would silently lose the rest. A camera's multi-picture JPEG (MPO) is read: its
    first picture is the photo."""
    frames = getattr(img, "n_frames", 1)
    if frames <= 1 or img.format == "MPO":
        return None
    return (
        f"holds {frames} frames (an animation or a multi-page file) and only one would be anonymized, so it is not "
        "processed; make it a video (anonymized frame by frame) or split it into single images"
    )


# Full scale of the integer and float modes PIL gives wider images (16-bit PNG and
# TIFF): their values are mapped to 0-255 from this range, not clipped at 255.
_WIDE_FULL_SCALE = {"I;16": 65535, "I;16L": 65535, "I;16B": 65535, "I;16N": 65535, "I": 65535}


def as_rgb8(img: Image.Image) -> tuple[Image.Image, str | None]:
    """Any PIL mode -> 8-bit RGB with its range kept, and a note when something is lost.

    16-bit and 32-bit integer greyscale (I;16*, I: PNG/TIFF 16-bit) are scaled from
    0-65535; float (F) from 0-1 when its values lie there, else from 0-255 or, above
    that, 0-65535 (PIL's own convert clips them at 255: a 16-bit face turned white and
    was never looked at). Alpha (RGBA, LA, PA, P or L with transparency) cannot be
    kept in an RGB output: the colours are kept and the note says the alpha was dropped.
    """
    note = None
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:
        note = f"its {img.mode} alpha channel (transparency) was dropped: the output is opaque RGB"
    if img.mode in _WIDE_FULL_SCALE or img.mode == "F":
        values = np.asarray(img, dtype=np.float64)
        if img.mode == "F":
            top = float(np.nanmax(values)) if values.size else 0.0
            scale = 1.0 if top <= 1.0 else 255.0 if top <= 255.0 else 65535.0
        else:
            scale = float(_WIDE_FULL_SCALE[img.mode])
        grey = np.clip(np.rint(np.nan_to_num(values) * (255.0 / scale)), 0, 255).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB"), note
    return (img if img.mode == "RGB" else img.convert("RGB")), note


def to_float(pixels: np.ndarray) -> np.ndarray:
    """uint8 -> float32 in [-1, 1], as torchvision's ToTensor then Normalize(0.5, 0.5) (the reference's input)."""
    return (pixels.astype(np.float32) / np.float32(255.0) - np.float32(0.5)) / np.float32(0.5)


def to_uint8(images: np.ndarray) -> np.ndarray:
    """Images in [-1, 1] -> uint8, values outside clipped."""
    return np.clip(np.rint((np.asarray(images, np.float32) + 1.0) * 127.5), 0, 255).astype(np.uint8)


def make_grid(
    images: np.ndarray, rows: int, padding: int = 2, pad_value: float = -1.0
) -> np.ndarray:
    """Tiles (N, H, W, 3) images in [-1, 1] into a uint8 (rows*(H+p)+p, cols*(W+p)+p, 3) grid.

    Images fill the grid row by row, cols = ceil(N / rows); ``padding`` pixels of
    ``pad_value`` (black by default) separate and surround them.
    """
    images = np.asarray(images, np.float32)
    n, h, w, c = images.shape
    cols = math.ceil(n / rows)
    grid = np.full(
        (rows * (h + padding) + padding, cols * (w + padding) + padding, c), pad_value, np.float32
    )
    for i, image in enumerate(images):
        top, left = padding + (i // cols) * (h + padding), padding + (i % cols) * (w + padding)
        grid[top : top + h, left : left + w] = image
    return to_uint8(grid)


def label_columns(
    grid: np.ndarray, labels: Sequence[str], cell_width: int, padding: int = 2
) -> np.ndarray:
    """A uint8 grid (`make_grid`) with a white strip above it naming each column
    (``cell_width`` pixels wide, ``padding`` between), in PIL's built-in font, wrapped to
    the column's width."""
    font = ImageFont.load_default()
    wrapped = [_wrap(label, font, cell_width) for label in labels]
    line_height = font.getbbox("Ag")[3] + 2
    strip_height = max(len(lines) for lines in wrapped) * line_height + 4
    strip = Image.new("RGB", (grid.shape[1], strip_height), (255, 255, 255))
    draw = ImageDraw.Draw(strip)
    for column, lines in enumerate(wrapped):
        left = padding + column * (cell_width + padding)
        for row, line in enumerate(lines):
            draw.text((left, 2 + row * line_height), line, fill=(0, 0, 0), font=font)
    return np.concatenate([np.asarray(strip), grid], axis=0)


def _wrap(text: str, font, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` pixels, broken at spaces."""
    lines = [""]
    for word in text.split():
        candidate = f"{lines[-1]} {word}".strip()
        if lines[-1] and font.getlength(candidate) > width:
            lines.append(word)
        else:
            lines[-1] = candidate
    return lines


class NoMetadataError(ValueError):
    """The image has no ``dbaf_jax`` metadata."""


def write_png(
    path: str | Path, image: np.ndarray, metadata: dict[str, Any], overwrite: bool = True
) -> Path:
    """Writes ``image`` (H, W, 3), uint8 or float in [-1, 1], as a PNG carrying
    ``metadata`` (`write_file`: atomic; exclusive unless ``overwrite``)."""
    info = PngImagePlugin.PngInfo()
    info.add_text(METADATA_CHUNK, json.dumps(metadata, sort_keys=True))
    pixels = image if image.dtype == np.uint8 else to_uint8(image)
    return write_file(
        path,
        lambda tmp: Image.fromarray(pixels).save(
            tmp, format="PNG", pnginfo=info, compress_level=PNG_COMPRESS_LEVEL
        ),
        overwrite,
    )


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The ``dbaf_jax`` metadata of a PNG written by `write_png`; NoMetadataError if
    absent, ValueError if not a JSON object."""
    try:
        with Image.open(path) as img:
            text = img.text.get(METADATA_CHUNK) if hasattr(img, "text") else None
    except Exception as err:  # noqa: BLE001
        raise ValueError(f"{path}: cannot read image ({err})") from None
    if text is None:
        raise NoMetadataError(
            f"{path}: no {METADATA_CHUNK} metadata (not written by dbaf_jax.commands.anonymize)"
        )
    try:
        metadata = json.loads(text)
    except (
        ValueError,
        RecursionError,
    ):  # nesting deeper than Python's stack, numbers over 4300 digits: not ours either
        raise ValueError(
            f"{path}: its {METADATA_CHUNK} metadata is not JSON we wrote (malformed, or a number too long)"
        ) from None
    if not isinstance(metadata, dict):
        raise ValueError(f"{path}: its {METADATA_CHUNK} metadata is not a JSON object")
    return metadata


def iter_batches(
    paths: list[Path], size: int, batch_size: int
) -> Iterator[tuple[list[Path], np.ndarray, list[Skipped]]]:
    """Yields (paths, images (B, size, size, 3), skipped) batches; unreadable files are
    skipped. The next batches decode on worker threads while the caller works on this one."""
    batch_paths, batch_images, skipped = [], [], []
    for path, image in pipeline.read_ahead(
        paths, lambda p: read_image(p, size), depth=2 * batch_size
    ):
        if isinstance(image, ValueError):
            skipped.append(Skipped(path, str(image)))
        else:
            batch_images.append(image)
            batch_paths.append(path)
        if len(batch_paths) == batch_size:
            yield batch_paths, np.stack(batch_images), skipped
            batch_paths, batch_images, skipped = [], [], []
    if batch_paths or skipped:
        yield (
            batch_paths,
            (np.stack(batch_images) if batch_images else np.zeros((0, size, size, 3), np.float32)),
            skipped,
        )


def input_images(in_dir: Path) -> list[Path]:
    """The images below ``in_dir`` (`list_images`); InputError naming it when it
    is missing or a file."""
    if not in_dir.exists():
        raise InputError(f"{in_dir}: no such input folder")
    if not in_dir.is_dir():
        raise InputError(f"{in_dir}: the input is a file, not a folder of images")
    return list_images(in_dir)
