"""Reading and writing the face images of the user commands.

Images are (H, W, 3) float32 RGB in [-1, 1] in memory. Outputs are PNG files whose
text chunk ``dbaf_jax`` holds JSON metadata (the key's salt and KDF parameters and
the model that made them; never the password).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont, ImageOps, PngImagePlugin

from dbaf_jax import pipeline
from dbaf_jax.errors import OutputExistsError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
METADATA_CHUNK = "dbaf_jax"
# zlib level 1: 2.7-3.3x faster to encode than PIL's default 6 for 6-8% larger files
# (python -m benchmarks.png_encoding); on a fast device PNG encoding bounds a folder run.
PNG_COMPRESS_LEVEL = 1


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A file that could not be used, and why."""

    path: Path
    reason: str


def list_images(folder: str | Path) -> list[Path]:
    """Every image file below ``folder`` (any nesting), sorted; by suffix, case-insensitive."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder}: not a directory")
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def read_image(path: str | Path, size: int) -> np.ndarray:
    """Decodes ``path`` to (size, size, 3) float32 in [-1, 1].

    Faces are expected aligned and square; other sizes are resized with bilinear
    filtering (as the reference's transforms.Resize does). Raises ValueError naming
    the file when it cannot be decoded.
    """
    try:
        with Image.open(path) as img:
            img = img.convert("RGB")
            if img.size != (size, size):
                img = img.resize((size, size), Image.BILINEAR)
            pixels = np.asarray(img, dtype=np.float32)
    except Exception as err:  # noqa: BLE001 - any decoder failure means "not a usable image"
        raise ValueError(f"{path}: cannot read image ({err})") from None
    return to_float(pixels)


def read_photo(path: str | Path) -> np.ndarray:
    """Decodes a photo of any size to (H, W, 3) uint8 RGB, upright: its EXIF orientation
    applied (cameras store rotated pixels and say so there). ValueError naming the file
    when it cannot be decoded."""
    try:
        with Image.open(path) as img:
            return np.asarray(ImageOps.exif_transpose(img).convert("RGB"))
    except Exception as err:  # noqa: BLE001 - any decoder failure means "not a usable image"
        raise ValueError(f"{path}: cannot read image ({err})") from None


def to_float(pixels: np.ndarray) -> np.ndarray:
    """uint8 -> float32 in [-1, 1], as torchvision's ToTensor then Normalize(0.5, 0.5) (the reference's input)."""
    return (pixels.astype(np.float32) / np.float32(255.0) - np.float32(0.5)) / np.float32(0.5)


def to_uint8(images: np.ndarray) -> np.ndarray:
    """Images in [-1, 1] -> uint8, values outside clipped."""
    return np.clip(np.rint((np.asarray(images, np.float32) + 1.0) * 127.5), 0, 255).astype(np.uint8)


def make_grid(images: np.ndarray, rows: int, padding: int = 2, pad_value: float = -1.0) -> np.ndarray:
    """Tiles (N, H, W, 3) images in [-1, 1] into a uint8 (rows*(H+p)+p, cols*(W+p)+p, 3) grid.

    Images fill the grid row by row, cols = ceil(N / rows); ``padding`` pixels of
    ``pad_value`` (black by default) separate and surround them.
    """
    images = np.asarray(images, np.float32)
    n, h, w, c = images.shape
    cols = math.ceil(n / rows)
    grid = np.full((rows * (h + padding) + padding, cols * (w + padding) + padding, c), pad_value, np.float32)
    for i, image in enumerate(images):
        top, left = padding + (i // cols) * (h + padding), padding + (i % cols) * (w + padding)
        grid[top : top + h, left : left + w] = image
    return to_uint8(grid)


def label_columns(grid: np.ndarray, labels: Sequence[str], cell_width: int, padding: int = 2) -> np.ndarray:
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


def write_file(path: str | Path, write: Callable[[Path], None], overwrite: bool = False) -> Path:
    """Creates ``path`` atomically: ``write(tmp)`` fills a temporary file beside it,
    which then becomes ``path`` in one step, so a reader never sees a torn file.

    Without ``overwrite`` the file is created exclusively: if ``path`` exists (another
    run made it meanwhile), OutputExistsError and nothing is replaced; a hard link
    gives that atomically where the file system has them, else an exclusively created
    placeholder reserves the name. The temporary file is removed on any failure.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.partial")
    try:
        write(tmp)
        if overwrite:
            os.replace(tmp, path)
            return path
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise OutputExistsError(f"{path} exists already (made by another run?); pass --overwrite to replace it") from None
        except OSError:
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                raise OutputExistsError(f"{path} exists already (made by another run?); pass --overwrite to replace it") from None
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_png(path: str | Path, image: np.ndarray, metadata: dict[str, Any], overwrite: bool = True) -> Path:
    """Writes ``image`` (H, W, 3), uint8 or float in [-1, 1], as a PNG carrying
    ``metadata`` (`write_file`: atomic; exclusive unless ``overwrite``)."""
    info = PngImagePlugin.PngInfo()
    info.add_text(METADATA_CHUNK, json.dumps(metadata, sort_keys=True))
    pixels = image if image.dtype == np.uint8 else to_uint8(image)
    return write_file(path, lambda tmp: Image.fromarray(pixels).save(tmp, format="PNG", pnginfo=info, compress_level=PNG_COMPRESS_LEVEL), overwrite)


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The ``dbaf_jax`` metadata of a PNG written by `write_png`; NoMetadataError if
    absent, ValueError if not a JSON object."""
    try:
        with Image.open(path) as img:
            text = img.text.get(METADATA_CHUNK) if hasattr(img, "text") else None
    except Exception as err:  # noqa: BLE001
        raise ValueError(f"{path}: cannot read image ({err})") from None
    if text is None:
        raise NoMetadataError(f"{path}: no {METADATA_CHUNK} metadata (not written by dbaf_jax.anonymize)")
    try:
        metadata = json.loads(text)
    except (json.JSONDecodeError, RecursionError):  # nesting deeper than Python's stack is not ours either
        raise ValueError(f"{path}: its {METADATA_CHUNK} metadata is not JSON") from None
    if not isinstance(metadata, dict):
        raise ValueError(f"{path}: its {METADATA_CHUNK} metadata is not a JSON object")
    return metadata


def iter_batches(paths: list[Path], size: int, batch_size: int) -> Iterator[tuple[list[Path], np.ndarray, list[Skipped]]]:
    """Yields (paths, images (B, size, size, 3), skipped) batches; unreadable files are
    skipped. The next batches decode on worker threads while the caller works on this one."""
    batch_paths, batch_images, skipped = [], [], []
    for path, image in pipeline.read_ahead(paths, lambda p: read_image(p, size), depth=2 * batch_size):
        if isinstance(image, ValueError):
            skipped.append(Skipped(path, str(image)))
        else:
            batch_images.append(image)
            batch_paths.append(path)
        if len(batch_paths) == batch_size:
            yield batch_paths, np.stack(batch_images), skipped
            batch_paths, batch_images, skipped = [], [], []
    if batch_paths or skipped:
        yield batch_paths, (np.stack(batch_images) if batch_images else np.zeros((0, size, size, 3), np.float32)), skipped
