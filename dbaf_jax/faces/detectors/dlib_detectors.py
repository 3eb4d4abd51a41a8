"""dlib's face detectors behind the `Detector` seam: its HOG frontal detector
(``kind='hog'``) and its CNN (MMOD) detector (``kind='cnn'``,
``mmod_human_face_detector.dat``), with landmarks from its 68-point shape predictor.

Needs ``dlib`` (the ``dlib-bin`` wheels) and ``face_recognition_models`` (which ships
``mmod_human_face_detector.dat`` and ``shape_predictor_68_face_landmarks.dat``);
`unavailable()` says why it cannot run, so callers can name the reason.

Landmarks: FFHQ alignment needs MTCNN's five points, eye centres, nose and mouth
corners. dlib's 5-point predictor gives eye corners and the base of the nose but no
mouth, so the 68-point one (iBUG's numbering, 0-based) is used and mapped:
left eye (image left) = mean of points 36-41, right eye = mean of 42-47, nose = 30
(its tip), mouth corners = 48 (image left) and 54. With ``all_68`` the 68 points are
given instead (the evaluation's utility measure, as the DBAF paper computes it; not
for alignment).

Scores: HOG's are SVM margins (dlib detects at > 0); ``threshold`` lowers the cut
(dlib's ``adjust_threshold``) for a low-confidence band, and ``sure_threshold``
splits it off. The CNN returns only its detections above 0 (its own cut), so its band
is [0, ``sure_threshold``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from types import ModuleType
from typing import Sequence

import numpy as np

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.faces.detectors.base import Detections, largest_first

# dlib is a dependency of the package; this says how to put it back in an environment without it.
INSTALL_HINT = "pip install dlib-bin==20.0.1.post1 face-recognition-models==0.3.0 'setuptools<81'"
KINDS = ("hog", "cnn")
CNN_FILE = "mmod_human_face_detector.dat"
LEFT_EYE, RIGHT_EYE, NOSE_TIP, MOUTH_LEFT, MOUTH_RIGHT = slice(36, 42), slice(42, 48), 30, 48, 54


def unavailable() -> str | None:
    """None when dlib and its trained models can be imported, else the reason."""
    for name in ("dlib", "face_recognition_models"):
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed ({INSTALL_HINT})"
    return None


# face_recognition_models 0.3.0 imports setuptools' pkg_resources to find its files, which
# warns on import (setuptools 67.5 and later) and is printed before anything a command says.
PKG_RESOURCES_WARNING = r"pkg_resources is deprecated as an API"


def trained_models() -> ModuleType:
    """``face_recognition_models`` (where dlib's trained files are), imported without
    pkg_resources' deprecation warning (that one warning only: any other still shows)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PKG_RESOURCES_WARNING, category=UserWarning)
        return importlib.import_module("face_recognition_models")


def five_points(points: np.ndarray) -> np.ndarray:
    """dlib's 68 points (N, 68, 2) -> MTCNN's five (N, 5, 2) (module docstring)."""
    return np.stack(
        [
            points[:, LEFT_EYE].mean(1),
            points[:, RIGHT_EYE].mean(1),
            points[:, NOSE_TIP],
            points[:, MOUTH_LEFT],
            points[:, MOUTH_RIGHT],
        ],
        axis=1,
    ).astype(np.float32)


class DlibDetector:
    """``detect(uint8 (H, W, 3)) -> Detections``, largest box first; ``upsample`` doubles
    the image that many times first (HOG finds faces from about 80 / 2**upsample px)."""

    def __init__(
        self,
        kind: str = "hog",
        upsample: int = 1,
        threshold: float = 0.0,
        sure_threshold: float | None = None,
        all_68: bool = False,
    ):
        if kind not in KINDS:
            raise ConfigError(f"dlib detector kind must be one of {KINDS}, not {kind!r}")
        dlib = importlib.import_module("dlib")
        models = trained_models()
        if kind == "hog":
            self._detector = dlib.get_frontal_face_detector()
        else:
            folder = os.path.dirname(models.pose_predictor_model_location())
            self._detector = dlib.cnn_face_detection_model_v1(os.path.join(folder, CNN_FILE))
        self._predictor = dlib.shape_predictor(models.pose_predictor_model_location())
        self.kind, self.upsample, self.threshold = kind, upsample, threshold
        self.sure_threshold, self.all_68 = sure_threshold, all_68
        self.name = f"dlib-{kind}"

    unavailable = staticmethod(unavailable)

    def _rectangles(self, image: np.ndarray) -> tuple[list, list[float]]:
        if self.kind == "hog":
            rectangles, scores, _ = self._detector.run(image, self.upsample, self.threshold)
            return list(rectangles), list(scores)
        found = [d for d in self._detector(image, self.upsample) if d.confidence >= self.threshold]
        return [d.rect for d in found], [d.confidence for d in found]

    def detect(self, image: np.ndarray) -> Detections:
        rectangles, margins = self._rectangles(image)
        boxes = np.array(
            [[r.left(), r.top(), r.right(), r.bottom()] for r in rectangles], np.float32
        ).reshape(-1, 4)
        points = np.array(
            [[(p.x, p.y) for p in self._predictor(image, r).parts()] for r in rectangles],
            np.float32,
        ).reshape(-1, 68, 2)
        scores = np.asarray(margins, np.float32).reshape(-1)
        sure = None if self.sure_threshold is None else scores >= np.float32(self.sure_threshold)
        return largest_first(
            Detections(boxes, scores, points if self.all_68 else five_points(points), sure)
        )

    def detect_many(self, images: Sequence[np.ndarray]) -> list[Detections]:
        return [self.detect(np.asarray(image)) for image in images]
