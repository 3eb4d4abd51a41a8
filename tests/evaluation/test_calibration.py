"""Calibrated thresholds and the gallery re-identification attack, with dlib's real
descriptor on real faces (the dlib_faces crops of tests/conftest.py) and two stand-in
"anonymizers" as controls: one that barely changes a face must be caught (low protection,
Rank-1 re-identification of every face), one that replaces it with noise must not."""

import numpy as np
import pytest
from PIL import Image

from dbaf_jax.evaluation import attacks, calibration, inversion
from dbaf_jax.storage import images
from tests.face_helpers import mildly_changed


def test_threshold_at_far_accepts_at_most_far():
    impostor = np.arange(1000) / 1000.0
    threshold = calibration.threshold_at_far(impostor, 1e-2)
    assert calibration.accept_rate(impostor, threshold) == pytest.approx(1e-2)
    assert calibration.accept_rate(impostor, calibration.threshold_at_far(impostor, 1e-4)) == 0.0
    assert calibration.resolvable(1e-3, 1000) and not calibration.resolvable(1e-3, 999)
    tied = np.array([0.5] * 10 + [1.0] * 90)  # a tie across the cut is rejected whole
    assert calibration.accept_rate(tied, calibration.threshold_at_far(tied, 0.05)) == 0.0


def test_roc_runs_from_none_to_all_accepted():
    far, tar = calibration.roc(np.array([0.1, 0.2, 0.9]), np.array([0.5, 0.8, 1.0, 1.2]))
    assert np.all(np.diff(far) >= 0) and np.all(np.diff(tar) >= 0)
    assert far[-1] == 1.0 and tar[-1] == 1.0
    assert tar[np.searchsorted(far, 0.0, side="right") - 1] == pytest.approx(2 / 3)  # TAR at FAR 0


@pytest.fixture(scope="module")
def embeddings(recognizer, dlib_faces):
    as_float = images.to_float
    noise = np.random.default_rng(0).integers(0, 256, dlib_faces.shape, dtype=np.uint8)
    return {
        "originals": recognizer(as_float(dlib_faces)),
        "views": recognizer(calibration.augmented_views(as_float(dlib_faces))),
        "barely_changed": recognizer(as_float(np.stack([mildly_changed(f) for f in dlib_faces]))),
        "noise": recognizer(as_float(noise)),
    }


def control_report(embeddings, probes: str) -> dict:
    """The calibrated report with ``embeddings[probes]`` as the anonymizations."""
    gallery = (embeddings["originals"], embeddings["views"])
    return calibration.calibrated_report(
        *gallery, {"anonymization": embeddings[probes]}, unit=False
    )


def test_positive_control_is_caught(embeddings):
    report = control_report(embeddings, "barely_changed")
    assert report["gallery_size"] == len(embeddings["originals"])
    assert report["impostor"]["pairs"] == 6 and report["genuine"]["max"] < report["impostor"]["min"]
    assert report["rank1"]["anonymization"] == 1.0
    for row in report["at_far"].values():
        assert row["genuine_tar"] == 1.0 and row["protection_rate"] == 0.0
        assert not row["resolvable"]  # 6 impostor pairs cannot measure FAR 1e-2


def test_negative_control_protects(embeddings):
    report = control_report(embeddings, "noise")
    assert all(row["protection_rate"] == 1.0 for row in report["at_far"].values())
    # Noise probes land on one gallery face at most by chance: well below every face found.
    assert report["rank1"]["anonymization"] <= 0.5


def test_roc_image_draws_each_curve(embeddings):
    originals = embeddings["originals"]
    curves = {
        s: calibration.pair_distances(originals, embeddings[s], False) for s in ("views", "noise")
    }
    picture = calibration.roc_image(curves, calibration.impostor_distances(originals, False))
    assert picture.shape == (640, 640 + 128, 3) and picture.dtype == np.uint8
    for colour in ((31, 119, 180), (255, 127, 14)):  # the first two palette colours, one per curve
        assert np.all(picture == colour, axis=-1).sum() > 100


def test_password_guessing_controls(embeddings):
    """A guess set holding a near copy of each face is caught; noise guesses are not."""
    originals = embeddings["originals"]
    impostor = calibration.impostor_distances(originals, False)
    thresholds = {"0.01": calibration.threshold_at_far(impostor, 1e-2)}
    caught = attacks.password_guessing(
        originals, np.stack([embeddings["noise"], embeddings["barely_changed"]]), thresholds, False
    )
    assert caught["guesses"] == 2 and caught["accepted"]["0.01"] == 1.0
    missed = attacks.password_guessing(originals, embeddings["noise"][None], thresholds, False)
    assert (
        missed["accepted"]["0.01"] == 0.0
        and missed["best_distance_mean"] > caught["best_distance_mean"]
    )


def test_linkability_controls(embeddings):
    """Two barely changed views of each face link perfectly; two unrelated noise images do not."""
    linked = attacks.linkability(embeddings["views"], embeddings["barely_changed"], False)
    assert linked["rank1"] == 1.0 and linked["auc"] == 1.0 and linked["chance"] == 0.25
    noise2 = np.roll(embeddings["noise"], 1, axis=0)  # a different noise image on the other side
    unlinked = attacks.linkability(embeddings["noise"], noise2, False)
    # dlib sees every noise image as much the same non-face: a pair is no closer than any other.
    assert unlinked["auc"] < 0.75


@pytest.fixture(scope="module")
def small_faces(dlib_faces):
    """The four faces at 112 px in [-1, 1]: the inverter trains on a CPU in seconds."""
    return images.to_float(
        np.stack(
            [np.asarray(Image.fromarray(f).resize((112, 112), Image.BILINEAR)) for f in dlib_faces]
        )
    )


@pytest.mark.long  # two trainings at 112 px: minutes on a shared 2-core CPU
def test_learned_inversion_controls(recognizer, small_faces):
    """Trained on two faces' pairs, scored on the other two: an invertible stand-in
    (colours negated) is undone and re-identified; noise in place of the face is not."""
    train, test = small_faces[:2], small_faces[2:]
    originals = recognizer(test)
    negate = inversion.train_inverter(-train, train, steps=200)
    undone = calibration.pair_distances(originals, recognizer(negate(-test)), unit=False)
    assert undone.max() < 0.6, undone
    rng = np.random.default_rng(2)
    noise = lambda x: rng.uniform(-1, 1, x.shape).astype(np.float32)  # noqa: E731
    guess = inversion.train_inverter(noise(train), train, steps=200)
    missed = calibration.pair_distances(originals, recognizer(guess(noise(test))), unit=False)
    assert missed.min() > 0.6, missed
