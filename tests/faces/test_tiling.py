"""Detection in tiles of a pyramid (`detectors.tiling`): the tiles cover every side with
their overlap, each level is the block mean of the one before, a detector that sees only
what a tile shows gives every face once, at its place, whether it lies across a seam, is
larger than a tile or touches the image's edge; on real photos the tiled detector finds
the labelled faces the whole-image detector finds; a photo that fits in one tile is
detected exactly as before; CenterFace's tiles are no larger than it looks at in its own
pixels, and find what 2048-pixel tiles found."""

import numpy as np
import pytest
from scipy import ndimage

from convert.centerface import main as convert_centerface
from convert.common import run
from dbaf_jax.faces import photos
from dbaf_jax.faces.detectors import centerface, registry, tiling
from dbaf_jax.faces.detectors.base import Detections, empty, largest_first
from dbaf_jax.faces.detectors.ensemble import Ensemble
from dbaf_jax.storage import images
from fixtures.labelled import labelled_canvas, score
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


class NarrowSquares(BrightSquares):
    """`BrightSquares` that looks at no image of more than 512 pixels a side or 512 x 320
    pixels in its own pixels (`base.largest_input`), as CenterFace at its own scale."""

    largest_input = (512, 512 * 320)


@pytest.mark.parametrize("detector, tile", [(BrightSquares(), 512), (NarrowSquares(), 2048)])
def test_every_square_is_found_once_at_its_place(detector, tile):
    """Square tiles of a side (the memory's bound), and tiles of the detector's largest
    input (320 x 512, their long side along the photo's)."""
    photo, squares = squares_photo()
    found = tiling.Tiled(detector, tile=tile, overlap=128).detect(photo)
    assert max(max(shape[:2]) for shape in detector.shapes) <= 512  # never more than a tile
    assert max(shape[0] * shape[1] for shape in detector.shapes) <= 512 * (
        512 if tile == 512 else 320
    )
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


class Shapes:
    """A detector finding nothing that records the shapes it is given."""

    def __init__(self, name: str, largest: tuple[int, int] | None = None):
        self.name, self.shapes = name, []
        if largest is not None:
            self.largest_input = largest

    def detect(self, image):
        self.shapes.append(image.shape[:2])
        return empty()


@pytest.mark.parametrize("height, width", [(3000, 4000), (4000, 3000), (9000, 12000), (1500, 2000)])
def test_centerfaces_tiles_are_looked_at_in_their_own_pixels(height, width):
    """CenterFace shrinks an image above 1920 px a side or 1920 x 1088 pixels (2048 x 2048
    tiles ran at 0.71x, where faces near its smallest vanish): its tiles, alone or in an
    ensemble with a detector of any size, are at most that, so it looks at each at 1x or
    more (`centerface.resize_factor`); a detector of any size keeps tiles of 2048."""
    found = Shapes("centerface", centerface.CenterFaceDetector.largest_input)
    assert tiling.tile_limits(found) == (1920, 1920 * 1088)
    assert tiling.tile_limits(Ensemble([Shapes("mtcnn"), found])) == (1920, 1920 * 1088)
    assert tiling.tile_limits(Shapes("mtcnn")) == (tiling.TILE, tiling.TILE**2)
    tiling.Tiled(Ensemble([Shapes("mtcnn"), found])).detect(np.zeros((height, width, 3), np.uint8))
    assert found.shapes and all(centerface.resize_factor(*shape) >= 1 for shape in found.shapes)
    first = found.shapes[0]  # level 0's first tile: the long side along the photo's
    assert max(first) > 1088 and (first[1] >= first[0]) == (width >= height)


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


@pytest.fixture(scope="module")
def centerface_detector(tmp_path_factory):
    """The default detector as the registry builds it, its weights converted here."""
    out = tmp_path_factory.mktemp("centerface")
    run(convert_centerface, ["--out", str(out)])
    return registry.build(out, ["centerface"])[0]


@pytest.mark.slow  # CenterFace on a 6-megapixel photo, twice
def test_centerface_in_its_own_tiles_finds_what_2048_pixel_tiles_found(centerface_detector):
    """A 6-megapixel photo of the hand-labelled test photos: CenterFace in tiles of its
    largest input (each looked at in its own pixels) finds every labelled face it found
    in tiles of 2048 pixels (each shrunk to 0.71x), and as many at least."""
    photo, labels = labelled_canvas(6)

    class Shrunk:  # CenterFace without its largest input: 2048-pixel tiles, as before
        name = centerface_detector.name
        detect = staticmethod(centerface_detector.detect)

    before = score(labels, tiling.Tiled(Shrunk()).detect(photo))["found"]
    now = score(labels, tiling.Tiled(centerface_detector).detect(photo))["found"]
    assert before.sum() > 40
    assert now.sum() >= before.sum()
    assert not (before & ~now).any(), labels[before & ~now]
