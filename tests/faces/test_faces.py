"""Alignment, masks, paste-back and photo reading, without any network: the FFHQ quad
against the recipe written out, transforms against known similarities, the inverse
warp returning a crop's pixels to their place, paste-back leaving every pixel outside
its mask unchanged, EXIF orientation, and the metadata schema's refusals."""

import numpy as np
import pytest
from PIL import Image

from dbaf_jax.core.errors import InputError
from dbaf_jax.faces import align, metadata, paste, photos, places
from dbaf_jax.storage import images
from tests.face_helpers import CANONICAL, similarity


def smooth_photo(height: int, width: int) -> np.ndarray:
    """A smooth uint8 test photo (bilinear sampling of it is close to exact)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    channels = [
        np.sin(x / 23.0) + np.cos(y / 17.0),
        np.sin((x + y) / 31.0),
        np.cos((x - 2 * y) / 29.0),
    ]
    return np.clip(np.rint(np.stack(channels, -1) * 60 + 128), 0, 255).astype(np.uint8)


def test_quad_follows_the_ffhq_recipe():
    lm = CANONICAL
    eye_avg, mouth_avg = lm[:2].mean(0), lm[3:].mean(0)
    eye_to_eye, eye_to_mouth = lm[1] - lm[0], mouth_avg - eye_avg
    # Frontal and level: x is horizontal, of length max(2 * 60, 1.8 * 60) = 120.
    assert np.hypot(*eye_to_eye) == 60 and np.hypot(*eye_to_mouth) == 60
    centre = eye_avg + 0.1 * eye_to_mouth
    expected = centre + np.array([[-120, -120], [-120, 120], [120, 120], [120, -120]])
    np.testing.assert_allclose(align.ffhq_quad(lm), expected, atol=1e-12)
    assert align.quad_side(lm) == pytest.approx(240)


@pytest.mark.parametrize(
    "angle, scale, shift",
    [(0.3, 1.7, (40.0, -12.5)), (-1.2, 0.45, (300.0, 80.0)), (np.pi, 2.0, (5.0, 5.0))],
)
def test_transform_of_moved_landmarks_undoes_the_move(angle, scale, shift):
    """Landmarks moved by a known similarity M give the transform T(canonical) composed with M^-1."""
    move = similarity(angle, scale, shift)
    base = align.alignment_transform(CANONICAL, 256)
    moved = align.alignment_transform(align.apply(move, CANONICAL), 256)
    points = np.random.default_rng(0).uniform(-50, 400, (20, 2))
    np.testing.assert_allclose(
        align.apply(moved, align.apply(move, points)), align.apply(base, points), atol=1e-9
    )
    # The quad's corners land on the crop's outer pixel edges.
    corners = align.apply(moved, align.ffhq_quad(align.apply(move, CANONICAL)))
    np.testing.assert_allclose(
        corners, [[-0.5, -0.5], [-0.5, 255.5], [255.5, 255.5], [255.5, -0.5]], atol=1e-9
    )


def test_scaled_and_inverted_transforms():
    transform = align.alignment_transform(CANONICAL, 256)
    np.testing.assert_allclose(align.invert(align.invert(transform)), transform, atol=1e-12)
    # A 64 px crop's pixel edges are a 256 px crop's, divided by 4.
    quarter = align.scaled(transform, 0.25)
    quad = align.ffhq_quad(CANONICAL)
    np.testing.assert_allclose(
        align.apply(quarter, quad),
        [[-0.5, -0.5], [-0.5, 63.5], [63.5, 63.5], [63.5, -0.5]],
        atol=1e-9,
    )


def test_quarter_turn_crop_is_exact_and_goes_back():
    """A similarity of scale 1, a quarter turn and an integer shift moves pixels exactly:
    the crop is the rotated photo region, and warping it back restores every pixel."""
    photo = np.random.default_rng(1).integers(0, 256, (80, 90, 3), dtype=np.uint8)
    transform = similarity(
        np.pi / 2, 1.0, (70.0, -10.0)
    )  # photo (x, y) -> crop (70 - y, x - 10): rows 39-70
    crop = align.crop(photo, transform, 32)
    np.testing.assert_array_equal(crop, np.rot90(photo[39:71, 10:42], k=-1).astype(np.float32))
    back = align.warp(crop, transform, (32, 32), origin=(39, 10))
    # cos(pi / 2) is 6e-17, not 0, in floating point: weights of 1e-16 on the neighbours.
    np.testing.assert_allclose(back, photo[39:71, 10:42], rtol=0, atol=1e-9)


def reference_warp(image, transform, shape, origin, fill):
    """`align.warp` as its docstring states it, one output pixel at a time."""
    height, width, channels = image.shape
    out = np.empty((*shape, channels), np.float64)
    for row in range(shape[0]):
        for col in range(shape[1]):
            x, y = align.apply(transform, np.array([origin[1] + col, origin[0] + row], np.float64))
            if fill is not None and not (0 <= x <= width - 1 and 0 <= y <= height - 1):
                out[row, col] = fill
                continue
            x, y = min(max(x, 0), width - 1), min(max(y, 0), height - 1)
            x0, y0 = (
                min(int(np.floor(x)), max(width - 2, 0)),
                min(int(np.floor(y)), max(height - 2, 0)),
            )
            x1, y1 = min(x0 + 1, width - 1), min(y0 + 1, height - 1)
            fx, fy = x - x0, y - y0
            pixel = lambda r, c: image[r, c].astype(np.float64)  # noqa: E731
            top = pixel(y0, x0) * (1 - fx) + pixel(y0, x1) * fx
            out[row, col] = top * (1 - fy) + (pixel(y1, x0) * (1 - fx) + pixel(y1, x1) * fx) * fy
    return out


@pytest.mark.parametrize("fill", [None, 0.0])
@pytest.mark.parametrize("size", [(1, 1), (1, 7), (9, 1), (23, 31)])
def test_warp_samples_every_pixel_as_stated(fill, size):
    """The vectorised warp (flat gathers, only inside points sampled when ``fill`` is
    given) against the per-pixel statement: nearest edge or ``fill`` outside, bilinear
    inside, images one pixel wide or tall included."""
    rng = np.random.default_rng(size[0] * 100 + size[1])
    image = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    transform = np.concatenate([rng.normal(0, 0.8, (2, 2)), rng.normal(5, 6, (2, 1))], axis=1)
    got = align.warp(image, transform, (17, 13), origin=(-3, 2), fill=fill)
    expected = reference_warp(image, transform, (17, 13), (-3, 2), fill)
    assert got.dtype == np.float32 and got.shape == (17, 13, 3)
    if fill is not None and min(size) > 1:  # a line of pixels has no inside to land on
        assert (expected == fill).all(axis=-1).any() and (expected != fill).any(
            axis=-1
        ).any()  # both cases occur
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-3)  # float32 weights against float64


def test_alignment_then_inverse_returns_pixels_to_their_place():
    """A smooth photo, cropped at a tilted, scaled face and warped back: inside the
    crop's footprint the photo comes back up to bilinear resampling's error."""
    photo = smooth_photo(300, 320)
    landmarks = align.apply(similarity(0.35, 0.8, (60.0, 20.0)), CANONICAL)
    transform = align.alignment_transform(landmarks, 256)
    crop = align.crop(photo, transform, 256)
    top, left, bottom, right = paste.footprint(transform, 256, photo.shape)
    back = align.warp(
        crop, transform, (bottom - top, right - left), origin=(top, left), fill=np.nan
    )
    inside = ~np.isnan(back[..., 0])
    assert inside.sum() > 0.5 * (240 * 0.8) ** 2
    error = np.abs(back - photo[top:bottom, left:right])[inside]
    assert error.max() < 2.0 and error.mean() < 0.3, (error.max(), error.mean())


def test_masks_are_soft_inside_and_zero_on_the_border():
    mask = paste.box_mask(64)
    assert mask.shape == (64, 64) and mask.dtype == np.float32
    assert mask[32, 32] == pytest.approx(1.0) and mask.max() <= 1.0 and mask.min() == 0.0
    assert (
        not mask[0].any() and not mask[-1].any() and not mask[:, 0].any() and not mask[:, -1].any()
    )
    assert 0 < mask[8, 32] < 1  # feathered, not a hard edge
    blob = np.zeros((64, 64), bool)
    blob[20:40, 25:45] = True
    soft = paste.feather(blob)
    assert soft[30, 35] == pytest.approx(1.0, abs=1e-3) and soft[5, 5] == 0 and 0 < soft[19, 35] < 1


def test_paste_leaves_pixels_outside_the_mask_unchanged():
    rng = np.random.default_rng(2)
    photo = rng.integers(0, 256, (200, 240, 3), dtype=np.uint8)
    landmarks = align.apply(similarity(-0.4, 0.5, (60.0, 10.0)), CANONICAL)
    transform = align.scaled(align.alignment_transform(landmarks, 256), 64 / 256)
    face = rng.uniform(-1, 1, (64, 64, 3)).astype(np.float32)
    mask = paste.box_mask(64)
    result = paste.paste(photo, face, mask, transform)
    assert result.dtype == np.uint8 and result.shape == photo.shape
    # The mask, warped into the photo: where it is 0, the photo is untouched, bit for bit.
    alpha = align.warp(mask[..., None], transform, photo.shape[:2], fill=0.0)[..., 0]
    outside = alpha == 0
    assert outside.sum() > 0.5 * outside.size and (~outside).sum() > 1000
    np.testing.assert_array_equal(result[outside], photo[outside])
    # Where it is 1, the face replaced the photo.
    full = alpha > 0.999
    expected = np.clip(np.rint(align.warp((face + 1) * 127.5, transform, photo.shape[:2])), 0, 255)
    assert np.abs(result[full].astype(np.float32) - expected[full]).max() <= 1
    assert np.abs(result[full].astype(np.int16) - photo[full]).mean() > 30


def test_pasting_many_faces_leaves_the_photo_given_unchanged():
    """`PhotoFaces.paste` blends every face into one copy, each over the ones before it,
    as pasting them one after another into fresh copies does; the photo given is not
    touched."""
    rng = np.random.default_rng(3)
    photo = rng.integers(0, 256, (220, 300, 3), dtype=np.uint8)
    given = photo.copy()
    faces = [
        photos.AlignedFace(
            i,
            align.alignment_transform(
                align.apply(similarity(0.2 * i, 0.4, (40.0 + 70 * i, 30.0)), CANONICAL), 64
            ),
            64,
        )
        for i in range(3)
    ]
    results = rng.uniform(-1, 1, (3, 64, 64, 3)).astype(np.float32)
    masks = np.broadcast_to(paste.box_mask(64), (3, 64, 64))
    pasted = photos.PhotoFaces(None, 64).paste(photo, faces, results, masks)
    one_by_one = photo
    for face, result, mask in zip(faces, results, masks):
        one_by_one = paste.paste(one_by_one, result, mask, face.transform)
    np.testing.assert_array_equal(photo, given)
    np.testing.assert_array_equal(pasted, one_by_one)
    assert (pasted != photo).any(axis=-1).sum() > 3 * 500


def test_paste_outside_the_photo_changes_nothing():
    photo = np.full((50, 60, 3), 7, np.uint8)
    far = align.alignment_transform(CANONICAL + 1000, 64)
    np.testing.assert_array_equal(
        paste.paste(photo, np.ones((64, 64, 3), np.float32), paste.box_mask(64), far), photo
    )


@pytest.mark.parametrize(
    "orientation, undo",
    [(3, lambda a: np.rot90(a, 2)), (6, lambda a: np.rot90(a, 1)), (8, lambda a: np.rot90(a, -1))],
)
def test_read_photo_applies_exif_orientation(tmp_path, orientation, undo):
    """A camera's rotated pixels with their EXIF orientation tag come out upright."""
    upright = np.random.default_rng(3).integers(0, 256, (30, 40, 3), dtype=np.uint8)
    stored = undo(upright)  # what the camera wrote
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(np.ascontiguousarray(stored)).save(tmp_path / "photo.png", exif=exif)
    np.testing.assert_array_equal(images.read_photo(tmp_path / "photo.png"), upright)
    with pytest.raises(ValueError, match="cannot read image"):
        (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 no")
        images.read_photo(tmp_path / "broken.jpg")


def face_entry(**replace):
    return {"index": 0, "transform": [5.0, 0.5, -190.0, -0.5, 5.0, -102.0], "size": 256, **replace}


def test_face_metadata_round_trip_and_refusals():
    face = photos.AlignedFace(
        2, np.array([[5.0, 0.5, -190.0], [-0.5, 5.0, -102.0]]), 256
    )  # a 51 px face at (60, 50)
    meta = metadata.photo_fields((100, 120, 3), [face])
    assert meta == {"photo": {"height": 100, "width": 120}, "faces": [face_entry(index=2)]}
    (read,) = metadata.recorded_faces(meta, (100, 120, 3), 256)
    assert read.index == 2 and read.size == 256
    np.testing.assert_array_equal(read.transform, face.transform)
    bad = [
        ({"faces": []}, "no 'photo'"),
        ({"photo": {"height": 100, "width": 121}, "faces": []}, "not the image's"),
        ({"photo": {"height": 100, "width": 120}, "faces": {}}, "must be a list"),
        ({"photo": {"height": 100, "width": 120}, "faces": ["x"]}, "exactly index"),
        ({"photo": {"height": 100, "width": 120}, "faces": [face_entry(index=-1)]}, "face index"),
        ({"photo": {"height": 100, "width": 120}, "faces": [face_entry(index=True)]}, "face index"),
        (
            {"photo": {"height": 100, "width": 120}, "faces": [face_entry(size=128)]},
            "input size 256",
        ),
        (
            {"photo": {"height": 100, "width": 120}, "faces": [face_entry(transform=[1, 2, 3])]},
            "6 finite",
        ),
        (
            {
                "photo": {"height": 100, "width": 120},
                "faces": [face_entry(transform=[1, 0, 0, 0, float("nan"), 0])],
            },
            "6 finite",
        ),
        (
            {
                "photo": {"height": 100, "width": 120},
                "faces": [face_entry(transform=[1, 2, 0, 2, 4, 0])],
            },
            "invertible",
        ),
        ({"photo": {"height": 100, "width": 120}, "faces": [face_entry(), face_entry()]}, "repeat"),
        ({"photo": {"height": 100, "width": 120}, "faces": [face_entry(extra=1)]}, "exactly index"),
        (
            {
                "photo": {"height": 100, "width": 120},
                "faces": [face_entry(transform=[1e300, 0, 0, 0, 1e300, 0])],
            },
            "within",
        ),
        (
            {
                "photo": {"height": 100, "width": 120},
                "faces": [face_entry(transform=[100.0, 0, -5872, 0, 100.0, -4872])],
            },
            "below the 8 px",
        ),
        (
            {
                "photo": {"height": 100, "width": 120},
                "faces": [face_entry(transform=[5.0, 0.5, -900.0, -0.5, 5.0, -102.0])],
            },
            "outside",
        ),
        (
            {
                "photo": {"height": 100, "width": 120},
                "faces": [face_entry(index=i) for i in range(places.STACK + 1)],
            },
            "overlaps 3 other faces",
        ),
        (
            {
                "photo": {"height": 100, "width": 120},
                "faces": [face_entry(index=i) for i in range(12)],
            },
            "at most 11",
        ),
    ]
    for meta, reason in bad:
        with pytest.raises(InputError, match=reason):
            metadata.recorded_faces(meta, (100, 120, 3), 256)


def test_one_photos_metadata_buys_no_more_faces_than_its_area_allows():
    """Issue 21: a PNG whose metadata lists one valid face 1024 times cost minutes. Work
    is counted in faces the metadata makes the run process: the same face repeated (as
    many times as the area allows, or more) is refused, so it buys none."""
    shape = (620, 487, 3)
    honest = {"photo": {"height": 620, "width": 487}, "faces": [face_entry()]}
    assert len(metadata.recorded_faces(honest, shape, 256)) == 1
    most = metadata.max_recorded_faces(shape)
    assert most == 620 * 487 // (32 * 32)
    for count in (1024, most):
        hostile = {
            "photo": {"height": 620, "width": 487},
            "faces": [face_entry(index=i) for i in range(count)],
        }
        with pytest.raises(InputError, match="at most|overlap"):
            metadata.recorded_faces(hostile, shape, 256)


def test_a_crop_reads_the_same_from_the_photo_as_from_its_float_copy():
    """The warp gathers from the photo's own uint8 pixels and converts only those it reads
    (a crop of a 100-megapixel photo used to convert the whole photo to float32 first):
    the crop is the float copy's, bit for bit."""
    photo = np.random.default_rng(4).integers(0, 256, (300, 320, 3), dtype=np.uint8)
    for angle, scale, shift in [(0.3, 0.8, (60.0, 20.0)), (-1.2, 2.5, (-80.0, 150.0))]:
        transform = align.alignment_transform(
            align.apply(similarity(angle, scale, shift), CANONICAL), 256
        )
        np.testing.assert_array_equal(
            align.crop(photo, transform, 256),
            align.crop(photo.astype(np.float32), transform, 256),
        )
