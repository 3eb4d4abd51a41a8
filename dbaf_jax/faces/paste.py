"""Soft masks over aligned crops, and pasting crops back into their photo.

A mask is (S, S) float32 in [0, 1] over an aligned crop: 1 where the crop replaces the
photo, 0 where the photo stays. Every mask is exactly 0 on a border of the crop (it is
feathered inside the crop only), so a pasted face never shows the crop's square edge
and no photo pixel outside the crop's footprint is touched.

- `box_mask`: the crop eroded by ``margin`` and blurred (no parser needed);
- `FaceParser`: BiSeNet's face classes (skin to lips, ears and glasses included),
  feathered the same way.

`paste` (`paste_into`, in place) warps a crop back with the inverse of its alignment
transform and blends it; photo pixels where the warped mask is 0 keep their exact values.

`hide` (`hide_into`, in place) is the irreversible fallback for a face the model cannot take: its detection
box, grown by `HIDE_MARGIN` on every side, becomes `HIDE_CELLS` x `HIDE_CELLS` blocks
of their mean colour: one flat block by default, which dlib's recognizer matched less
often than 4 x 4 blocks (docs/photos.md).
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from scipy import ndimage

from dbaf_jax.core.errors import ModelDirectoryError
from dbaf_jax.faces import align
from dbaf_jax.models.parsers import FACE_LABELS, FEATHER, PARSE_SIZE, bisenet_inputs
from dbaf_jax.storage import model_directory

BOX_MARGIN = 0.1  # of the crop's side: the box mask's erosion (its Gaussian's sigma: FEATHER)
BISENET_KIND = "parsers:BiSeNet"
HIDE_MARGIN = 0.25  # of the box's side, added on each side: MTCNN's box stops at the brows and chin
HIDE_CELLS = 1


def feather(mask: np.ndarray, margin: float = BOX_MARGIN, sigma: float = FEATHER) -> np.ndarray:
    """A binary (S, S) mask -> soft: cleared within ``margin * S`` of the border, then
    blurred with a Gaussian of ``sigma * S`` truncated at the margin (so the border stays 0)."""
    size = mask.shape[0]
    border = max(1, int(round(margin * size)))
    cleared = np.zeros(mask.shape, np.float32)
    cleared[border:-border, border:-border] = mask[border:-border, border:-border]
    sigma_px = sigma * size
    return ndimage.gaussian_filter(
        cleared, sigma_px, mode="constant", truncate=(border - 1) / sigma_px
    ).astype(np.float32)


def box_mask(size: int, margin: float = BOX_MARGIN, sigma: float = FEATHER) -> np.ndarray:
    """The eroded, blurred box (S, S) used when no parser is given."""
    return feather(np.ones((size, size), np.float32), margin, sigma)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _face_probability(module, variables, crops: jax.Array, parse_size: int) -> jax.Array:
    """Crops (B, S, S, 3) in [-1, 1] -> (B, S, S) 1 where the argmax label is a face class."""
    size = crops.shape[1]
    inputs = jax.image.resize(crops, (crops.shape[0], parse_size, parse_size, 3), "bilinear")
    labels = jnp.argmax(module.apply(variables, bisenet_inputs(inputs)), axis=-1)
    face = jnp.isin(labels, jnp.asarray(FACE_LABELS)).astype(jnp.float32)
    return jax.image.resize(face, (crops.shape[0], size, size), "linear")


class FaceParser:
    """Soft face masks from BiSeNet (``python -m convert.parser --kind bisenet``:
    ``FaceParser.load(DIR / 'parser_bisenet')``)."""

    def __init__(self, network: model_directory.Network, parse_size: int = PARSE_SIZE):
        self.module = network.module
        self.variables = jax.device_put(network.variables)
        self.parse_size = parse_size

    @classmethod
    def load(cls, path: str | Path, parse_size: int = PARSE_SIZE) -> FaceParser:
        network = model_directory.load_network(path)
        if network.info["kind"] != BISENET_KIND:
            raise ModelDirectoryError(
                f"{path} holds a {network.info['kind']}, not a {BISENET_KIND} face parser"
            )
        return cls(network, parse_size)

    def masks(self, crops: np.ndarray) -> np.ndarray:
        """Crops (B, S, S, 3) in [-1, 1] -> feathered face masks (B, S, S)."""
        face = np.asarray(
            _face_probability(self.module, self.variables, jnp.asarray(crops), self.parse_size)
        )
        return np.stack([feather(m > 0.5) for m in face])


def footprint(
    transform: np.ndarray, size: int, photo_shape: tuple[int, ...]
) -> tuple[int, int, int, int] | None:
    """(top, left, bottom, right) of the photo pixels a ``size`` crop of ``transform``
    covers, clipped to the photo; None when it lies wholly outside."""
    corners = np.array(
        [[-0.5, -0.5], [size - 0.5, -0.5], [-0.5, size - 0.5], [size - 0.5, size - 0.5]]
    )
    points = align.apply(align.invert(transform), corners)
    left, top = np.floor(points.min(axis=0)).astype(int)
    right, bottom = np.ceil(points.max(axis=0)).astype(int) + 1
    top, left = max(top, 0), max(left, 0)
    bottom, right = min(bottom, photo_shape[0]), min(right, photo_shape[1])
    return (top, left, bottom, right) if top < bottom and left < right else None


def disc_mask(
    transform: np.ndarray, size: int, centre: tuple[float, float], radius: float
) -> np.ndarray:
    """(size, size) float32: 1 at the crop pixels of ``transform`` whose centres lie within
    ``radius`` photo pixels of the photo point ``centre`` (x, y), else 0."""
    grid = np.stack(np.meshgrid(np.arange(size), np.arange(size)), axis=-1).reshape(-1, 2)
    in_photo = align.apply(align.invert(transform), grid)
    inside = np.hypot(*(in_photo - np.asarray(centre, np.float64)).T) <= radius
    return inside.reshape(size, size).astype(np.float32)


def paste(
    photo: np.ndarray, face: np.ndarray, mask: np.ndarray, transform: np.ndarray
) -> np.ndarray:
    """Blends a crop back into its photo (`paste_into`); returns a new uint8 photo."""
    result = photo.copy()
    paste_into(result, face, mask, transform)
    return result


def paste_into(
    photo: np.ndarray, face: np.ndarray, mask: np.ndarray, transform: np.ndarray
) -> None:
    """Blends a crop back into its photo, in place: only the crop's footprint is touched
    (a photo with many faces is not copied once per face).

    Args:
      photo: (H, W, 3) uint8, changed in place.
      face: (s, s, 3) float in [-1, 1], a crop of any size s (the generator's).
      mask: (s, s) in [0, 1], 0 on the crop's border.
      transform: (2, 3) photo-to-crop transform for a crop of size s (`align.scaled`
        turns the input size's into it).
    """
    size = face.shape[0]
    region = footprint(transform, size, photo.shape)
    if region is None:
        return
    top, left, bottom, right = region
    shape = (bottom - top, right - left)
    # Colour and mask in one warp (one sampling grid). Outside the crop both read 0: the
    # mask is 0 there and on the crop's border, so the colour is never blended there.
    layers = np.concatenate(
        [(np.asarray(face, np.float32) + 1) * 127.5, np.asarray(mask, np.float32)[..., None]],
        axis=-1,
    )
    warped = align.warp(layers, transform, shape, origin=(top, left), fill=0.0)
    pixels, alpha = warped[..., :3], warped[..., 3:]
    window = photo[top:bottom, left:right]
    blended = np.clip(
        np.rint(window.astype(np.float32) * (1 - alpha) + pixels * alpha), 0, 255
    ).astype(np.uint8)
    np.copyto(window, blended, where=alpha > 0)


def hide(
    photo: np.ndarray, box: np.ndarray, cells: int = HIDE_CELLS, margin: float = HIDE_MARGIN
) -> np.ndarray:
    """``photo`` (H, W, 3) uint8 with the region of ``box`` hidden (`hide_into`); returns
    a new photo."""
    result = photo.copy()
    hide_into(result, box, cells, margin)
    return result


def hide_into(
    photo: np.ndarray, box: np.ndarray, cells: int = HIDE_CELLS, margin: float = HIDE_MARGIN
) -> None:
    """Pixelates the region of ``box`` (x1, y1, x2, y2) of ``photo`` (H, W, 3) uint8 in
    place to ``cells`` x ``cells`` blocks of their mean colour. A box that is not finite
    hides the whole photo (fail closed)."""
    height, width = photo.shape[:2]
    box = np.asarray(box, np.float64)
    if np.isfinite(box).all():
        grow = margin * max(box[2] - box[0], box[3] - box[1])
        left, top = (int(np.floor(v - grow)) for v in box[:2])
        right, bottom = (int(np.ceil(v + grow)) + 1 for v in box[2:])
        top, left, bottom, right = max(top, 0), max(left, 0), min(bottom, height), min(right, width)
    else:
        top, left, bottom, right = 0, 0, height, width
    if top >= bottom or left >= right:
        return
    rows = np.linspace(top, bottom, cells + 1).round().astype(int)
    cols = np.linspace(left, right, cells + 1).round().astype(int)
    for r0, r1 in zip(rows[:-1], rows[1:]):
        for c0, c1 in zip(cols[:-1], cols[1:]):
            if r0 < r1 and c0 < c1:
                photo[r0:r1, c0:c1] = np.rint(
                    photo[r0:r1, c0:c1].reshape(-1, 3).mean(axis=0)
                ).astype(np.uint8)
