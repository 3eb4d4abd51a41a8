"""dlib's frontal face detector and 68-point shape predictor, an optional extra for the
utility measures (the DBAF paper's Table III reports Dlib beside MTCNN).

Needs the optional [eval] extra: ``dlib`` (the ``dlib-bin`` wheels) and
``face_recognition_models`` (which ships ``shape_predictor_68_face_landmarks.dat``).
`DlibDetector.unavailable()` says why it cannot run, so the evaluation can skip it with
that message instead of failing.
"""

from __future__ import annotations

import importlib
import importlib.util

import numpy as np

from dbaf_jax.faces.detect import Detections

INSTALL_HINT = "pip install '.[eval]'"


class DlibDetector:
    """``detect(uint8 (H, W, 3)) -> Detections`` with dlib's boxes and 68 landmarks (N, 68, 2),
    largest box first; ``probs`` are dlib's detection scores."""

    def __init__(self, upsample: int = 1):
        dlib = importlib.import_module("dlib")
        models = importlib.import_module("face_recognition_models")
        self._detector = dlib.get_frontal_face_detector()
        self._predictor = dlib.shape_predictor(models.pose_predictor_model_location())
        self.upsample = upsample

    @staticmethod
    def unavailable() -> str | None:
        """None when dlib and its 68-point model can be loaded, else the reason."""
        for name in ("dlib", "face_recognition_models"):
            if importlib.util.find_spec(name) is None:
                return f"{name} is not installed ({INSTALL_HINT})"
        return None

    def detect(self, image: np.ndarray) -> Detections:
        rectangles, scores, _ = self._detector.run(image, self.upsample)
        boxes = np.array([[r.left(), r.top(), r.right(), r.bottom()] for r in rectangles], np.float32).reshape(-1, 4)
        landmarks = np.array(
            [[(p.x, p.y) for p in self._predictor(image, r).parts()] for r in rectangles], np.float32
        ).reshape(-1, 68, 2)
        order = np.argsort(-(boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]), kind="stable")
        return Detections(boxes[order], np.asarray(scores, np.float32).reshape(-1)[order], landmarks[order])
