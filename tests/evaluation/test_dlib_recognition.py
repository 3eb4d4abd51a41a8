"""dlib's ResNet descriptor as the evaluation's held-out recogniser, and dlib's detector for
Table III, both with dlib's real models (dependencies of the package) on real photos (tests/data):
different people lie beyond dlib's documented 0.6, a face and a mildly changed copy of it
within, and a face replaced by noise is neither detected nor matched."""

import importlib.util

import numpy as np

from dbaf_jax.evaluation import dlib_recognition, recognition
from dbaf_jax.evaluation.dlib_recognition import THRESHOLD
from dbaf_jax.evaluation.utility import DetectionUtility
from dbaf_jax.faces.detectors.dlib_detectors import DlibDetector
from dbaf_jax.storage import images
from tests.face_helpers import mildly_changed


def raw_l2(a, b):
    return np.asarray(recognition.distances(a, b, unit=False)["l2"])


def test_descriptor_separates_people_and_matches_a_changed_copy(recognizer, dlib_faces):
    descriptors = recognizer(images.to_float(dlib_faces))
    assert descriptors.shape == (len(dlib_faces), 128)
    between = np.linalg.norm(descriptors[:, None] - descriptors[None], axis=-1)[
        np.triu_indices(len(dlib_faces), 1)
    ]
    assert between.min() > THRESHOLD, between
    changed = recognizer(images.to_float(np.stack([mildly_changed(f) for f in dlib_faces])))
    assert raw_l2(descriptors, changed).max() < THRESHOLD


def test_noise_is_undetected_and_unmatched(recognizer, dlib_faces):
    noise = np.random.default_rng(0).integers(0, 256, dlib_faces.shape, dtype=np.uint8)
    descriptors = recognizer(images.to_float(dlib_faces))
    before = recognizer.undetected
    noisy = recognizer(images.to_float(noise))
    assert recognizer.undetected - before == len(
        dlib_faces
    )  # every noise image fell back to the whole frame
    assert raw_l2(descriptors, noisy).min() > THRESHOLD


def test_paper_rate_uses_raw_distance_for_dlib(recognizer, dlib_faces):
    descriptors = recognizer(images.to_float(dlib_faces))
    changed = recognizer(images.to_float(np.stack([mildly_changed(f) for f in dlib_faces])))
    assert (
        recognition.recognition_report(descriptors, changed, THRESHOLD, unit=False)["l2"]["rate"]
        == 1.0
    )
    shifted = np.roll(descriptors, 1, axis=0)  # each face against another person's
    assert (
        recognition.recognition_report(descriptors, shifted, THRESHOLD, unit=False)["l2"]["rate"]
        == 0.0
    )


def test_table_three_with_real_dlib(dlib_faces):
    """Detection and 68-point landmarks: a changed copy keeps its face within a few pixels; noise has none."""
    utility = DetectionUtility(DlibDetector())
    originals = images.to_float(dlib_faces)
    utility.update(originals, images.to_float(np.stack([mildly_changed(f) for f in dlib_faces])))
    result = utility.result()
    assert result["detection_rate"] == 1.0 and result["pairs"] == len(dlib_faces)
    assert result["landmark_distance"] < 4.0 and result["box_distance"] < 6.0
    noise = DetectionUtility(DlibDetector())
    noise.update(
        originals, np.random.default_rng(1).uniform(-1, 1, originals.shape).astype(np.float32)
    )
    assert noise.result()["detection_rate"] == 0.0 and noise.result()["landmark_distance"] is None


def test_missing_extra_is_named(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda n: None if n == "face_recognition_models" else find_spec(n),
    )
    assert (
        dlib_recognition.unavailable()
        == f"face_recognition_models is not installed ({dlib_recognition.INSTALL_HINT})"
    )
