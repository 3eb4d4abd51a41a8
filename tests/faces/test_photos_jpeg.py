"""Re-detection after JPEG re-encoding, with the real MTCNN weights.

Recovering a photo that lost its metadata (`recover --key-file`) finds its faces again
by detection and gives face i the key of the i-th face from the left, so the key-file
path relies on detection finding the same faces, in the same order, at nearly the same
places after the photo was re-encoded. A random-weight model's anonymized faces are not
detectable, so this is checked on the original photos (tests/data), which is what a
trained model's outputs must look like to MTCNN. Also the benchmark's comparison
helpers (fixtures/refound.py, which the JPEG study benchmarks/studies/jpeg_recovery.py prints) against known moves.
"""

import numpy as np
import pytest

from dbaf_jax.faces import align, photos
from dbaf_jax.storage import images
from fixtures.refound import CROP, compare, corner_displacement, pair_faces, reencode
from tests.face_helpers import CANONICAL, similarity
from tests.paths import DATA


def face(index: int, landmarks: np.ndarray) -> photos.AlignedFace:
    return photos.AlignedFace(index, align.alignment_transform(landmarks, CROP), CROP)


def test_corner_displacement_of_known_moves():
    """CANONICAL's quad is 240 photo pixels, so a face moved by 2 photo pixels moves every
    corner of its 256 crop by 2 * 256 / 240 crop pixels."""
    base = face(0, CANONICAL)
    np.testing.assert_allclose(
        corner_displacement(base, face(0, CANONICAL + [2.0, 0.0])), 2 * CROP / 240, rtol=1e-12
    )
    # Scaled by 1.1 about the quad's centre: each corner moves out by 0.1 of the crop's half diagonal.
    centre = align.ffhq_quad(CANONICAL).mean(axis=0)
    grown = face(0, (CANONICAL - centre) * 1.1 + centre)
    np.testing.assert_allclose(corner_displacement(base, grown), 0.1 * CROP / np.sqrt(2), rtol=1e-9)


def test_faces_pair_by_nearest_centre_and_order_is_counted():
    left, right = (
        face(0, CANONICAL),
        face(1, align.apply(similarity(0.0, 1.0, (400.0, 0.0)), CANONICAL)),
    )
    moved_left = face(0, CANONICAL + 3.0)
    paired = pair_faces([left, right], [right, moved_left])
    assert paired[0] is moved_left and paired[1] is right
    swapped = compare(
        [left, right],
        [
            photos.AlignedFace(0, right.transform, CROP),
            photos.AlignedFace(1, moved_left.transform, CROP),
        ],
    )
    assert (swapped.reference, swapped.found, swapped.in_order) == (2, 2, 0)
    # A face found nowhere near (more than a quarter of the crop away) is not a pair.
    assert pair_faces([left], [face(0, CANONICAL + 100.0)]) == [None]
    lost = compare([left, right], [moved_left])
    assert (lost.found, lost.in_order) == (1, 1) and lost.displacement.shape == (1, 4)


# The smallest face kept, and the largest corner displacement allowed (crop pixels of a
# 256 crop), measured with the pinned Pillow's JPEG encoder at quality 95: office3.jpg
# 15.4 (faces of 53 to 67 photo pixels, so one photo pixel is 4 to 5 crop pixels),
# office5.jpg 27.0 (23 to 46 pixels), jf.jpg 0.11 (one face of 452 pixels). Thin
# margin elsewhere: office3.jpg's third face has an O-net probability of 0.738 at
# quality 95 against the threshold of 0.7 (it is lost from quality 90 down).
@pytest.mark.slow  # the real MTCNN's programs at each photo's pyramid, twice a photo
@pytest.mark.parametrize(
    "name, min_face, count, bound",
    [("office3.jpg", 50, 4, 24.0), ("office5.jpg", 20, 10, 40.0), ("jf.jpg", 50, 1, 1.0)],
)
def test_jpeg95_finds_the_same_faces_in_the_same_order(real_detector, name, min_face, count, bound):
    faces = photos.PhotoFaces(real_detector, CROP, None, min_face)
    photo = images.read_photo(DATA / name)
    original = faces.find(photo).faces
    again = faces.find(reencode(photo, 95)).faces
    assert len(original) == len(again) == count
    found = compare(original, again)
    assert found.in_order == count  # each face paired with the face of its own index: the same key
    displacement = np.array([corner_displacement(a, b) for a, b in zip(original, again)])
    print(
        f"{name}: {count} faces, corner displacement max {displacement.max():.2f} mean {displacement.mean():.2f} crop px"
    )
    np.testing.assert_array_equal(displacement, found.displacement)
    assert 0 < displacement.max() < bound
