"""The optional dlib detector: skipped with a reason when dlib is absent (as here), and its
adapter from dlib's rectangles and 68-point shapes to `Detections` (with stand-in
modules that answer as dlib's API does, since no dlib wheel installs here)."""

import importlib.util
import sys
import types

import numpy as np

from dbaf_jax.faces.dlib_detect import DlibDetector


def test_unavailable_names_the_missing_package(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "dlib" else find_spec(name))
    assert DlibDetector.unavailable().startswith("dlib is not installed (pip install '.[eval]'")


def stand_in_dlib(faces):
    """Modules shaped like dlib's API for ``faces``: [(left, top, right, bottom, score)]."""

    class Rectangle:
        def __init__(self, left, top, right, bottom):
            self.box = (left, top, right, bottom)

        def left(self):
            return self.box[0]

        def top(self):
            return self.box[1]

        def right(self):
            return self.box[2]

        def bottom(self):
            return self.box[3]

    class Detector:
        def run(self, image, upsample):
            assert image.dtype == np.uint8 and upsample == 1
            return [Rectangle(*f[:4]) for f in faces], [f[4] for f in faces], [0] * len(faces)

    def shape_predictor(path):
        assert path == "/models/shape_predictor_68_face_landmarks.dat"

        def predict(image, rectangle):  # point k of a face at (left + k, top + 2k)
            left, top = rectangle.box[:2]
            points = [types.SimpleNamespace(x=left + k, y=top + 2 * k) for k in range(68)]
            return types.SimpleNamespace(parts=lambda: points)

        return predict

    dlib = types.SimpleNamespace(get_frontal_face_detector=Detector, shape_predictor=shape_predictor)
    models = types.SimpleNamespace(pose_predictor_model_location=lambda: "/models/shape_predictor_68_face_landmarks.dat")
    return dlib, models


def test_detections_from_dlib_largest_first(monkeypatch):
    dlib, models = stand_in_dlib([(10, 20, 30, 40, 0.5), (5, 5, 105, 85, 1.5)])
    monkeypatch.setitem(sys.modules, "dlib", dlib)
    monkeypatch.setitem(sys.modules, "face_recognition_models", models)
    found = DlibDetector().detect(np.zeros((120, 120, 3), np.uint8))
    np.testing.assert_array_equal(found.boxes, [[5, 5, 105, 85], [10, 20, 30, 40]])
    np.testing.assert_array_equal(found.probs, np.float32([1.5, 0.5]))
    assert found.landmarks.shape == (2, 68, 2)
    np.testing.assert_array_equal(found.landmarks[1, 67], [10 + 67, 20 + 134])


def test_no_face(monkeypatch):
    dlib, models = stand_in_dlib([])
    monkeypatch.setitem(sys.modules, "dlib", dlib)
    monkeypatch.setitem(sys.modules, "face_recognition_models", models)
    found = DlibDetector().detect(np.zeros((8, 8, 3), np.uint8))
    assert found.boxes.shape == (0, 4) and found.landmarks.shape == (0, 68, 2) and found.probs.shape == (0,)
