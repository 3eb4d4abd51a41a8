"""dlib's ResNet face descriptor: an identity recogniser held out from training.

DBAF trains against ArcFace IR-SE50, so ArcFace alone cannot tell a model that hides
identity from one that only fools its own critic. dlib's descriptor (a ResNet trained
by Davis King on about 3 million faces, 128-D, 99.38% on LFW at its documented
Euclidean threshold 0.6) shares neither weights nor training data with the model's
critic. Its real weights come with the package's dependencies ``dlib-bin`` and
``face-recognition-models``; nothing is converted.

Each image is a face crop. dlib's frontal detector looks for the face (largest box);
when it finds none (an anonymized face may not look like one to it), the whole image
is taken as the face box, so every image gets a descriptor and a failed detection
cannot make a face look protected by being skipped. The 5-point predictor then aligns
the face to dlib's 150x150 chip. `undetected` counts the images that fell back.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

# One home for the install hint and the check, shared with the dlib face detectors.
from dbaf_jax.faces.detectors.dlib_detectors import INSTALL_HINT as INSTALL_HINT
from dbaf_jax.faces.detectors.dlib_detectors import trained_models
from dbaf_jax.faces.detectors.dlib_detectors import unavailable as unavailable
from dbaf_jax.storage.images import to_uint8

# dlib's documented same-person threshold on the Euclidean distance of raw descriptors.
THRESHOLD = 0.6
DIMENSION = 128


def provenance() -> dict[str, Any]:
    """The trained files dlib's recogniser reads (descriptor, 5-point predictor), each with its
    sha256, in the shape of `networks.network_provenance`."""
    models = trained_models()
    version = metadata.version("face_recognition_models")
    parts = []
    for part, location in (
        ("descriptor", models.face_recognition_model_location()),
        ("5-point predictor", models.pose_predictor_five_point_model_location()),
    ):
        parts.append(
            {
                "part": part,
                "source": f"{Path(location).name} (face_recognition_models {version})",
                "sha256": hashlib.sha256(Path(location).read_bytes()).hexdigest(),
                "random": False,
            }
        )
    return {"parts": parts, "random": False}


class DlibRecognizer:
    """``recognizer(images (B, H, W, 3) in [-1, 1]) -> descriptors (B, 128)`` float32, not unit length."""

    name = "dlib"

    def __init__(self, upsample: int = 1):
        dlib = importlib.import_module("dlib")
        models = trained_models()
        self._dlib = dlib
        self._detector = dlib.get_frontal_face_detector()
        self._predictor = dlib.shape_predictor(models.pose_predictor_five_point_model_location())
        self._descriptor = dlib.face_recognition_model_v1(models.face_recognition_model_location())
        self.upsample = upsample
        self.images = 0
        self.undetected = 0

    def face_box(self, pixels: np.ndarray):
        """The largest detected face of uint8 (H, W, 3), else the whole image, as a dlib rectangle."""
        found = list(self._detector(pixels, self.upsample))
        self.images += 1
        if not found:
            self.undetected += 1
            return self._dlib.rectangle(0, 0, pixels.shape[1] - 1, pixels.shape[0] - 1)
        return max(found, key=lambda r: r.width() * r.height())

    def describe(self, pixels: np.ndarray) -> np.ndarray:
        """Descriptor (128,) of one uint8 (H, W, 3) face crop."""
        pixels = np.ascontiguousarray(pixels)
        shape = self._predictor(pixels, self.face_box(pixels))
        return np.asarray(self._descriptor.compute_face_descriptor(pixels, shape), np.float32)

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        pixels = to_uint8(np.asarray(batch, np.float32))
        return np.stack([self.describe(p) for p in pixels]).reshape(-1, DIMENSION)
