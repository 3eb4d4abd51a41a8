"""Evaluation metrics against independent implementations on the same arrays."""

import hashlib
import warnings

import jax
import numpy as np
import pytest
from PIL import Image
from pytorch_fid.fid_score import calculate_frechet_distance

from dbaf_jax.core import image_metrics
from dbaf_jax.core.errors import ConfigError, DatasetError
from dbaf_jax.evaluation import diversity, fid, measures, recognition
from dbaf_jax.storage import images
from tests.parity import assert_parity, relative_error, skimage_ssim


def _image_pair(rng, structured: bool, shape=(3, 24, 28, 3)):
    """Two (B, H, W, 3) float32 batches in [-1, 1]: noise, or smooth patterns plus noise."""
    if structured:
        y, x = np.mgrid[: shape[1], : shape[2]]
        phases = rng.uniform(0, np.pi, (shape[0], 1, 1, shape[3]))
        clean = 0.8 * np.sin(x[None, ..., None] / 4.0 + phases) * np.cos(y[None, ..., None] / 6.0)
    else:
        clean = rng.uniform(-1, 1, shape)
    noisy = np.clip(clean + rng.normal(0, 0.15, shape), -1, 1)
    return clean.astype(np.float32), noisy.astype(np.float32)


def test_mse_and_psnr_match_numpy(np_rng):
    a, b = _image_pair(np_rng, structured=False)
    expected_mse = ((a.astype(np.float64) - b) ** 2).mean(axis=(1, 2, 3))
    assert_parity(image_metrics.mse(a, b), expected_mse, name="mse")
    assert_parity(image_metrics.psnr(a, b), 10 * np.log10(4.0 / expected_mse), name="psnr")


def test_identical_images_give_zero_mse_infinite_psnr_unit_ssim(np_rng):
    a, _ = _image_pair(np_rng, structured=True)
    np.testing.assert_array_equal(image_metrics.mse(a, a), 0.0)
    assert np.all(np.isposinf(image_metrics.psnr(a, a)))
    np.testing.assert_allclose(image_metrics.ssim(a, a), 1.0, rtol=1e-6)


@pytest.mark.parametrize("structured", [False, True])
def test_ssim_matches_scikit_image(np_rng, structured):
    a, b = _image_pair(np_rng, structured)
    ours = jax.jit(image_metrics.ssim)(a, b)
    # SSIM of [-1, 1] images mapped to [0, 1] equals scikit-image's on x + 1 with range 2.
    expected = [skimage_ssim(x, y) for x, y in zip(a, b)]
    assert_parity(ours, expected, name="ssim")


def test_feature_statistics_streamed_equal_numpy(np_rng):
    features = np_rng.normal(3.0, 2.0, (37, 6)).astype(np.float32)
    stats = fid.FeatureStatistics(6)
    for start, stop in [(0, 1), (1, 11), (11, 11), (11, 37)]:
        stats.update(features[start:stop])
    assert stats.count == 37
    reference = features.astype(np.float64)
    assert_parity(stats.mean, reference.mean(axis=0), tol=1e-12, name="mean")
    assert_parity(stats.covariance(), np.cov(reference, rowvar=False), tol=1e-12, name="covariance")


def test_frechet_distance_matches_pytorch_fid(np_rng):
    set1 = np_rng.normal(size=(64, 16))
    set2 = np_rng.normal(size=(50, 16)) * 1.5 + 0.3
    stats1, stats2 = fid.FeatureStatistics(16), fid.FeatureStatistics(16)
    stats1.update(set1)
    stats2.update(set2)
    ours = fid.statistics_distance(stats1, stats2)
    expected = calculate_frechet_distance(
        stats1.mean, stats1.covariance(), stats2.mean, stats2.covariance()
    )
    assert ours > 1.0
    assert relative_error(ours, expected) < 1e-10


def test_frechet_distance_singular_product_uses_the_offset_like_pytorch_fid(capsys):
    # Two samples per set and shared constant features: rank-1 covariances whose
    # product has no finite square root here, so both implementations retry with eps.
    rng = np.random.default_rng(1)
    set1, set2 = rng.normal(size=(2, 11)), rng.normal(size=(2, 11))
    set1[:, :6] = 0
    set2[:, :6] = 0
    set2[:, -1] = 0
    (mu1, sigma1), (mu2, sigma2) = fid.statistics(set1), fid.statistics(set2)
    with pytest.warns(fid.SingularProductWarning):
        ours = fid.frechet_distance(mu1, sigma1, mu2, sigma2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = calculate_frechet_distance(mu1, sigma1, mu2, sigma2)
    assert "singular product" in capsys.readouterr().out
    assert relative_error(ours, expected) < 1e-10


def test_frechet_distance_of_a_set_with_itself_is_zero(np_rng):
    mu, sigma = fid.statistics(np_rng.normal(size=(40, 8)))
    assert abs(fid.frechet_distance(mu, sigma, mu, sigma)) < 1e-10 * np.trace(sigma)


def _few_far_apart_sets():
    """Four vectors of 64 features per set: covariances of rank 3 whose product's square
    root is far from real (about 0.3 imaginary; the figure varies with the LAPACK build and
    its threads), as FID's 2,048 features from a handful of images."""
    rng = np.random.default_rng(14)
    return rng.normal(size=(4, 64)) * 100, rng.normal(size=(4, 64)) * 100 + 5


def test_degenerate_statistics_define_no_distance_as_in_pytorch_fid():
    (mu1, sigma1), (mu2, sigma2) = (fid.statistics(s) for s in _few_far_apart_sets())
    with pytest.raises(
        fid.DegenerateStatistics, match=r"imaginary part of 0\.[23]\d* \(too few or degenerate"
    ):
        fid.frechet_distance(mu1, sigma1, mu2, sigma2)
    with pytest.raises(ValueError, match="Imaginary component"):
        calculate_frechet_distance(mu1, sigma1, mu2, sigma2)


def test_a_run_of_a_few_images_reports_no_fid_and_why_and_keeps_the_rest():
    originals, anonymized = _few_far_apart_sets()
    totals = measures.Accumulator([], ("anonymization",), ())
    totals.fid = {"original": fid.FeatureStatistics(64), "anonymization": fid.FeatureStatistics(64)}
    totals.fid["original"].update(originals)
    totals.fid["anonymization"].update(anonymized)
    for metric in measures.PIXEL_METRICS:
        totals.pixels["anonymization"][metric].append(np.full(4, 0.5))
    quality = measures.quality(totals)["anonymization"]
    assert quality["fid"] is None
    assert quality["fid_undefined"].endswith("from 4 and 4 images against 64 features")
    assert quality["mse"] == quality["lpips"] == 0.5


def test_covariance_needs_two_vectors():
    stats = fid.FeatureStatistics(4)
    stats.update(np.ones((1, 4)))
    with pytest.raises(DatasetError, match="at least 2"):
        stats.covariance()


def _numpy_distances(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    l2 = np.linalg.norm(a - b, axis=1)
    return {"l2": l2, "squared_l2": l2**2, "cosine": 1 - (a * b).sum(axis=1)}


def test_recognition_distances_and_rates_match_numpy(np_rng):
    originals = np_rng.normal(size=(50, 32))
    # Mixtures from near copies to unrelated vectors, so the rates are neither 0 nor 1.
    mix = np_rng.uniform(0.0, 1.0, (50, 1))
    others = (1 - mix) * originals + mix * np_rng.normal(size=(50, 32))
    expected = _numpy_distances(originals, others)
    ours = recognition.distances(originals, others)
    tau = recognition.threshold("arcface")
    report = recognition.recognition_report(originals, others, tau)
    for form in recognition.DISTANCE_FORMS:
        assert_parity(ours[form], expected[form], name=form)
        rate = np.mean(expected[form] <= tau)
        assert 0 < rate < 1, form
        assert recognition.recognition_rate(originals, others, tau, form) == pytest.approx(rate)
        assert report[form]["rate"] == pytest.approx(rate)
        assert report[form]["mean_distance"] == pytest.approx(expected[form].mean(), rel=1e-5)


def test_thresholds_default_to_the_papers_and_can_be_overridden():
    assert recognition.threshold("facenet") == 1.1
    assert recognition.threshold("arcface") == 0.8
    assert recognition.threshold("arcface", {"arcface": 0.5}) == 0.5
    with pytest.raises(ConfigError, match="unknown"):
        recognition.threshold("unknown")
    with pytest.raises(ConfigError, match="manhattan"):
        recognition.distance(np.ones((1, 2)), np.ones((1, 2)), "manhattan")


def test_pairwise_identity_diversity_matches_numpy(np_rng):
    embeddings = np_rng.normal(size=(3, 5, 16)) + np_rng.normal(size=(3, 1, 16))
    cosines, angles = [], []
    for face in embeddings:
        unit = face / np.linalg.norm(face, axis=1, keepdims=True)
        pairs = [(i, j) for i in range(5) for j in range(i + 1, 5)]
        face_cosines = np.array([unit[i] @ unit[j] for i, j in pairs])
        cosines.append(face_cosines.mean())
        angles.append(np.degrees(np.arccos(face_cosines)).mean())
    result = diversity.pairwise_identity_diversity(embeddings)
    assert result["mean_cosine"] == pytest.approx(np.mean(cosines), rel=1e-5)
    assert result["mean_angle_degrees"] == pytest.approx(np.mean(angles), rel=1e-5)


def test_identical_embeddings_have_zero_angle():
    embeddings = np.tile(np.arange(1.0, 9.0), (2, 4, 1))
    result = diversity.pairwise_identity_diversity(embeddings)
    assert result["mean_cosine"] == pytest.approx(1.0)
    assert result["mean_angle_degrees"] == pytest.approx(0.0, abs=0.05)  # arccos near 1 in float32


def test_key_passwords_are_distinct_and_seeded():
    passwords = diversity.key_passwords(6, seed=3)
    assert len(set(passwords)) == 6
    assert passwords == diversity.key_passwords(6, seed=3)
    assert passwords[0] == hashlib.sha256(b"dbaf-jax diversity 3 0").hexdigest()[:24]
    assert set(passwords).isdisjoint(diversity.key_passwords(6, seed=4))


def test_key_grid_rows_are_original_then_keys(np_rng):
    originals = np_rng.uniform(-1, 1, (2, 4, 5, 3)).astype(np.float32)
    anonymized = np_rng.uniform(-1, 1, (2, 3, 4, 5, 3)).astype(np.float32)
    grid = diversity.key_grid(originals, anonymized, padding=1)
    assert grid.shape == (2 * 5 + 1, 4 * 6 + 1, 3)
    np.testing.assert_array_equal(grid[1:5, 1:6], images.to_uint8(originals[0]))
    np.testing.assert_array_equal(grid[6:10, 1 + 6 * 3 : 6 * 4], images.to_uint8(anonymized[1, 2]))
    with pytest.raises(ConfigError):
        diversity.key_grid(originals, anonymized[:1])


def test_tsne_plot_is_deterministic_and_written(np_rng, tmp_path):
    centres = np_rng.normal(size=(3, 1, 24)) * 3
    embeddings = centres + np_rng.normal(size=(3, 6, 24))
    points = diversity.write_tsne_plot(tmp_path / "tsne.png", embeddings, seed=0)
    assert points.shape == (3, 6, 2)
    np.testing.assert_array_equal(diversity.tsne_points(embeddings, seed=0), points)
    with Image.open(tmp_path / "tsne.png") as plot:
        pixels = np.asarray(plot.convert("RGB"))
    assert pixels.shape == (diversity.PLOT_SIZE, diversity.PLOT_SIZE + diversity.LEGEND_WIDTH, 3)
    # One colour per face appears in the plot.
    for colour in diversity.PALETTE[:3]:
        assert np.all(pixels == colour, axis=-1).any(), colour
    assert images.read_metadata(tmp_path / "tsne.png")["faces"] == 3
