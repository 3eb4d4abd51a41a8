"""Faces and their changes made by hand, for the tests of several folders: `CANONICAL`, a
frontal face's five landmarks, and `similarity`, a known move of them (the alignment tests
of tests/faces/), `landmarks_at`, a face's five landmarks at any place and size (the
merge tests of tests/faces/ and the tracks of tests/video/), and `mildly_changed`, what
sharing does to a face crop (the recognition tests of tests/evaluation/ against dlib's
real descriptor)."""

import io

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter

# A frontal face's five MTCNN landmarks (eyes, nose, mouth corners), in pixels.
CANONICAL = np.array(
    [[100.0, 120.0], [160.0, 120.0], [130.0, 150.0], [108.0, 180.0], [152.0, 180.0]]
)


def landmarks_at(x: float, y: float, side: float) -> np.ndarray:
    """The five landmarks (5, 2) float32 of a frontal face ``side`` pixels wide centred at
    (x, y): eyes 0.4 of the side apart, a tenth above the centre, the nose just below it,
    the mouth corners a quarter below."""
    return np.array(
        [
            [x - 0.2 * side, y - 0.1 * side],
            [x + 0.2 * side, y - 0.1 * side],
            [x, y + 0.05 * side],
            [x - 0.15 * side, y + 0.25 * side],
            [x + 0.15 * side, y + 0.25 * side],
        ],
        np.float32,
    )


def similarity(angle: float, scale: float, shift: tuple[float, float]) -> np.ndarray:
    """(2, 3): rotate by ``angle``, scale, then shift."""
    c, s = scale * np.cos(angle), scale * np.sin(angle)
    return np.array([[c, -s, shift[0]], [s, c, shift[1]]])


def mildly_changed(pixels: np.ndarray) -> np.ndarray:
    """Blur sigma 0.8, brightness +8%, JPEG quality 85: what sharing a photo does to it."""
    image = ImageEnhance.Brightness(
        Image.fromarray(pixels).filter(ImageFilter.GaussianBlur(0.8))
    ).enhance(1.08)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=85)
    return np.asarray(Image.open(buffer).convert("RGB"))
