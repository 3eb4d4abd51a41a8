"""Upsample, FIR-filter, downsample (StyleGAN2's ``upfirdn2d``) and the blur built on it, NHWC.

``upfirdn2d`` inserts ``up - 1`` zeros after every input sample, pads (negative pads
crop), convolves every channel with the FIR kernel (a true convolution: the kernel is
flipped) and keeps every ``down``-th sample. The same ``up``, ``down`` and ``pad`` apply
to both spatial axes, as in rosinality's code.
"""

from __future__ import annotations

import functools
import operator
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
    kernel: np.ndarray,
    up: int = 1,
    down: int = 1,
    pad: Sequence[int] = (0, 0),
) -> jax.Array:
    """Upsample by ``up``, pad by ``pad = (before, after)``, filter, downsample by ``down``.

    The filter is a weighted sum of strided windows of the padded input, with the taps
    as constants, accumulated in float32. A depthwise convolution computes the same,
    but XLA hands it to a library call that nothing fuses with (and that a GPU compile
    autotunes); the windows, their sum and the zero insertion fuse into one
    elementwise kernel, forward and backward (on a CPU, the filter alone ran 4x to
    50x faster). A separable kernel (every ``make_kernel`` of 1-D taps) runs as two
    1-D passes, rows then columns, and the windows that share a tap are summed before
    their one multiplication: for StyleGAN2's [1, 3, 3, 1] that is 8 windows and 2
    multiplications instead of 16 and 16, which took the full-size stage-2 step's
    program from 39,323 to 32,147 operations (docs/performance.md). The sums are
    reordered, so results differ from the 2-D sum by float32 rounding (about 1e-7
    relative); any other kernel takes the 2-D sum.

    Args:
      x: (B, H, W, C).
      kernel: (kh, kw) FIR kernel, concrete (NumPy): its taps become constants.
      up, down: integer factors.
      pad: padding added before and after each spatial axis, after upsampling.

    Returns:
      (B, (H*up + pad0 + pad1 - kh) // down + 1, ..., C), in the dtype of ``x``.
    """
    taps = np.asarray(kernel, np.float32)[::-1, ::-1]  # a true convolution: flipped
    kh, kw = taps.shape
    before, after = pad
    # Interior padding inserts the zeros; the trailing up - 1 zeros of each row that
    # rosinality's reshape-based upsampling produces go into the high padding.
    spatial = (before, after + up - 1, up - 1)
    padded = jax.lax.pad(
        x.astype(jnp.float32), jnp.float32(0), ((0, 0, 0), spatial, spatial, (0, 0, 0))
    )
    batch, height, width, channels = padded.shape
    out_height, out_width = (height - kh) // down + 1, (width - kw) // down + 1
    if out_height < 1 or out_width < 1:
        raise ValueError(
            f"upfirdn2d: a {kh}x{kw} kernel does not fit the padded {height}x{width} input"
        )
    factors = _separable(taps)
    if factors is not None:
        rows, columns = factors
        filtered = _filter_axis(
            _filter_axis(padded, rows, 1, down, out_height), columns, 2, down, out_width
        )
        return filtered.astype(x.dtype)
    filtered = _total(
        float(taps[i, j])
        * jax.lax.slice(
            padded,
            (0, i, j, 0),
            (batch, i + down * (out_height - 1) + 1, j + down * (out_width - 1) + 1, channels),
            (1, down, down, 1),
        )
        for i in range(kh)
        for j in range(kw)
        if taps[i, j] != 0
    )
    return filtered.astype(x.dtype)


def _total(terms) -> jax.Array:
    """The sum of ``terms`` (Python's ``sum`` would add a literal 0 first: 3 more operations)."""
    return functools.reduce(operator.add, terms)


def _separable(taps: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(1-D taps along H, along W) whose outer product is the 2-D ``taps``, or None.

    The W taps are a row normalised to sum 1 and the H taps the row sums, so that
    `make_kernel`'s factors come out exact: (1, 3, 3, 1) / 8, times the gain for H.
    """
    kernel = np.asarray(taps, np.float64)
    rows = kernel.sum(axis=1)
    pivot = int(np.argmax(np.abs(rows)))
    if rows[pivot] == 0:
        return None
    columns = kernel[pivot] / rows[pivot]
    if not np.allclose(np.outer(rows, columns), kernel, rtol=1e-6, atol=0):
        return None
    return rows.astype(np.float32), columns.astype(np.float32)


def _filter_axis(x: jax.Array, taps: np.ndarray, axis: int, down: int, count: int) -> jax.Array:
    """``count`` outputs along ``axis`` of the 1-D filter ``taps`` (already flipped) with
    stride ``down``: the windows that share a tap summed, then multiplied by it once (a
    tap of 1 not at all)."""
    shared: dict[float, list[int]] = {}
    for i, tap in enumerate(taps):
        if tap != 0:
            shared.setdefault(float(tap), []).append(i)

    def window(i: int) -> jax.Array:
        start, limit, strides = [0] * x.ndim, list(x.shape), [1] * x.ndim
        start[axis], limit[axis], strides[axis] = i, i + down * (count - 1) + 1, down
        return jax.lax.slice(x, start, limit, strides)

    return _total(
        windows if tap == 1.0 else tap * windows
        for tap, windows in ((tap, _total(map(window, at))) for tap, at in shared.items())
    )


def blur(x: jax.Array, kernel: np.ndarray, pad: Sequence[int]) -> jax.Array:
    """Filters (B, H, W, C) with ``kernel`` after padding ``pad = (before, after)``."""
    return upfirdn2d(x, kernel, pad=pad)
