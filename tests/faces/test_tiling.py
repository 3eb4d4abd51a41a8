"""Detection in tiles of a pyramid (`detectors.tiling`): the tiles cover every side with
their overlap, each level is the block mean of the one before, a detector that sees only
what a tile shows gives every face once, at its place, whether it lies across a seam, is
larger than a tile or touches the image's edge; on real photos the tiled detector finds
the labelled faces the whole-image detector finds; a photo that fits in one tile is
detected exactly as before."""

import numpy as np
import pytest
from scipy import ndimage

from benchmarks.detector_recall import score
from benchmarks.photo_memory import labelled_canvas
from dbaf_jax import images
from dbaf_jax.faces import photos
from dbaf_jax.faces.detectors import tiling
from dbaf_jax.faces.detectors.base import Detections, largest_first
from tests.paths import DATA


@pytest.mark.parametrize("tile, overlap", [(2048, 256), (512, 128), (100, 60)])
def test_spans_cover_every_side_with_their_overlap(tile, overlap):
    for length in [*range(1, 3 * tile, 7), 5 * tile + 3, 40_000]:
        spans = tiling.spans(length, tile, overlap)
        assert spans[0][0] == 0 and spans[-1][1] == length, length
        assert all(0 < end - start <= tile for start, end in spans)
        assert all(b[0] <= a[1] - overlap for a, b in zip(spans, spans[1:])), length
        assert (len(spans) == 1) == (length <= tile)


def test_a_level_is_the_block_mean_of_the_one_before():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (700, 520, 3), dtype=np.uint8)  # 700 rows: three bands
    small = tiling.downscaled(image, 3)
    assert small.shape == (234, 174, 3) and small.dtype == np.uint8
    padded = np.pad(image, ((0, 2), (0, 2), (0, 0)), mode="edge").astype(np.float64)
    means = padded.reshape(234, 3, 174, 3, 3).mean(axis=(1, 3))
    assert np.abs(small - means).max() <= 0.5


class BrightSquares:
    """A detector of what a tile shows: each bright square (pixels over 127) is a face
    from `SMALLEST` pixels on, with the five landmarks at fixed places in its box; a
    square the tile cuts is reported as what shows of it, as a real detector may report
    half a face."""

    SMALLEST = 6
    name = "squares"

    def __init__(self):
        self.shapes = []

    def detect(self, image):
        self.shapes.append(image.shape)
        labels, _ = ndimage.label(image[..., 0] > 127)
        boxes = [
            [s[1].start, s[0].start, s[1].stop, s[0].stop]
            for s in ndimage.find_objects(labels)
            if min(s[0].stop - s[0].start, s[1].stop - s[1].start) >= self.SMALLEST
        ]
        boxes = np.array(boxes, np.float32).reshape(-1, 4)
        fractions = np.array([[0.3, 0.35], [0.7, 0.35], [0.5, 0.55], [0.35, 0.75], [0.65, 0.75]])
        sizes = (boxes[:, 2:] - boxes[:, :2])[:, None]
        landmarks = (boxes[:, None, :2] + fractions * sizes).astype(np.float32)
        return largest_first(Detections(boxes, np.ones(len(boxes), np.float32), landmarks))

    def detect_many(self, images):
        return [self.detect(image) for image in images]


def squares_photo():
    """A dark (1500, 2300) photo of bright squares (x, y, side): across the seams of
    512-pixel tiles, at the image's edges, larger than a tile's kept faces, larger than
    a tile; none touching another."""
    squares = [
        (10, 10, 12),
        (380, 40, 60),
        (455, 300, 40),  # across the first vertical seam (tiles meet near 440-500)
        (900, 420, 90),
        (1190, 700, 150),
        (1700, 80, 300),  # over max_side: found one level up
        (60, 600, 700),  # larger than a tile: found two levels up
        (2290, 1490, 10),  # in the far corner
        (1500, 1000, 8),
        (1650, 1300, 30),
    ]
    photo = np.full((1500, 2300, 3), 20, np.uint8)
    for x, y, side in squares:
        photo[y : y + side, x : x + side] = 230
    return photo, squares


def test_every_square_is_found_once_at_its_place():
    photo, squares = squares_photo()
    detector = BrightSquares()
    found = tiling.Tiled(detector, tile=512, overlap=128).detect(photo)
    assert max(max(shape[:2]) for shape in detector.shapes) <= 512  # never more than a tile
    assert len(found.boxes) == len(squares)
    expected = np.array([[x, y, x + side, y + side] for x, y, side in squares], np.float32)
    for box, points in zip(found.boxes, found.landmarks):
        distance = np.abs(expected - box).max(axis=1)
        match = int(np.argmin(distance))
        side = squares[match][2]
        # The level a square is found on quantises it by its factor (1, 3, 9 pixels).
        assert distance[match] <= max(1.0, side / 40), (box, squares[match])
        np.testing.assert_allclose(
            points[0], expected[match, :2] + (0.3 * side, 0.35 * side), atol=max(1.0, side / 40)
        )


def test_a_photo_that_fits_in_a_tile_goes_to_the_detector_whole(real_detector):
    """Bit for bit the detector's own detections, from one call on the whole photo."""
    photo = images.read_photo(DATA / "office2.jpg")
    calls = []

    class Recording:
        name = real_detector.name

        def detect(self, image):
            calls.append(image)
            return real_detector.detect(image)

    tiled = tiling.Tiled(Recording()).detect(photo)
    alone = real_detector.detect(photo)
    assert len(calls) == 1 and calls[0] is photo
    for got, want in zip(tiled, alone):
        np.testing.assert_array_equal(got, want)
    faces = photos.PhotoFaces(Recording(), 256).find(photo)
    assert len(calls) == 2 and calls[1] is photo and len(faces.faces) >= 3


@pytest.mark.slow  # MTCNN on a 5-megapixel photo, whole and in tiles
def test_tiles_find_the_labelled_faces_the_whole_photo_finds(real_detector):
    """A 5-megapixel photo of the hand-labelled test photos in rows of several heights
    (faces of 6 to about 700 pixels, some across the tiles' seams, some larger than a
    tile's kept faces): every labelled face MTCNN finds on the whole photo, the tiled
    MTCNN finds too, with its eyes where the whole photo's detection has them (within
    a tenth of the face's side); and the tiles find as many labelled faces at least."""
    photo, labels = labelled_canvas(5)
    assert max(photo.shape) > tiling.TILE  # tiled at the default size
    whole = real_detector.detect(photo)
    tiled = tiling.Tiled(real_detector).detect(photo)
    found_whole, found_tiled = score(labels, whole)["found"], score(labels, tiled)["found"]
    sides = np.sqrt((labels[:, 2] - labels[:, 0]) * (labels[:, 3] - labels[:, 1]))
    assert found_whole.sum() > 40 and (sides[found_whole] > tiling.OVERLAP).any()
    assert found_tiled.sum() >= found_whole.sum()
    missed = found_whole & ~found_tiled
    assert not missed.any(), labels[missed]
