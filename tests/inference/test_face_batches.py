"""Faces batched across images (`face_batches.processed`) with a numeric step in place of
a model: batches gather faces across images, images come back in order with their own
faces' results, the next batch is dispatched before a batch's images are pasted, and
the waiting images are bounded by count and bytes; faces cut batch by batch from a
photo pasted in place come out bit for bit as faces cut all at once."""

import numpy as np

from dbaf_jax.faces import align, ledger_match, photos
from dbaf_jax.inference import face_batches
from dbaf_jax.storage import images
from tests.face_helpers import landmarks_at
from tests.paths import DATA

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


def crowd(count: int, seed: int = 3):
    """office2.jpg with ``count`` faces of 24 to 90 pixels at random places, most of
    whose crops overlap others' (each crop is about three faces wide), and their key
    inputs."""
    photo = images.read_photo(DATA / "office2.jpg")
    rng = np.random.default_rng(seed)
    placed = []
    for i in range(count):
        side = rng.uniform(24, 90)
        x, y = rng.uniform(0, photo.shape[1]), rng.uniform(0, photo.shape[0])
        points = landmarks_at(x, y, side)
        placed.append(photos.AlignedFace(i, align.alignment_transform(points, SIZE * 4), SIZE * 4))
    placed.sort(key=lambda face: align.apply(align.invert(face.transform), [[32.0, 32.0]])[0, 0])
    placed = [photos.AlignedFace(i, face.transform, face.size) for i, face in enumerate(placed)]
    return photo, placed, np.arange(count, dtype=np.float32)


def colour_step(crops, face_keys):
    """A step whose result depends on each crop and its key: the crop darkened and tinted."""
    return 0.5 * crops[..., ::-1] + (face_keys[:, None, None, None] % 7) / 10 - 0.3


def test_faces_cut_batch_by_batch_paste_as_faces_cut_all_at_once():
    """A photo of 40 faces whose crops overlap, in batches of 3, pasted into its own
    pixels: cut batch by batch (each face cut once, from the photo as it was, its result
    let go once pasted) it comes out bit for bit as with every crop cut first, with each
    face's original crop's ledger signature; without cutting ahead of a paste the faces
    whose crops meet it would be cut from pasted pixels, and differ."""
    photo, placed, face_keys = crowd(40)
    faces = photos.PhotoFaces(None, SIZE * 4)
    crops = faces.crops(photo, placed)
    boxes = face_batches._footprints(placed, photo.shape)
    meets = [
        sum((b[0] < a[2]) & (a[0] < b[2]) & (b[1] < a[3]) & (a[1] < b[3]) for b in boxes[i + 1 :])
        for i, a in enumerate(boxes)
    ]
    assert sum(meets) > 20  # a crowd: pastes change pixels later crops read

    def run(lazy: bool) -> face_batches.Done:
        item = face_batches.Item(
            photo.copy(),
            placed,
            None if lazy else crops,
            face_keys,
            in_place=True,
            keep_results=not lazy,
        )
        (done,) = face_batches.processed([item], faces, colour_step, 3)
        return done

    cut = []
    cutting = faces.crops
    faces.crops = lambda pixels, chosen: (
        cut.extend(f.index for f in chosen) or cutting(pixels, chosen)
    )
    lazy = run(lazy=True)
    assert sorted(cut) == list(range(40))  # each face cut once
    faces.crops = cutting
    eager = run(lazy=False)
    np.testing.assert_array_equal(lazy.pixels, eager.pixels)
    assert (lazy.pixels != photo).any() and lazy.results is None and eager.signatures is None
    for signature, crop in zip(lazy.signatures, crops, strict=True):
        np.testing.assert_array_equal(signature, ledger_match.signature(crop))
    unprotected = face_batches._Work.protect
    face_batches._Work.protect = lambda self, start, stop: None
    try:
        careless = run(lazy=True)
    finally:
        face_batches._Work.protect = unprotected
    assert (careless.pixels != eager.pixels).any()


def test_a_copy_is_cut_from_the_pixels_as_given_and_results_kept_when_asked():
    """An item that does not own its pixels: its faces are cut from them, unchanged, and
    pasted into a copy; with ``keep_results`` its results are every face's, as cut all
    at once gives them."""
    photo, placed, face_keys = crowd(12, seed=5)
    faces = photos.PhotoFaces(None, SIZE * 4)
    crops = faces.crops(photo, placed)
    given = photo.copy()
    (lazy,) = face_batches.processed(
        [face_batches.Item(photo, placed, None, face_keys)], faces, colour_step, 5
    )
    (eager,) = face_batches.processed(
        [face_batches.Item(photo, placed, crops, face_keys)], faces, colour_step, 5
    )
    np.testing.assert_array_equal(photo, given)
    np.testing.assert_array_equal(lazy.pixels, eager.pixels)
    np.testing.assert_array_equal(lazy.results, eager.results)
    assert lazy.results.shape[0] == 12
