"""Faces batched across photos or frames: the model runs on full batches of faces from
as many images as it takes, and each image is pasted back as soon as its faces are done.

`processed(items, faces, step, size)` takes `Item`s (an image, its faces, their crops
and per-face key inputs) in order and yields each as `Done` (the processed pixels and
the model's outputs), in the same order. A batch holds ``size`` faces (padded only at
the end of the input or when the images waiting for one reach ``max_items`` or
``max_bytes``), so a folder of one-face photos computes one padded face per batch, not
one per photo. A batch's images are pasted while the next batch computes
(`pipeline.one_behind`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from dbaf_jax import pipeline
from dbaf_jax.faces import paste, photos
from dbaf_jax.inference.programs import pad_batch

# Images waiting for their faces' batch hold at most this many bytes of pixels (4K
# frames are 25 MB each, a 12-megapixel photo 36 MB).
PENDING_BYTES = 256 << 20


@dataclasses.dataclass
class Item:
    """One image: ``pixels`` (H, W, 3) uint8, the ``faces`` to process, their ``crops``
    (N, s, s, 3) in [-1, 1], one key input each (N, ...) for the step, the photo disc
    each face's paste may change (None: anywhere under its mask), the boxes to hide by
    the fallback (`paste.hide`), the caller's own ``tag``, and whether the pixels are
    the item's own (``in_place``: pasted into, so that a large photo is not held twice;
    else a copy is changed and ``pixels`` kept as they were)."""

    pixels: np.ndarray
    faces: list[photos.AlignedFace]
    crops: np.ndarray
    keys: np.ndarray | None
    regions: list | None = None
    hidden: list[np.ndarray] = dataclasses.field(default_factory=list)
    tag: Any = None
    in_place: bool = False


@dataclasses.dataclass
class Done:
    """An `Item` processed: its ``pixels`` (H, W, 3) uint8 with the faces pasted back and
    the boxes hidden, and the model's ``results`` (N, s', s', 3) in [-1, 1]."""

    item: Item
    pixels: np.ndarray
    results: np.ndarray


def _batches(
    items: Iterable[Item], size: int, max_items: int, max_bytes: int
) -> Iterator[list[Item]]:
    pending: list[Item] = []
    faces = held = 0
    for item in items:
        pending.append(item)
        faces += len(item.faces)
        held += item.pixels.nbytes
        if faces >= size or len(pending) >= max_items or held >= max_bytes:
            yield pending
            pending, faces, held = [], 0, 0
    if pending:
        yield pending


def processed(
    items: Iterable[Item],
    faces: photos.PhotoFaces,
    step: Callable[[np.ndarray, np.ndarray], Any],
    size: int,
    max_items: int | None = None,
    max_bytes: int = PENDING_BYTES,
) -> Iterator[Done]:
    """``items`` processed in order: each face by ``step(crops, keys)`` (a padded batch of
    ``size`` crops and key inputs -> device array of results, not waited for), pasted
    back through its mask (`PhotoFaces.masks`, `PhotoFaces.paste`) within its region,
    then the item's boxes hidden. A batch gathers faces across items until it holds
    ``size``, or the items waiting reach ``max_items`` (default 4 per face of a batch)
    or ``max_bytes`` of pixels."""
    max_items = max_items or 4 * size

    def dispatched() -> Iterator[tuple[list[Item], np.ndarray, list]]:
        for pending in _batches(items, size, max_items, max_bytes):
            crops = np.concatenate([item.crops for item in pending])
            keys = (
                np.concatenate([item.keys for item in pending if item.faces])
                if len(crops)
                else None
            )
            yield (
                pending,
                crops,
                [
                    step(pad_batch(crops[i : i + size], size), pad_batch(keys[i : i + size], size))
                    for i in range(0, len(crops), size)
                ],
            )

    for pending, crops, running in pipeline.one_behind(dispatched()):
        results = [
            np.asarray(out)[: len(crops[i * size : (i + 1) * size])]
            for i, out in enumerate(running)
        ]
        results = np.concatenate(results) if results else crops
        start = 0
        for item in pending:
            done = results[start : start + len(item.faces)]
            start += len(item.faces)
            pixels = item.pixels
            if (item.faces or item.hidden) and not item.in_place:
                pixels = pixels.copy()
            if item.faces:
                masks = faces.masks(item.crops, done)
                faces.paste(pixels, item.faces, done, masks, item.regions, in_place=True)
            for box in item.hidden:
                paste.hide_into(pixels, box)
            yield Done(item, pixels, done)
