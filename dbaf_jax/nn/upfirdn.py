"""Upsample, FIR-filter, downsample (StyleGAN2's ``upfirdn2d``) and the blur built on it, NHWC.

``upfirdn2d`` inserts ``up - 1`` zeros after every input sample, pads (negative pads
crop), convolves every channel with the FIR kernel (a true convolution: the kernel is
flipped) and keeps every ``down``-th sample. The same ``up``, ``down`` and ``pad`` apply
to both spatial axes, as in rosinality's code.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

BLUR_TAPS = (1.0, 3.0, 3.0, 1.0)


def make_kernel(taps: Sequence[float] = BLUR_TAPS, gain: float = 1.0) -> np.ndarray:
    """The separable 2-D FIR kernel ``outer(taps, taps)``, normalised to sum ``gain``.

    An upsampling filter uses gain ``up**2`` so that zero insertion keeps the mean.
    """
    taps = np.asarray(taps, np.float32)
    kernel = np.outer(taps, taps) if taps.ndim == 1 else taps
    return (kernel / kernel.sum() * gain).astype(np.float32)


def upfirdn2d(
    x: jax.Array,
    kernel: np.ndarray | jax.Array,
    up: int = 1,
    down: int = 1,
    pad: Sequence[int] = (0, 0),
) -> jax.Array:
    """Upsample by ``up``, pad by ``pad = (before, after)``, filter, downsample by ``down``.

    Args:
      x: (B, H, W, C).
      kernel: (kh, kw) FIR kernel.
      up, down: integer factors.
      pad: padding added before and after each spatial axis, after upsampling.

    Returns:
      (B, (H*up + pad0 + pad1 - kh) // down + 1, ..., C).
    """
    kernel = jnp.asarray(kernel, x.dtype)
    kh, kw = kernel.shape
    channels = x.shape[-1]
    before, after = pad
    # Interior padding inserts the zeros; the trailing up - 1 zeros of each row that
    # rosinality's reshape-based upsampling produces go into the high padding.
    spatial = (before, after + up - 1, up - 1)
    x = jax.lax.pad(x, jnp.zeros((), x.dtype), ((0, 0, 0), spatial, spatial, (0, 0, 0)))
    depthwise = jnp.tile(jnp.flip(kernel, (0, 1))[:, :, None, None], (1, 1, 1, channels))
    return jax.lax.conv_general_dilated(
        x,
        depthwise,
        window_strides=(down, down),
        padding="VALID",
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=channels,
    )


def blur(x: jax.Array, kernel: np.ndarray | jax.Array, pad: Sequence[int]) -> jax.Array:
    """Filters (B, H, W, C) with ``kernel`` after padding ``pad = (before, after)``."""
    return upfirdn2d(x, kernel, pad=pad)
