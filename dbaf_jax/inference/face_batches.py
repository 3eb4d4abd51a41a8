"""Faces batched across photos or frames: the model runs on full batches of faces from
as many images as it takes, and each image's faces are pasted back batch by batch.

`processed(items, faces, step, size)` takes `Item`s (an image, its faces, their crops
or None, and per-face key inputs) in order and yields each as `Done` (the processed
pixels, and the model's outputs when kept), in the same order. A batch holds ``size``
faces, from one image or several (an image of many faces spans many batches; padded
only at the end of the input or when the images waiting for one reach ``max_items`` or
``max_bytes``), so a folder of one-face photos computes one padded face per batch, not
one per photo. A batch's faces are pasted while the next batch computes
(`pipeline.one_behind`).

Memory follows the pixels, not the faces: an item whose ``crops`` are None has them cut
batch by batch from its pixels (`_Work`), each batch's crops and results let go once
pasted (unless ``keep_results``), so a crowd of thousands holds one batch of faces, not
all of them (a 256-pixel crop is 0.79 MB, a 1024-pixel result 12.6 MB). Pasting in place
changes the pixels later faces' crops are cut from, so before a batch is pasted every
face not yet cut whose crop reads pixels the batch may change is cut first and held:
each crop is cut from the image as it was, and the result is bit for bit the one of
cutting every crop first.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from dbaf_jax.core import pipeline
from dbaf_jax.faces import ledger_match, paste, photos
from dbaf_jax.inference.programs import pad_batch

# Images waiting for their faces' batch hold at most this many bytes of pixels (4K
# frames are 25 MB each, a 12-megapixel photo 36 MB).
PENDING_BYTES = 256 << 20
# Pixels around a face's footprint (`paste.footprint`) counted as its own: its crop's
# bilinear reads and its paste's writes lie within, whatever the result's size.
FOOTPRINT_MARGIN = 2


@dataclasses.dataclass
class Item:
    """One image: ``pixels`` (H, W, 3) uint8, the ``faces`` to process, their ``crops``
    (N, s, s, 3) in [-1, 1] or None (cut from ``pixels`` batch by batch), one key input
    each (N, ...) for the step, the photo disc each face's paste may change (None:
    anywhere under its mask), the boxes to hide by the fallback (`paste.hide`), the
    caller's own ``tag``, whether the pixels are the item's own (``in_place``: pasted
    into, so that a large photo is not held twice; else a copy is changed and ``pixels``
    kept as they were), and whether its `Done` keeps the results (``keep_results``;
    else each batch's are let go once pasted)."""

    pixels: np.ndarray
    faces: list[photos.AlignedFace]
    crops: np.ndarray | None
    keys: np.ndarray | None
    regions: list | None = None
    hidden: list[np.ndarray] = dataclasses.field(default_factory=list)
    tag: Any = None
    in_place: bool = False
    keep_results: bool = True


@dataclasses.dataclass
class Done:
    """An `Item` processed: its ``pixels`` (H, W, 3) uint8 with the faces pasted back and
    the boxes hidden; the model's ``results`` (N, s', s', 3) in [-1, 1], None when not
    kept (`Item.keep_results`); and, for an item whose crops were cut batch by batch,
    each face's original crop's ledger signature (`ledger_match.signature`: the face
    ledger needs it after the crops are gone), else None."""

    item: Item
    pixels: np.ndarray
    results: np.ndarray | None
    signatures: list[np.ndarray] | None = None


class _Work:
    """An item on its way: its crops cut (``take``) and pasted (``paste``) batch by batch.

    Crops of an item of its own pixels pasted in place are cut from those pixels, so
    `protect` cuts and holds, before a paste, every face not yet cut whose footprint
    meets the pasted faces'."""

    def __init__(self, item: Item, faces: photos.PhotoFaces):
        self.item, self.faces = item, faces
        self.pixels = item.pixels  # copied before the first change unless in_place
        self.copied = item.in_place
        self.lazy = item.crops is None
        self.cut = 0  # faces [0, cut) have been taken
        self.held: dict[int, np.ndarray] = {}
        self.results: list[np.ndarray] = []
        self.signatures: list[np.ndarray] = []
        self.pasted = 0
        self.boxes = _footprints(item.faces, item.pixels.shape) if self.lazy else None

    def take(self, start: int, stop: int) -> np.ndarray:
        """The crops (n, s, s, 3) of faces [start, stop), the next ones in order."""
        assert start == self.cut
        self.cut = stop
        if not self.lazy:
            return self.item.crops[start:stop]
        crops = np.stack(
            [self.held.pop(i) if i in self.held else self._crop(i) for i in range(start, stop)]
        )
        self.signatures += [ledger_match.signature(crop) for crop in crops]
        return crops

    def _crop(self, i: int) -> np.ndarray:
        return self.faces.crops(self.item.pixels, self.item.faces[i : i + 1])[0]

    def protect(self, start: int, stop: int) -> None:
        """Before faces [start, stop) are pasted into the item's own pixels: every face not
        yet cut whose footprint meets theirs is cut now and held."""
        if not self.lazy or not self.item.in_place:
            return
        later = np.array(
            [i for i in range(self.cut, len(self.item.faces)) if i not in self.held], np.intp
        )
        if not len(later):
            return
        pasted, waiting = self.boxes[start:stop], self.boxes[later]
        meets = (
            (waiting[None, :, 0] < pasted[:, None, 2])
            & (pasted[:, None, 0] < waiting[None, :, 2])
            & (waiting[None, :, 1] < pasted[:, None, 3])
            & (pasted[:, None, 1] < waiting[None, :, 3])
        ).any(axis=0)
        for i in later[meets]:
            self.held[int(i)] = self._crop(int(i))

    def paste(self, start: int, crops: np.ndarray, results: np.ndarray) -> None:
        """Faces [start, start + n) pasted through their masks within their regions."""
        stop = start + len(results)
        self.protect(start, stop)
        self._own_pixels()
        item = self.item
        masks = self.faces.masks(crops, results)
        regions = item.regions[start:stop] if item.regions is not None else None
        self.faces.paste(self.pixels, item.faces[start:stop], results, masks, regions, True)
        if item.keep_results:
            self.results.append(results)
        self.pasted = stop

    def _own_pixels(self) -> None:
        if not self.copied:
            self.pixels, self.copied = self.item.pixels.copy(), True

    def done(self) -> Done:
        """The item with its boxes hidden, once every face is pasted."""
        item = self.item
        if item.hidden:
            self._own_pixels()
        for box in item.hidden:
            paste.hide_into(self.pixels, box)
        results = None
        if item.keep_results:
            empty = (
                item.crops[:0]
                if item.crops is not None
                else np.zeros((0, self.faces.size, self.faces.size, 3), np.float32)
            )
            results = np.concatenate(self.results) if self.results else empty
        return Done(item, self.pixels, results, self.signatures if self.lazy else None)


def _footprints(faces: list[photos.AlignedFace], shape: tuple[int, ...]) -> np.ndarray:
    """(N, 4) (top, left, bottom, right) of each face's footprint in the image, grown by
    `FOOTPRINT_MARGIN` (empty where it lies wholly outside)."""
    boxes = np.zeros((len(faces), 4), np.int64)
    for i, face in enumerate(faces):
        box = paste.footprint(face.transform, face.size, shape)
        if box is not None:
            boxes[i] = np.array(box) + FOOTPRINT_MARGIN * np.array([-1, -1, 1, 1])
    return boxes


# A batch: (work, first face, face count) segments in order, their faces at most `size`.
_Batch = list[tuple[_Work, int, int]]


def _batches(works: Iterable[_Work], size: int, max_items: int, max_bytes: int) -> Iterator[_Batch]:
    """Segments of the works' faces in order, ``size`` faces a batch; a batch is cut short
    when the works in it reach ``max_items`` or ``max_bytes`` of pixels, or the works end."""
    batch: _Batch = []
    faces = 0
    for work in works:
        count, start = len(work.item.faces), 0
        while True:
            n = min(size - faces, count - start)
            batch.append((work, start, n))
            faces, start = faces + n, start + n
            held = sum(each.item.pixels.nbytes for each, _, _ in batch)
            if faces == size or len(batch) >= max_items or held >= max_bytes:
                yield batch
                batch, faces = [], 0
            if start == count:
                break
    if batch:
        yield batch


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
    batch by batch; then the item's boxes hidden. A batch gathers faces across items
    until it holds ``size``, or the items in it reach ``max_items`` (default 4 per face
    of a batch) or ``max_bytes`` of pixels."""
    max_items = max_items or 4 * size
    works = (_Work(item, faces) for item in items)

    def dispatched() -> Iterator[tuple[_Batch, np.ndarray, Any]]:
        for batch in _batches(works, size, max_items, max_bytes):
            taken = [(work.take(start, start + n), work) for work, start, n in batch if n]
            if not taken:
                yield batch, np.zeros((0,)), None
                continue
            crops = np.concatenate([crops for crops, _ in taken])
            keys = np.concatenate([w.item.keys[s : s + n] for w, s, n in batch if n])
            yield batch, crops, step(pad_batch(crops, size), pad_batch(keys, size))

    for batch, crops, running in pipeline.one_behind(dispatched()):
        results = np.asarray(running)[: len(crops)] if running is not None else None
        offset = 0
        for work, start, n in batch:
            if n:
                work.paste(start, crops[offset : offset + n], results[offset : offset + n])
                offset += n
            if work.pasted == len(work.item.faces) and start + n == len(work.item.faces):
                yield work.done()
