"""Pooling and resizing with PyTorch's exact sampling rules (NHWC).

The reference code relies on PyTorch operations that `jax.image.resize` does not
reproduce: `AdaptiveAvgPool2d`, whose windows overlap or differ in size when the input
is not a multiple of the output (ArcFace pools a 188x188 crop to 112x112),
`F.interpolate(mode='bilinear', align_corners=True)` (e4e's feature pyramid), and
`F.interpolate(mode='bilinear', align_corners=False)` without antialiasing (pytorch-fid's
resize to 299, which when downsampling samples two pixels where `jax.image.resize`
would widen its kernel). All are separable, so each is written as one static 1-D
operation per spatial axis, with the indices and weights computed in NumPy at trace time.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np


def adaptive_pool_matrix(in_size: int, out_size: int) -> np.ndarray:
    """(out_size, in_size) averaging matrix of PyTorch's adaptive pooling windows.

    Output i averages inputs [floor(i*in/out), ceil((i+1)*in/out)).
    """
    matrix = np.zeros((out_size, in_size), np.float32)
    for i in range(out_size):
        start = (i * in_size) // out_size
        end = -((-(i + 1) * in_size) // out_size)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


def _pool_axis(x: jax.Array, axis: int, out_size: int) -> jax.Array:
    in_size = x.shape[axis]
    if in_size == out_size:
        return x
    if in_size % out_size == 0:
        # Equal, non-overlapping windows: a reshape and a mean, cheaper than a matmul.
        factor = in_size // out_size
        shape = x.shape[:axis] + (out_size, factor) + x.shape[axis + 1 :]
        return x.reshape(shape).mean(axis=axis + 1)
    matrix = jnp.asarray(adaptive_pool_matrix(in_size, out_size), x.dtype)
    moved = jnp.moveaxis(x, axis, -1)
    pooled = jnp.einsum("...i,oi->...o", moved, matrix, precision=jax.lax.Precision.HIGHEST)
    return jnp.moveaxis(pooled, -1, axis)


def adaptive_avg_pool2d(x: jax.Array, out_hw: tuple[int, int]) -> jax.Array:
    """PyTorch's `AdaptiveAvgPool2d(out_hw)` on (B, H, W, C) -> (B, out_h, out_w, C)."""
    out_h, out_w = out_hw
    return _pool_axis(_pool_axis(x, 1, out_h), 2, out_w)


Taps = tuple[np.ndarray, np.ndarray, np.ndarray]


def _linear_taps(src: np.ndarray, in_size: int) -> Taps:
    """Neighbours (lo, hi) of float32 source positions ``src`` and the weight of hi."""
    lo = np.floor(src).astype(np.int32)
    lo = np.minimum(lo, in_size - 1)
    hi = np.minimum(lo + 1, in_size - 1)
    weight_hi = np.clip(src - lo.astype(np.float32), 0.0, 1.0).astype(np.float32)
    return lo, hi, weight_hi


def align_corners_taps(in_size: int, out_size: int) -> Taps:
    """Source indices (lo, hi) and weight of hi for align_corners=True linear sampling.

    Computed in float32 as PyTorch's CPU kernel does: src = i * (in-1)/(out-1).
    """
    scale = np.float32(in_size - 1) / np.float32(out_size - 1) if out_size > 1 else np.float32(0)
    return _linear_taps(np.arange(out_size, dtype=np.float32) * scale, in_size)


def half_pixel_taps(in_size: int, out_size: int) -> Taps:
    """Source indices (lo, hi) and weight of hi for align_corners=False linear sampling.

    Computed as PyTorch's CPU kernel does: src = (i + 0.5) * in/out - 0.5 in float32,
    clamped at 0 (so the first outputs of an upsampling copy pixel 0). The compiled
    kernel fuses the multiply and the subtraction (one rounding), which the float64
    product below reproduces: a product of two float32 values is exact in float64.
    """
    scale = np.float32(in_size) / np.float32(out_size)
    centres = np.arange(out_size, dtype=np.float32) + np.float32(0.5)
    src = (centres.astype(np.float64) * np.float64(scale) - 0.5).astype(np.float32)
    return _linear_taps(np.maximum(src, np.float32(0)), in_size)


def _interpolate_axis(
    x: jax.Array, axis: int, out_size: int, taps: Callable[[int, int], Taps]
) -> jax.Array:
    in_size = x.shape[axis]
    if in_size == out_size:
        return x
    lo, hi, weight_hi = taps(in_size, out_size)
    shape = [1] * x.ndim
    shape[axis] = out_size
    weight_hi = jnp.asarray(weight_hi, x.dtype).reshape(shape)
    x_lo = jnp.take(x, jnp.asarray(lo), axis=axis)
    x_hi = jnp.take(x, jnp.asarray(hi), axis=axis)
    return x_lo * (1 - weight_hi) + x_hi * weight_hi


def resize_bilinear_align_corners(x: jax.Array, out_hw: tuple[int, int]) -> jax.Array:
    """`F.interpolate(mode='bilinear', align_corners=True)` on (B, H, W, C) -> (B, out_h, out_w, C)."""
    out_h, out_w = out_hw
    return _interpolate_axis(
        _interpolate_axis(x, 1, out_h, align_corners_taps), 2, out_w, align_corners_taps
    )


def resize_bilinear(x: jax.Array, out_hw: tuple[int, int]) -> jax.Array:
    """`F.interpolate(mode='bilinear', align_corners=False)` (no antialiasing) on
    (B, H, W, C) -> (B, out_h, out_w, C)."""
    out_h, out_w = out_hw
    return _interpolate_axis(
        _interpolate_axis(x, 1, out_h, half_pixel_taps), 2, out_w, half_pixel_taps
    )
