"""What happens to a shared photo, and one-bit changes of the key, as image transforms.

`TRANSFORMS` are applied to the stored anonymized images (B, H, W, 3) in [-1, 1] before
recovery with the right password: JPEG at quality 95, 75 and 50 (PIL, 4:2:0 chroma
subsampling, as most sharing does), resizing by 0.5 and back (bilinear both ways: the
recovery runs at the model's input size), and a Gaussian blur of sigma 1 (PIL's
GaussianBlur takes its radius as the standard deviation). `flip_bit` makes the
one-bit-changed password and salt of the key-sensitivity rows.
"""

from __future__ import annotations

import io
from typing import Callable

import numpy as np
from PIL import Image, ImageFilter

from dbaf_jax.storage import images


def _per_image(batch: np.ndarray, change: Callable[[Image.Image], Image.Image]) -> np.ndarray:
    return np.stack(
        [
            images.to_float(np.asarray(change(Image.fromarray(p)).convert("RGB")))
            for p in images.to_uint8(batch)
        ]
    )


def jpeg(quality: int) -> Callable[[np.ndarray], np.ndarray]:
    def change(image: Image.Image) -> Image.Image:
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=quality)
        return Image.open(buffer)

    return lambda batch: _per_image(batch, change)


def half_size(batch: np.ndarray) -> np.ndarray:
    size = np.shape(batch)[1]
    return _per_image(
        batch,
        lambda im: im.resize((size // 2, size // 2), Image.BILINEAR).resize(
            (size, size), Image.BILINEAR
        ),
    )


def blur(sigma: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda batch: _per_image(batch, lambda im: im.filter(ImageFilter.GaussianBlur(sigma)))


TRANSFORMS = {
    "jpeg95": jpeg(95),
    "jpeg75": jpeg(75),
    "jpeg50": jpeg(50),
    "resize0.5": half_size,
    "blur1": blur(1.0),
}


def flip_bit(text: str) -> str:
    """``text`` with the lowest bit of its last character flipped (one bit of its UTF-8 for ASCII)."""
    return text[:-1] + chr(ord(text[-1]) ^ 1)


def flip_salt_bit(salt_hex: str) -> str:
    """A hex salt with the lowest bit of its last byte flipped."""
    salt = bytearray(bytes.fromhex(salt_hex))
    salt[-1] ^= 1
    return salt.hex()
