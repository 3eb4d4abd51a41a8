"""Pooling and resizing with PyTorch's exact sampling rules (NHWC).

The reference code relies on two PyTorch operations that `jax.image.resize` does not
reproduce: `AdaptiveAvgPool2d`, whose windows overlap or differ in size when the input
is not a multiple of the output (ArcFace pools a 188x188 crop to 112x112), and
`F.interpolate(mode='bilinear', align_corners=True)` (e4e's feature pyramid). Both are
separable, so each is written as one static 1-D operation per spatial axis, with the
indices and weights computed in NumPy at trace time.
"""

from __future__ import annotations

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
        shape = x.shape[:axis] + (out_size, factor) + x.shape[axis + 1:]
        return x.reshape(shape).mean(axis=axis + 1)
    matrix = jnp.asarray(adaptive_pool_matrix(in_size, out_size), x.dtype)
    moved = jnp.moveaxis(x, axis, -1)
    pooled = jnp.einsum("...i,oi->...o", moved, matrix, precision=jax.lax.Precision.HIGHEST)
    return jnp.moveaxis(pooled, -1, axis)


def adaptive_avg_pool2d(x: jax.Array, out_hw: tuple[int, int]) -> jax.Array:
    """PyTorch's `AdaptiveAvgPool2d(out_hw)` on (B, H, W, C) -> (B, out_h, out_w, C)."""
    out_h, out_w = out_hw
    return _pool_axis(_pool_axis(x, 1, out_h), 2, out_w)


def align_corners_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source indices (lo, hi) and weight of hi for align_corners=True linear sampling.

    Computed in float32 as PyTorch's CPU kernel does: src = i * (in-1)/(out-1).
    """
    scale = np.float32(in_size - 1) / np.float32(out_size - 1) if out_size > 1 else np.float32(0)
    src = np.arange(out_size, dtype=np.float32) * scale
    lo = np.floor(src).astype(np.int32)
    lo = np.minimum(lo, in_size - 1)
    hi = np.minimum(lo + 1, in_size - 1)
    weight_hi = np.clip(src - lo.astype(np.float32), 0.0, 1.0).astype(np.float32)
    return lo, hi, weight_hi


def _interpolate_axis(x: jax.Array, axis: int, out_size: int) -> jax.Array:
    in_size = x.shape[axis]
    if in_size == out_size:
        return x
    lo, hi, weight_hi = align_corners_taps(in_size, out_size)
    shape = [1] * x.ndim
    shape[axis] = out_size
    weight_hi = jnp.asarray(weight_hi, x.dtype).reshape(shape)
    x_lo = jnp.take(x, jnp.asarray(lo), axis=axis)
    x_hi = jnp.take(x, jnp.asarray(hi), axis=axis)
    return x_lo * (1 - weight_hi) + x_hi * weight_hi


def resize_bilinear_align_corners(x: jax.Array, out_hw: tuple[int, int]) -> jax.Array:
    """`F.interpolate(mode='bilinear', align_corners=True)` on (B, H, W, C) -> (B, out_h, out_w, C)."""
    out_h, out_w = out_hw
    return _interpolate_axis(_interpolate_axis(x, 1, out_h), 2, out_w)
