"""The training input pipeline, over datasets that `dbaf_jax.train.prepare` wrote.

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

import sys
from pathlib import Path
from typing import Iterator, Protocol

import grain
import numpy as np
from PIL import Image

from dbaf_jax.core.errors import ConfigError, DatasetError
from dbaf_jax.storage.images import to_float

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
