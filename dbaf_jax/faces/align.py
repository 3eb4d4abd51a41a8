"""FFHQ-style face alignment as a similarity transform, and bilinear warping.

A transform is a (2, 3) float64 matrix ``T`` mapping photo pixel coordinates (x, y)
(pixel centres at integers) to crop pixel coordinates: ``crop = T[:, :2] @ photo +
T[:, 2]``. `invert` gives the way back. The crop is the FFHQ dataset's quad, computed
from the eye centres and mouth corners (`ffhq_quad`), mapped onto a square of ``size``
pixels whose edges run along the quad's edges.

FFHQ's script also shrinks large photos first, pads with reflection and blurs the
padding; none of that is done here: pixels outside the photo repeat its edge pixels.
"""

from __future__ import annotations

import numpy as np

# MTCNN's landmark order: left eye, right eye, nose, left and right mouth corner.
LEFT_EYE, RIGHT_EYE, NOSE, MOUTH_LEFT, MOUTH_RIGHT = range(5)


def ffhq_quad(landmarks: np.ndarray) -> np.ndarray:
    """Five (x, y) landmarks (5, 2) -> the FFHQ quad (4, 2): top-left, bottom-left,
    bottom-right, top-right corners of the face's crop in the photo."""
    points = np.asarray(landmarks, np.float64)
    eye_left, eye_right = points[LEFT_EYE], points[RIGHT_EYE]
    eye_avg = (eye_left + eye_right) / 2
    mouth_avg = (points[MOUTH_LEFT] + points[MOUTH_RIGHT]) / 2
    eye_to_eye = eye_right - eye_left
    eye_to_mouth = mouth_avg - eye_avg
    # The crop's x axis: the eye line tilted towards the normal of the eye-mouth axis.
    x = eye_to_eye - np.flipud(eye_to_mouth) * [-1, 1]
    x /= np.hypot(*x)
    x *= max(np.hypot(*eye_to_eye) * 2.0, np.hypot(*eye_to_mouth) * 1.8)
    y = np.flipud(x) * [-1, 1]
    c = eye_avg + eye_to_mouth * 0.1
    return np.stack([c - x - y, c - x + y, c + x + y, c + x - y])


def quad_side(landmarks: np.ndarray) -> float:
    """The side in photo pixels of the face's FFHQ quad (what the crop is made of)."""
    quad = ffhq_quad(landmarks)
    return float(np.hypot(*(quad[3] - quad[0])))


def alignment_transform(landmarks: np.ndarray, size: int) -> np.ndarray:
    """Landmarks (5, 2) -> the (2, 3) photo-to-crop transform of a ``size`` x ``size`` crop.

    The quad's corners are pixel edges (FFHQ hands PIL ``quad + 0.5``), so crop pixel
    (u, v) samples the photo at ``corner + (x_edge * (2u + 1) + y_edge * (2v + 1)) / (2 size)``
    with ``x_edge`` and ``y_edge`` the quad's top and left edges (vectors).
    """
    quad = ffhq_quad(landmarks)
    x_edge, y_edge = quad[3] - quad[0], quad[1] - quad[0]
    crop_to_photo = np.empty((2, 3))
    crop_to_photo[:, 0] = x_edge / size
    crop_to_photo[:, 1] = y_edge / size
    crop_to_photo[:, 2] = quad[0] + (x_edge + y_edge) / (2 * size)
    return invert(crop_to_photo)


def invert(transform: np.ndarray) -> np.ndarray:
    """The inverse of a (2, 3) affine transform."""
    transform = np.asarray(transform, np.float64)
    linear = np.linalg.inv(transform[:, :2])
    return np.concatenate([linear, -linear @ transform[:, 2:]], axis=1)


def scaled(transform: np.ndarray, factor: float) -> np.ndarray:
    """The transform to a crop ``factor`` times as large (a 64 px output of a 256 px crop: 0.25)."""
    # Pixel centres sit at (i + 0.5) / size of the square: crop' = factor * (crop + 0.5) - 0.5.
    result = np.asarray(transform, np.float64) * factor
    result[:, 2] += (factor - 1) / 2
    return result


def apply(transform: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Points (..., 2) through a (2, 3) transform."""
    transform = np.asarray(transform, np.float64)
    return np.asarray(points, np.float64) @ transform[:, :2].T + transform[:, 2]


def warp(
    image: np.ndarray,
    transform: np.ndarray,
    shape: tuple[int, int],
    origin: tuple[int, int] = (0, 0),
    fill: float | None = None,
) -> np.ndarray:
    """Samples ``image`` (H, W, C) bilinearly on an output grid -> (h, w, C) float32.

    ``transform`` (2, 3) maps output pixel coordinates to ``image``'s (so a crop is
    ``warp(photo, invert(T), (size, size))``); output pixel (row, col) is at (x, y) =
    (origin[1] + col, origin[0] + row). Coordinates outside ``image`` take its nearest
    edge pixel, or ``fill`` when given.
    """
    height, width = image.shape[:2]
    channels = image.shape[2]
    transform = np.asarray(transform, np.float64)
    rows = np.arange(shape[0], dtype=np.float64)[:, None] + origin[0]
    cols = np.arange(shape[1], dtype=np.float64)[None, :] + origin[1]
    x = (
        cols * transform[0, 0] + rows * transform[0, 1] + transform[0, 2]
    )  # (h, w), as `apply` computes them
    y = cols * transform[1, 0] + rows * transform[1, 1] + transform[1, 2]
    if fill is None:
        x = np.clip(x, 0, width - 1).reshape(-1)
        y = np.clip(y, 0, height - 1).reshape(-1)
    else:  # only the points inside are sampled: a face's footprint is mostly outside its crop
        inside = (x >= 0) & (x <= width - 1) & (y >= 0) & (y <= height - 1)
        x, y = x[inside], y[inside]
    x0 = (
        np.minimum(np.floor(x).astype(np.intp), width - 2)
        if width > 1
        else np.zeros_like(x, np.intp)
    )
    y0 = (
        np.minimum(np.floor(y).astype(np.intp), height - 2)
        if height > 1
        else np.zeros_like(y, np.intp)
    )
    x1, y1 = np.minimum(x0 + 1, width - 1), np.minimum(y0 + 1, height - 1)
    fx = (x - x0)[:, None].astype(np.float32)
    fy = (y - y0)[:, None].astype(np.float32)
    # Gathers from the flattened image: one index array per corner, no (h, w, C) index grids.
    # Only the gathered pixels become float32: a crop of a 100-megapixel photo does not
    # convert the whole photo (1.2 GB) first.
    pixels = np.asarray(image).reshape(-1, channels)
    corner = lambda rows, cols: np.take(pixels, rows * width + cols, axis=0).astype(np.float32)  # noqa: E731 (take: 10x faster than indexing)
    top = corner(y0, x0) * (1 - fx) + corner(y0, x1) * fx
    bottom = corner(y1, x0) * (1 - fx) + corner(y1, x1) * fx
    sampled = top * (1 - fy) + bottom * fy
    if fill is None:
        return sampled.reshape(*shape, channels)
    result = np.full((*shape, channels), fill, np.float32)
    result[inside] = sampled
    return result


def crop(photo: np.ndarray, transform: np.ndarray, size: int) -> np.ndarray:
    """The ``size`` x ``size`` aligned crop (float32, photo's value range) of a (2, 3) transform."""
    return warp(photo, invert(transform), (size, size))
