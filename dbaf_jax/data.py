"""Dataset preparation and the training input pipeline.

Preparation (`prepare`, once, on one machine; the command ``python -m
dbaf_jax.commands.prepare_data --images DIR --out DATA_DIR --size 256``) walks ``DIR`` (any nesting, sorted), decodes every image with PIL, converts it to
RGB, resizes it to size x size with PIL's bilinear filter (what the reference's
``transforms.Resize((size, size))`` does to a PIL image, so the pixels match it) and
writes the images as PNG inside an ArrayRecord dataset built by a
tensorflow-datasets builder. TensorFlow is never imported: the images are encoded
with PIL before tfds sees them, and tfds decodes them with PIL when read through
``builder.as_data_source()`` / ``tfds.data_source``. Unreadable files are skipped,
counted and listed, never fatal.

Training reads the dataset with `batches` (over `PreparedImages`): an infinite (or ``num_epochs``
long) stream of host-local batches, float32 (B_local, size, size, 3) in [-1, 1]
(``(pixels / 255 - 0.5) / 0.5`` like the reference's ToTensor + Normalize). The
order is a pure function of (seed, step): epoch e visits the images in the order of
a keyed permutation (Grain's ``index_shuffle``) seeded from (seed, e), and the
global batch of step s holds stream positions [s*G, (s+1)*G) for global batch size
G, so a batch may straddle two epochs and no image is dropped. Host p of P takes
rows [p*G/P, (p+1)*G/P) of every global batch. Resuming at ``start_step`` therefore
costs nothing and yields exactly the batches an uninterrupted run would have.

`SyntheticFaces` gives the same stream over deterministic smooth random images, for
smoke runs without a dataset.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, Protocol

import grain
import numpy as np
from PIL import Image

from dbaf_jax.errors import ConfigError, DatasetError, InputError, OutputExistsError
from dbaf_jax.images import list_images, to_float

DATASET_NAME = "dbaf_faces"
DATASET_VERSION = "1.0.0"
SPLIT = "train"
SUMMARY_FILE = "prepare_summary.json"
# Rounds of Grain's Feistel index shuffle; 4 is Grain's own default.
SHUFFLE_ROUNDS = 4


class ImageSource(Protocol):
    """Random access to uint8 (size, size, 3) images."""

    size: int

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> np.ndarray: ...


# ----------------------------------------------------------------------------------
# Preparation


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
                description="Face images prepared by dbaf_jax.data.prepare",
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


# ----------------------------------------------------------------------------------
# Sources


class PreparedImages:
    """The images of a dataset written by `prepare`, as uint8 (size, size, 3) arrays.

    Raises DatasetError if ``data_dir`` is missing or holds no prepared dataset.
    """

    def __init__(self, data_dir: str | Path):
        import tensorflow_datasets as tfds

        if not Path(data_dir).is_dir():
            raise DatasetError(f"{data_dir}: no such dataset directory")
        builder_dir = Path(data_dir) / DATASET_NAME / DATASET_VERSION
        if not (builder_dir / "dataset_info.json").is_file():
            raise DatasetError(
                f"{data_dir}: not a dataset prepared by `python -m dbaf_jax.commands.prepare_data`"
            )
        builder = tfds.builder_from_directory(str(builder_dir))
        self.data_dir = Path(data_dir)
        self._source = builder.as_data_source(split=SPLIT)
        self.size = int(builder.info.features["image"].shape[0])

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index: int) -> np.ndarray:
        try:
            return self._source[index]["image"]
        except Exception as err:  # noqa: BLE001 - the reader's own errors (a hash mismatch in a damaged file) name neither
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise DatasetError(
                f"{self.data_dir}: record {index} is damaged ({reason[:200]}); prepare the dataset again"
            ) from None


class Subset:
    """Records [start, stop) of another source: a training part and a held-out part of one dataset."""

    def __init__(self, source: ImageSource, start: int, stop: int):
        if not 0 <= start <= stop <= len(source):
            raise DatasetError(
                f"records [{start}, {stop}) do not lie within the dataset's {len(source)}"
            )
        self.source, self.start, self.stop = source, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index: int) -> np.ndarray:
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.source[self.start + index]


class SyntheticFaces:
    """Deterministic smooth random images: image i depends only on (seed, i).

    Each is a sum of three random colour fields at 4x4, 8x8 and 16x16 upsampled
    bicubically, with a brighter ellipse in the middle standing in for a face.
    """

    def __init__(self, num_images: int, size: int, seed: int = 0):
        self.num_images, self.size, self.seed = num_images, size, seed
        yy, xx = np.mgrid[0:size, 0:size] / max(size - 1, 1) * 2 - 1
        self._face = np.exp(-(((xx / 0.55) ** 2 + (yy / 0.75) ** 2) ** 2))[..., None]

    def __len__(self) -> int:
        return self.num_images

    def __getitem__(self, index: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, index])
        field = np.zeros((self.size, self.size, 3), np.float32)
        for cells, amplitude in ((4, 0.6), (8, 0.3), (16, 0.15)):
            coarse = rng.normal(0.0, amplitude, (cells, cells, 3)).astype(np.float32)
            channels = [
                np.asarray(
                    Image.fromarray(coarse[..., c]).resize((self.size, self.size), Image.BICUBIC)
                )
                for c in range(3)
            ]
            field += np.stack(channels, axis=-1)
        skin = rng.uniform(0.2, 0.7, 3).astype(np.float32)
        image = np.tanh(field) * 0.5 + self._face * skin
        return np.clip(np.rint((image + 1.0) * 127.5), 0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------------
# Loader


def _epoch_seed(seed: int, epoch: int) -> int:
    """A 32-bit seed for one epoch's permutation (SeedSequence's mixing is a fixed algorithm)."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def record_index(position: int, num_records: int, seed: int) -> int:
    """The record at stream ``position``: epoch position // n, permuted within the epoch."""
    epoch, offset = divmod(position, num_records)
    if num_records == 1:
        return 0
    return grain.experimental.index_shuffle(
        offset, max_index=num_records - 1, seed=_epoch_seed(seed, epoch), rounds=SHUFFLE_ROUNDS
    )


def batches(
    source: ImageSource,
    global_batch_size: int,
    seed: int,
    start_step: int = 0,
    process_index: int | None = None,
    process_count: int | None = None,
    num_epochs: int | None = None,
    num_threads: int = 8,
) -> Iterator[np.ndarray]:
    """Host-local batches (B_local, size, size, 3) float32 of ``source``, from ``start_step`` on.

    See the module docstring for the order. ``num_epochs=None`` never ends; otherwise
    the stream stops after floor(num_epochs * len(source) / global_batch_size) steps.
    """
    if process_index is None or process_count is None:
        import jax

        process_index = jax.process_index() if process_index is None else process_index
        process_count = jax.process_count() if process_count is None else process_count
    if global_batch_size % process_count:
        raise ConfigError(
            f"global batch {global_batch_size} does not split over {process_count} processes"
        )
    num_records = len(source)
    if num_records == 0:
        raise DatasetError("the dataset is empty")
    local = global_batch_size // process_count
    total_steps = (
        sys.maxsize // global_batch_size
        if num_epochs is None
        else num_epochs * num_records // global_batch_size
    )
    first = process_index * local

    def load(element: int) -> np.ndarray:
        step, row = divmod(element, local)
        position = (start_step + step) * global_batch_size + first + row
        return source[record_index(position, num_records, seed)]

    steps_left = max(total_steps - start_step, 0)
    read_options = grain.ReadOptions(
        num_threads=num_threads, prefetch_buffer_size=max(num_threads, 2 * local)
    )
    images = grain.MapDataset.range(steps_left * local).map(load).to_iter_dataset(read_options)
    return iter(
        images.batch(local, drop_remainder=True, batch_fn=lambda rows: to_float(np.stack(rows)))
    )
