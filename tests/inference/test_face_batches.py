"""Faces batched across images (`face_batches.processed`) with a numeric step in place of
a model: batches gather faces across images, images come back in order with their own
faces' results, the next batch is dispatched before a batch's images are pasted, and
the waiting images are bounded by count and bytes."""

import numpy as np

from dbaf_jax.faces import photos
from dbaf_jax.inference import face_batches

SIZE = 16


def item(number: int, faces: int, shape=(48, 64)) -> face_batches.Item:
    """Image ``number`` with ``faces`` faces side by side, each crop filled with its key
    (number * 10 + face), which the step's output reads back."""
    rng = np.random.default_rng(number)
    pixels = rng.integers(0, 256, (*shape, 3), dtype=np.uint8)
    placed = [
        photos.AlignedFace(i, np.array([[1.0, 0, -2 - 15 * i], [0, 1.0, -4]]), SIZE)
        for i in range(faces)
    ]
    face_keys = np.array([number * 10 + i for i in range(faces)], np.float32)
    crops = np.broadcast_to(face_keys[:, None, None, None] / 100, (faces, SIZE, SIZE, 3)).astype(
        np.float32
    )
    return face_batches.Item(pixels, placed, crops, face_keys if faces else None, tag=number)


class Recorder:
    """The step: records each call's key rows and returns -crops (not waited for: numpy)."""

    def __init__(self, events: list):
        self.calls, self.events = [], events

    def __call__(self, crops, face_keys):
        self.calls.append(face_keys.tolist())
        self.events.append(("step", len(self.calls)))
        return -crops


def test_faces_are_batched_across_images_and_come_back_in_order():
    events = []
    step = Recorder(events)
    items = [item(n, count) for n, count in enumerate([3, 0, 1, 1, 4])]
    done = []
    for result in face_batches.processed(items, photos.PhotoFaces(None, SIZE), step, 4):
        events.append(("done", result.item.tag))
        done.append(result)
    assert [d.item.tag for d in done] == [0, 1, 2, 3, 4]
    # 3 + 0 + 1 faces fill the first batch; 1 + 4 the second (4, then 1 padded with copies of the last).
    assert step.calls == [[0, 1, 2, 20], [30, 40, 41, 42], [43, 43, 43, 43]]
    for d in done:  # each image gets its own faces' results
        np.testing.assert_array_equal(d.results, -d.item.crops)
        changed = (d.pixels != d.item.pixels).any(axis=-1)
        assert changed.any() == bool(d.item.faces)
        assert not changed[
            :, 2 + 15 * len(d.item.faces) + SIZE :
        ].any()  # right of the last face: untouched
    # The second batch is dispatched before the first batch's images are pasted and handed on.
    assert events.index(("step", 2)) < events.index(("done", 0))


def test_waiting_images_are_bounded_by_count_and_bytes():
    step = Recorder([])
    items = [item(n, 1) for n in range(6)]
    list(face_batches.processed(items, photos.PhotoFaces(None, SIZE), step, 8, max_items=4))
    assert [len(set(call)) for call in step.calls] == [4, 2]
    step = Recorder([])
    list(
        face_batches.processed(
            items, photos.PhotoFaces(None, SIZE), step, 8, max_bytes=3 * items[0].pixels.nbytes
        )
    )
    assert [len(set(call)) for call in step.calls] == [3, 3]


def test_images_without_faces_pass_unchanged_and_hidden_boxes_are_hidden():
    step = Recorder([])
    plain, hiding = item(0, 0), item(1, 0)
    hiding.hidden = [np.array([10.0, 10.0, 20.0, 20.0])]
    out = list(face_batches.processed([plain, hiding], photos.PhotoFaces(None, SIZE), step, 4))
    assert step.calls == []
    np.testing.assert_array_equal(out[0].pixels, plain.pixels)
    assert (out[1].pixels != hiding.pixels).any() and out[1].results.shape[0] == 0


def test_an_item_of_its_own_pixels_is_pasted_in_place_as_a_copy_would_be():
    """``in_place``: the item's pixels are pasted into and hidden in (a large photo is not
    held twice), to the same values, bit for bit, as the copy an item that does not own
    its pixels gets, whose pixels stay as they were."""
    step = Recorder([])
    kept, owned = item(0, 2), item(0, 2)
    kept.hidden = owned.hidden = [np.array([40.0, 5.0, 50.0, 15.0])]
    owned.in_place = True
    given = kept.pixels.copy()
    (copied,) = face_batches.processed([kept], photos.PhotoFaces(None, SIZE), step, 4)
    (pasted,) = face_batches.processed([owned], photos.PhotoFaces(None, SIZE), step, 4)
    np.testing.assert_array_equal(kept.pixels, given)
    assert pasted.pixels is owned.pixels and (pasted.pixels != given).any()
    np.testing.assert_array_equal(pasted.pixels, copied.pixels)
