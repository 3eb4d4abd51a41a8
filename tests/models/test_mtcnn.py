"""MTCNN: the three networks against facenet-pytorch's through `convert.mtcnn` (random
weights), the host helpers against the reference's own functions, the exact area
resize against `F.interpolate`, and the whole detector with the real bundled weights
against facenet-pytorch's `MTCNN.detect` on real photos (tests/data: office3.jpg and
office5.jpg from the MTCNN example images, several faces each, and jf.jpg, one face)."""

import facenet_pytorch.models.utils.detect_face as reference_detect
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from facenet_pytorch import MTCNN
from facenet_pytorch import ONet as TorchONet
from facenet_pytorch import PNet as TorchPNet
from facenet_pytorch import RNet as TorchRNet
from PIL import Image

from convert.common import run
from convert.mtcnn import main
from dbaf_jax.core.errors import ConfigError, ModelDirectoryError
from dbaf_jax.faces.detectors import mtcnn as detect
from dbaf_jax.faces.detectors import mtcnn_steps as steps
from dbaf_jax.faces.detectors.mtcnn import batch_bucket, run_on_crops
from dbaf_jax.faces.detectors.mtcnn_steps import area_resize, summed_area_table
from dbaf_jax.storage.model_directory import load_network
from tests.parity import assert_parity, nchw, nhwc, randomize_, relative_error
from tests.paths import DATA
from tests.torch_reference.nms import batched_nms as torch_batched_nms
from tests.video_clips import pan_frames

PHOTOS = ("office3.jpg", "office5.jpg", "jf.jpg")

# Input side per network (P-net is fully convolutional: odd sizes exercise ceil-mode
# pooling), and a weight scale that keeps random activations out of softmax saturation.
NETWORKS = {
    "pnet": (TorchPNet, (31, 26), 0.1),
    "rnet": (TorchRNet, (24, 24), 0.1),
    "onet": (TorchONet, (48, 48), 0.05),
}


def read_photo(name: str) -> np.ndarray:
    return np.asarray(Image.open(DATA / name).convert("RGB"))


@pytest.fixture(scope="module")
def random_networks(tmp_path_factory):
    """Random facenet-pytorch networks saved as .pt files, converted, and loaded back."""
    tmp = tmp_path_factory.mktemp("mtcnn_random")
    nets, argv = {}, []
    for seed, (name, (cls, _, scale)) in enumerate(NETWORKS.items()):
        nets[name] = randomize_(cls(pretrained=False), seed=seed, scale=scale).eval()
        torch.save(nets[name].state_dict(), tmp / f"{name}.pt")
        argv += [f"--{name}", str(tmp / f"{name}.pt")]
    run(main, argv + ["--out", str(tmp / "models")])
    converted = {name: load_network(tmp / "models" / "mtcnn" / name) for name in NETWORKS}
    return nets, converted, argv, tmp


@pytest.mark.parametrize("name", list(NETWORKS))
def test_network_matches_torch(random_networks, name):
    nets, converted, _, _ = random_networks
    height, width = NETWORKS[name][1]
    x = np.random.default_rng(7).uniform(-1, 1, (3, height, width, 3)).astype(np.float32)
    with torch.no_grad():
        expected = nets[name](nchw(x))
    actual = converted[name].module.apply(converted[name].variables, x)
    assert len(actual) == len(expected)
    errors = []
    for k, (a, e) in enumerate(zip(actual, expected)):
        e = nhwc(e) if e.ndim == 4 else e.numpy()
        assert_parity(a, e, name=f"{name} output {k}")
        errors.append(relative_error(a, e))
    assert converted[name].info["kind"] == f"mtcnn:{name[0].upper()}Net"
    print(f"{name}: max relative error {max(errors):.2e}")


@pytest.mark.parametrize("height, width", [(31, 40), (32, 37), (12, 13)])
def test_pnet_on_a_padded_level_gives_the_real_levels_cells(random_networks, height, width):
    """A level zero-padded to its bucket, with its real size given, gives on the real
    level's cells what P-net gives on the real level (odd sizes: ceil mode's partial
    pooling window sees no padding)."""
    _, converted, _, _ = random_networks
    pnet = converted["pnet"]
    x = np.random.default_rng(height).uniform(-1, 1, (2, height, width, 3)).astype(np.float32)
    padded = np.zeros((2, detect.level_bucket(height), detect.level_bucket(width), 3), np.float32)
    padded[:, :height, :width] = x
    alone = pnet.module.apply(pnet.variables, x)
    cells = (
        slice(None),
        slice(detect.pnet_output_size(height)),
        slice(detect.pnet_output_size(width)),
    )
    for a, b in zip(alone, pnet.module.apply(pnet.variables, padded, np.array([height, width]))):
        assert a.shape[1:3] == (detect.pnet_output_size(height), detect.pnet_output_size(width))
        np.testing.assert_allclose(np.asarray(b)[cells], a, rtol=1e-5, atol=1e-6)


def test_crop_batches_are_padded_and_chunked(random_networks, monkeypatch):
    _, converted, _, _ = random_networks
    assert [batch_bucket(n) for n in (1, 16, 17, 100, 512, 600)] == [16, 16, 32, 128, 512, 512]
    monkeypatch.setattr(detect, "LARGEST_BATCH", 32)  # the chunking of 512 at a test's size
    crops = np.random.default_rng(3).uniform(-1, 1, (40, 24, 24, 3)).astype(np.float32)
    offsets, probs = run_on_crops(
        converted["rnet"], crops
    )  # one chunk of 32, one of 8 padded to 16
    expected = converted["rnet"].module.apply(converted["rnet"].variables, crops)
    assert offsets.shape == (len(crops), 4) and probs.shape == (len(crops), 2)
    assert_parity(offsets, expected[0], name="offsets")
    assert_parity(probs, expected[1], name="probs")


def test_converter_refusals(random_networks, capsys):
    _, _, argv, tmp = random_networks
    with pytest.raises(SystemExit):
        run(main, argv + ["--out", str(tmp / "models")])
    assert "exists; pass --overwrite" in capsys.readouterr().err
    swapped = ["--pnet", argv[3], "--rnet", argv[1], "--onet", argv[5]]
    with pytest.raises(SystemExit):
        run(main, swapped + ["--out", str(tmp / "swapped")])
    err = capsys.readouterr().err
    assert (
        "rnet.pt (given as pnet): refusing to convert" in err
        and "missing (4): conv4_1.bias" in err
        and "unexpected" in err
    )
    assert not (tmp / "swapped" / "mtcnn").exists()


def test_converter_without_facenet_pytorch(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *args: None)
    with pytest.raises(SystemExit):
        run(main, ["--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert "facenet_pytorch is not installed" in err and "--pnet, --rnet and --onet" in err


# ---------------------------------------------------------------- host helpers


@pytest.mark.parametrize(
    "image_hw, region, size",
    [
        ((380, 570), (0, 0, 380, 570), (228, 342)),  # a pyramid level
        ((380, 570), (0, 0, 380, 570), (14, 20)),  # the smallest levels: wide windows
        ((120, 90), (17, 5, 61, 77), (24, 24)),  # a crop shrunk to R-net's input
        ((120, 90), (100, 80, 13, 9), (48, 48)),  # a small crop stretched to O-net's input
    ],
)
def test_area_resize_is_torch_interpolate_area(image_hw, region, size):
    image = np.random.default_rng(sum(size)).integers(0, 256, image_hw + (3,), dtype=np.uint8)
    top, left, height, width = region
    # As the reference builds it: an HWC tensor permuted to NCHW (channels-last strides), as float.
    crop = (
        torch.as_tensor(image)
        .unsqueeze(0)
        .permute(0, 3, 1, 2)
        .float()[:, :, top : top + height, left : left + width]
    )
    expected = nhwc(F.interpolate(crop, size=size, mode="area"))
    np.testing.assert_array_equal(area_resize(summed_area_table(image), [region], size), expected)


def random_boxes(rng, n: int, extent: float = 100.0) -> np.ndarray:
    corners = rng.uniform(0, extent, (n, 2))
    return np.concatenate([corners, corners + rng.uniform(5, 40, (n, 2))], axis=1).astype(
        np.float32
    )


def brute_force_nms(boxes: np.ndarray, scores: np.ndarray, threshold: float) -> list[int]:
    """By definition: in descending score, a box is kept unless a kept box overlaps it with IoU > threshold."""
    b = boxes.astype(np.float64)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    w = np.clip(
        np.minimum(b[:, None, 2], b[None, :, 2]) - np.maximum(b[:, None, 0], b[None, :, 0]), 0, None
    )
    h = np.clip(
        np.minimum(b[:, None, 3], b[None, :, 3]) - np.maximum(b[:, None, 1], b[None, :, 1]), 0, None
    )
    iou = w * h / (area[:, None] + area[None, :] - w * h)
    kept = []
    for i in np.argsort(-scores, kind="stable"):
        if all(iou[i, j] <= threshold for j in kept):
            kept.append(int(i))
    return kept


@pytest.mark.parametrize("seed", range(3))
def test_nms_against_brute_force_and_references(seed):
    rng = np.random.default_rng(seed)
    boxes, scores = random_boxes(rng, 300), rng.uniform(0, 1, 300).astype(np.float32)
    scores[:20] = scores[20:40]  # ties, broken by index in torchvision's stable order
    expected = brute_force_nms(boxes, scores, 0.5)
    assert 10 < len(expected) < 300
    images = torch.zeros(len(boxes), dtype=torch.long)
    # The PyTorch stand-in that the end-to-end test patches into facenet-pytorch.
    assert (
        torch_batched_nms(torch.from_numpy(boxes), torch.from_numpy(scores), images, 0.5).tolist()
        == expected
    )
    assert steps.nms(boxes, scores, 0.5).tolist() == expected
    reference_min = reference_detect.batched_nms_numpy(
        torch.from_numpy(boxes), torch.from_numpy(scores), images, 0.3, "Min"
    )
    assert steps.nms(boxes, scores, 0.3, mode="min").tolist() == reference_min.tolist()


def test_box_helpers_match_reference():
    rng = np.random.default_rng(4)
    offsets = rng.uniform(-0.3, 0.3, (1, 4, 40, 50)).astype(np.float32)
    probs = rng.uniform(0, 1, (1, 40, 50)).astype(np.float32)
    scale = 12 / 20 * 0.709**3
    expected = reference_detect.generateBoundingBox(
        torch.from_numpy(offsets), torch.from_numpy(probs), scale, 0.6
    )[0].numpy()
    boxes, scores, cell_offsets = steps.proposals(
        offsets[0].transpose(1, 2, 0), probs[0], scale, 0.6
    )
    np.testing.assert_array_equal(
        np.concatenate([boxes, scores[:, None], cell_offsets], axis=1), expected
    )

    boxes = (
        random_boxes(rng, 200, extent=340) - 40
    )  # some reach past the image's edges, some lie outside
    regression = rng.uniform(-0.2, 0.2, (200, 4)).astype(np.float32)
    with_scores = torch.from_numpy(np.concatenate([boxes, scores[:200, None]], axis=1))
    np.testing.assert_array_equal(
        steps.square(boxes), reference_detect.rerec(with_scores.clone())[:, :4].numpy()
    )
    np.testing.assert_array_equal(
        steps.regress(boxes, regression, inclusive=True),
        reference_detect.bbreg(with_scores.clone(), torch.from_numpy(regression))[:, :4].numpy(),
    )
    regions, nonempty = steps.crop_regions(boxes, 240, 320)
    y, ey, x, ex = reference_detect.pad(with_scores.clone(), 320, 240)
    np.testing.assert_array_equal(regions[:, 0], y - 1)
    np.testing.assert_array_equal(regions[:, 1], x - 1)
    np.testing.assert_array_equal(regions[:, 2], ey - y + 1)
    np.testing.assert_array_equal(regions[:, 3], ex - x + 1)
    np.testing.assert_array_equal(nonempty, (ey > y - 1) & (ex > x - 1))
    assert nonempty.any() and not nonempty.all()
    inside = regions[nonempty]
    assert (
        (inside[:, :2] >= 0).all()
        and (inside[:, 0] + inside[:, 2] <= 240).all()
        and (inside[:, 1] + inside[:, 3] <= 320).all()
    )


# ---------------------------------------------------------------- the detector, real weights


@pytest.fixture(scope="module")
def reference_mtcnn():
    with pytest.MonkeyPatch.context() as patch:
        # torchvision's compiled NMS op is missing here; the checked stand-in replaces it.
        patch.setattr(reference_detect, "batched_nms", torch_batched_nms)
        yield MTCNN(keep_all=True)


@pytest.mark.parametrize("photo", PHOTOS)
def test_detections_match_facenet_pytorch(real_detector, reference_mtcnn, photo):
    image = read_photo(photo)
    boxes, probs, landmarks = reference_mtcnn.detect(image, landmarks=True)
    found = real_detector.detect(image)
    assert len(found.boxes) == len(boxes) >= 1
    assert (
        found.boxes.shape == (len(boxes), 4)
        and found.probs.shape == (len(boxes),)
        and found.landmarks.shape == (len(boxes), 5, 2)
    )
    # Both list faces largest first, so they pair up by position.
    box_error = np.abs(found.boxes - boxes).max()
    prob_error = np.abs(found.probs - probs.astype(np.float32)).max()
    landmark_error = np.abs(found.landmarks - landmarks).max()
    assert box_error < 1 and landmark_error < 1 and prob_error < 1e-4
    print(
        f"{photo}: {len(boxes)} faces, max |box| {box_error:.2e} px, |landmark| {landmark_error:.2e} px, |prob| {prob_error:.2e}"
    )


def test_no_faces(real_detector, reference_mtcnn):
    image = np.full((90, 120, 3), 128, np.uint8)
    boxes, _ = reference_mtcnn.detect(image)
    assert boxes is None
    found = real_detector.detect(image)
    assert (
        found.boxes.shape == (0, 4)
        and found.probs.shape == (0,)
        and found.landmarks.shape == (0, 5, 2)
    )


def test_frames_detected_together_get_each_frames_own_detections(real_detector):
    """detect_many on a clip's frames (3, padded to 4 for P-net; one without faces among
    them) gives what detect gives each frame: the same faces, equal up to the float
    rounding of the batched networks."""
    frames = pan_frames(3, travel=0.5)
    frames.insert(1, np.full_like(frames[0], 128))
    together = real_detector.detect_many(frames)
    assert len(together) == len(frames) and len(together[1].boxes) == 0
    for frame, found in zip(frames, together):
        alone = real_detector.detect(frame)
        assert len(found.boxes) == len(alone.boxes)
        np.testing.assert_allclose(found.boxes, alone.boxes, atol=1e-3)
        np.testing.assert_allclose(found.landmarks, alone.landmarks, atol=1e-3)
        np.testing.assert_allclose(found.probs, alone.probs, atol=1e-5)
    assert sum(len(found.boxes) for found in together) >= 3
    assert real_detector.detect_many([]) == []
    with pytest.raises(ValueError, match="one size"):
        real_detector.detect_many([frames[0], frames[0][:-1]])


def test_photos_of_nearby_sizes_share_pnets_programs(real_detector):
    """A photo whose pyramid levels fall in the same buckets as one already detected
    compiles nothing new."""
    photo = read_photo(PHOTOS[0])[:300, :400]

    def buckets(height, width):
        return [
            (detect.level_bucket(h), detect.level_bucket(w))
            for h, w in (
                steps.level_size(height, width, s)
                for s in steps.pyramid_scales(
                    height, width, detect.MIN_FACE_SIZE, detect.SCALE_FACTOR
                )
            )
        ]

    other = next(
        (h, w)
        for h in range(290, 301)
        for w in range(370, 401)
        if (h, w) != (300, 400) and buckets(h, w) == buckets(300, 400)
    )
    real_detector.detect(photo)
    compiled = detect._forward._cache_size()
    real_detector.detect(np.ascontiguousarray(photo[: other[0], : other[1]]))
    assert detect._forward._cache_size() == compiled


def test_detector_refusals(real_detector, random_networks, tmp_path):
    with pytest.raises(ValueError, match="uint8"):
        real_detector.detect(np.zeros((40, 40, 3), np.float32))
    with pytest.raises(ConfigError):
        detect.MTCNN(real_detector.pnet, real_detector.rnet, real_detector.onet, factor=1.0)
    with pytest.raises(ModelDirectoryError):
        detect.MTCNN.load(tmp_path / "nothing")
    _, _, _, tmp = random_networks
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    for name, source in (("pnet", "rnet"), ("rnet", "rnet"), ("onet", "onet")):
        (swapped / name).symlink_to(tmp / "models" / "mtcnn" / source, target_is_directory=True)
    with pytest.raises(ModelDirectoryError, match="not an MTCNN mtcnn:PNet"):
        detect.MTCNN.load(swapped)
