"""Dataset preparation: a folder of face images -> the dataset training reads
(`dbaf_jax.train.data.PreparedImages`).

Preparation (`prepare`, once, on one machine; the command ``python -m
dbaf_jax.commands.prepare_data --images DIR --out DATA_DIR --size 256``) walks ``DIR`` (any nesting, sorted), decodes every image with PIL, converts it to
RGB, resizes it to size x size with PIL's bilinear filter (what the reference's
``transforms.Resize((size, size))`` does to a PIL image, so the pixels match it) and
writes the images as PNG inside an ArrayRecord dataset built by a
tensorflow-datasets builder. TensorFlow is never imported: the images are encoded
with PIL before tfds sees them, and tfds decodes them with PIL when read through
``builder.as_data_source()`` / ``tfds.data_source``. Unreadable files are skipped,
counted and listed, never fatal.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from PIL import Image

from dbaf_jax.core.errors import ConfigError, InputError, OutputExistsError
from dbaf_jax.storage.images import list_images
from dbaf_jax.train.data import DATASET_NAME, DATASET_VERSION, SPLIT, SUMMARY_FILE


@dataclasses.dataclass(frozen=True)
class PrepareSummary:
    """What `prepare` did: counts, and the files it could not use (relative paths)."""

    out_dir: str
    size: int
    written: int
    skipped: tuple[str, ...]
    ignored: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    def report(self) -> str:
        lines = [f"{self.written} images written to {self.out_dir} at {self.size}x{self.size}"]
        lines.append(
            f"{len(self.skipped)} unreadable image files skipped" + (":" if self.skipped else "")
        )
        lines += [f"  {name}" for name in self.skipped]
        lines.append(f"{len(self.ignored)} files without an image suffix ignored")
        return "\n".join(lines)


def _read_resized(path: Path, size: int) -> Image.Image:
    """Decodes ``path`` fully (so truncated files fail here), RGB, size x size bilinear."""
    with Image.open(path) as img:
        img.load()
        img = img.convert("RGB")
        if img.size != (size, size):
            img = img.resize((size, size), Image.BILINEAR)
        return img


def _png_bytes(img: Image.Image) -> bytes:
    buffer = io.BytesIO()
    img.save(buffer, format="PNG")
    return buffer.getvalue()


def _builder_class():
    """The tfds builder for prepared face folders (made on first use: importing tfds is slow)."""
    global _FACE_BUILDER
    if _FACE_BUILDER is not None:
        return _FACE_BUILDER
    import tensorflow_datasets as tfds

    # Unregistered: readers find the dataset from its files (tfds.data_source / builder_from_directory).
    class DbafFaces(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """Aligned face images from a folder, resized and stored as PNG in ArrayRecord."""

        name = DATASET_NAME
        VERSION = tfds.core.Version(DATASET_VERSION)
        # tfds looks beside a builder's source file for download checksums; nothing is downloaded.
        code_path = None

        def __init__(
            self,
            *,
            image_dir: Path,
            image_paths: list[Path],
            size: int,
            skipped: list[str],
            **kwargs,
        ):
            self._image_dir, self._image_paths, self._size, self._skipped = (
                image_dir,
                image_paths,
                size,
                skipped,
            )
            super().__init__(**kwargs)

        def _info(self):
            return tfds.core.DatasetInfo(
                builder=self,
                description="Face images prepared by dbaf_jax.train.prepare.prepare",
                features=tfds.features.FeaturesDict(
                    {
                        "image": tfds.features.Image(
                            shape=(self._size, self._size, 3), encoding_format="png"
                        ),
                        "file_name": tfds.features.Text(),
                    }
                ),
            )

        def _split_generators(self, dl_manager):
            return {SPLIT: self._generate_examples()}

        def _generate_examples(self):
            # PIL releases the GIL while decoding and resizing; chunks bound the memory.
            with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
                for start in range(0, len(self._image_paths), _PREPARE_CHUNK):
                    chunk = self._image_paths[start : start + _PREPARE_CHUNK]
                    for path, png in zip(chunk, pool.map(self._encode, chunk)):
                        name = path.relative_to(self._image_dir).as_posix()
                        if png is None:
                            self._skipped.append(name)
                        else:
                            # PNG bytes go in encoded: tfds would need TensorFlow to encode arrays.
                            yield name, {"image": png, "file_name": name}

        def _encode(self, path: Path) -> bytes | None:
            try:
                return _png_bytes(_read_resized(path, self._size))
            except Exception:  # noqa: BLE001 - any decoder failure means "not a usable image"
                return None

    _FACE_BUILDER = DbafFaces
    return DbafFaces


_FACE_BUILDER = None
_PREPARE_CHUNK = 256


def prepare(
    image_dir: str | Path, out_dir: str | Path, size: int = 256, overwrite: bool = False
) -> PrepareSummary:
    """Converts a folder of face images into an ArrayRecord dataset at ``out_dir``.

    Files with an image suffix that PIL cannot decode are skipped and listed; other
    files are ignored and counted. The dataset is built next to ``out_dir`` and
    renamed into place, so ``out_dir`` never holds half a dataset. An existing
    non-empty ``out_dir`` is refused unless ``overwrite``. The summary is printed
    and returned. Raises OutputExistsError, ConfigError for a ``size`` below 1, or
    InputError for a missing folder or one without a readable image (leaving nothing
    behind).
    """
    image_dir, out_dir = Path(image_dir), Path(out_dir).absolute()
    if size < 1:
        raise ConfigError(f"{out_dir}: image size (--size) must be at least 1, got {size}")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not overwrite:
        raise OutputExistsError(
            f"{out_dir} exists and is not empty; choose another output or replace it (--overwrite)"
        )
    if not image_dir.is_dir():
        raise InputError(f"{image_dir}: no such image folder")
    image_paths = list_images(image_dir)
    image_set = set(image_paths)
    ignored = sorted(
        p.relative_to(image_dir).as_posix()
        for p in image_dir.rglob("*")
        if p.is_file() and p not in image_set
    )
    if not image_paths:
        raise InputError(f"{image_dir}: no image files ({len(ignored)} other files)")

    staging = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    skipped: list[str] = []
    builder = _builder_class()(
        image_dir=image_dir,
        image_paths=image_paths,
        size=size,
        skipped=skipped,
        data_dir=str(staging),
        file_format="array_record",
    )
    try:
        builder.download_and_prepare(download_dir=str(staging / "downloads"))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if len(skipped) < len(image_paths):
            raise
        # tfds refuses to finish a split without examples: every image was unreadable.
        raise InputError(
            f"{image_dir}: no readable images ({len(skipped)} unreadable, {len(ignored)} other files)"
        ) from None
    shutil.rmtree(staging / "downloads", ignore_errors=True)
    written = len(image_paths) - len(skipped)
    summary = PrepareSummary(str(out_dir), size, written, tuple(skipped), tuple(ignored))
    (staging / SUMMARY_FILE).write_text(summary.to_json())
    if out_dir.exists():
        shutil.rmtree(out_dir)
    staging.rename(out_dir)
    print(summary.report())
    return summary
