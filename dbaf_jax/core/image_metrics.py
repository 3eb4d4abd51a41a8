"""Per-image pixel metrics on (B, H, W, C) images in [-1, 1]; each returns (B,).

All are jit-able and reduce over (H, W, C) only, so a report can average, or keep
per-image values, as it needs.

- MSE is taken on the [-1, 1] values themselves, as the DBAF paper reports it.
- PSNR uses the peak-to-peak range of [-1, 1], 2, so PSNR = 10 log10(4 / MSE) (the
  relation the paper's tables follow). Identical images have MSE 0 and PSNR +inf;
  it is returned as +inf, not capped, so a report shows "inf" rather than a made-up
  number (a set mean that includes one is +inf too).
- SSIM is Wang et al.'s (11-tap Gaussian window, sigma 1.5, K1 0.01, K2 0.03, population
  variances, mean over the valid window positions and the channels), computed by
  dm-pix after mapping [-1, 1] to [0, 1] with data range 1. That is the SSIM of the
  same images stored as uint8 with data range 255, the usual convention; SSIM's
  luminance term is not shift-invariant, so computing it on the signed values would
  give different numbers. It equals scikit-image's ``structural_similarity`` with
  ``gaussian_weights=True, sigma=1.5, use_sample_covariance=False`` on ``x + 1``
  with ``data_range=2`` (scikit-image filters with reflection and then crops the
  border, which leaves exactly the valid positions).
"""

from __future__ import annotations

import dm_pix
import jax.numpy as jnp

# Peak-to-peak range of images in [-1, 1].
DATA_RANGE = 2.0
SSIM_FILTER_SIZE = 11
SSIM_FILTER_SIGMA = 1.5
SSIM_K1 = 0.01
SSIM_K2 = 0.03


def mse(images0: jnp.ndarray, images1: jnp.ndarray) -> jnp.ndarray:
    """Mean squared error per image: (B, H, W, C) x2 in [-1, 1] -> (B,)."""
    diff = jnp.asarray(images0, jnp.float32) - jnp.asarray(images1, jnp.float32)
    return jnp.mean(jnp.square(diff), axis=(1, 2, 3))


def psnr(images0: jnp.ndarray, images1: jnp.ndarray) -> jnp.ndarray:
    """PSNR in dB per image with peak 2: 10 log10(4 / MSE), (B,); +inf where the images are equal."""
    return 10.0 * jnp.log10(DATA_RANGE**2 / mse(images0, images1))


def _to_unit(images: jnp.ndarray) -> jnp.ndarray:
    return (jnp.asarray(images, jnp.float32) + 1.0) / 2.0


def ssim(images0: jnp.ndarray, images1: jnp.ndarray) -> jnp.ndarray:
    """SSIM per image (see the module docstring): (B, H, W, C) x2 in [-1, 1], H, W >= 11 -> (B,)."""
    return dm_pix.ssim(
        _to_unit(images0),
        _to_unit(images1),
        max_val=1.0,
        filter_size=SSIM_FILTER_SIZE,
        filter_sigma=SSIM_FILTER_SIGMA,
        k1=SSIM_K1,
        k2=SSIM_K2,
    )
