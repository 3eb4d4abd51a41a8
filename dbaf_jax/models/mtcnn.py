"""MTCNN's three cascaded networks (Zhang et al. 2016), as facenet-pytorch ships them.

P-net proposes faces densely over an image (fully convolutional: a 12x12 window per
output cell, stride 2), R-net re-scores 24x24 crops of the proposals, O-net scores
48x48 crops and adds five landmarks. Every network also regresses box offsets. The
detection pipeline around them is `dbaf_jax.faces.detectors.mtcnn`.

Layer names are the PyTorch attribute names (conv1, prelu1, dense4, ...), so the
converter maps keys one to one. Pooling uses PyTorch's ceil mode. R-net and O-net
flatten their (B, H, W, C) feature maps in (W, H, C) order before the first dense
layer, as the PyTorch code does (it permutes NCHW to (B, W, H, C)): the dense kernels
are then the PyTorch weights transposed, with no row permutation.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from dbaf_jax.models.irse import PReLU


def max_pool_ceil(x: jax.Array, window: int, stride: int) -> jax.Array:
    """PyTorch MaxPool2d(window, stride, ceil_mode=True) on (B, H, W, C), no padding.

    Ceil mode adds a last, partial window on each axis when the input does not tile
    exactly; its maximum is over the pixels it covers, hence the -inf padding.
    """
    pads = []
    for size in x.shape[1:3]:
        out = math.ceil((size - window) / stride) + 1
        if (out - 1) * stride >= size:  # PyTorch drops a last window that starts past the input
            out -= 1
        pads.append((0, (out - 1) * stride + window - size))
    x = jnp.pad(x, ((0, 0), *pads, (0, 0)), constant_values=-jnp.inf)
    return nn.max_pool(x, (window, window), strides=(stride, stride), padding="VALID")


def conv(features: int, kernel: int, name: str) -> nn.Conv:
    return nn.Conv(features, (kernel, kernel), padding="VALID", name=name)


def flatten_whc(x: jax.Array) -> jax.Array:
    """(B, H, W, C) -> (B, W*H*C) in PyTorch's permute(0, 3, 2, 1) order."""
    return x.transpose(0, 2, 1, 3).reshape(x.shape[0], -1)


# The crop sides the refinement and output networks take (their Dense layers fix them).
RNET_SIDE = 24
ONET_SIDE = 48


class PNet(nn.Module):
    """Proposal network: (B, H, W, 3) normalized pixels -> per-cell box offsets and face probabilities.

    Returns (offsets (B, h, w, 4), probs (B, h, w, 2)) with h = ceil((H - 2) / 2) - 4,
    likewise w; probs[..., 1] is the face probability.

    ``valid`` (2,) int: the input's real height and width when it is padded below and
    to the right (a shape bucket, so new sizes do not recompile). The pooled map is
    then taken over the real pixels only, as at the real size: the cells of the output
    within ceil((valid - 2) / 2) - 4 are those of the unpadded input; the rest are to
    be cut off.
    """

    @nn.compact
    def __call__(self, x: jax.Array, valid: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
        x = PReLU(name="prelu1")(conv(10, 3, "conv1")(x))
        if valid is not None:  # ceil mode's last, partial window must not see the padding
            rows = jnp.arange(x.shape[1])[:, None] < valid[0] - 2
            cols = jnp.arange(x.shape[2])[None, :] < valid[1] - 2
            x = jnp.where((rows & cols)[None, :, :, None], x, -jnp.inf)
        x = max_pool_ceil(x, 2, 2)
        if valid is not None:
            x = jnp.where(
                jnp.isfinite(x), x, 0.0
            )  # windows wholly in the padding: finite, cut off later
        x = PReLU(name="prelu2")(conv(16, 3, "conv2")(x))
        x = PReLU(name="prelu3")(conv(32, 3, "conv3")(x))
        probs = jax.nn.softmax(conv(2, 1, "conv4_1")(x), axis=-1)
        offsets = conv(4, 1, "conv4_2")(x)
        return offsets, probs


class RNet(nn.Module):
    """Refinement network: (B, 24, 24, 3) crops -> (offsets (B, 4), probs (B, 2))."""

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = max_pool_ceil(PReLU(name="prelu1")(conv(28, 3, "conv1")(x)), 3, 2)
        x = max_pool_ceil(PReLU(name="prelu2")(conv(48, 3, "conv2")(x)), 3, 2)
        x = PReLU(name="prelu3")(conv(64, 2, "conv3")(x))
        x = PReLU(name="prelu4")(nn.Dense(128, name="dense4")(flatten_whc(x)))
        probs = jax.nn.softmax(nn.Dense(2, name="dense5_1")(x), axis=-1)
        offsets = nn.Dense(4, name="dense5_2")(x)
        return offsets, probs


class ONet(nn.Module):
    """Output network: (B, 48, 48, 3) crops -> (offsets (B, 4), landmarks (B, 10), probs (B, 2)).

    Landmarks are the five x fractions of the crop width, then the five y fractions.
    """

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        x = max_pool_ceil(PReLU(name="prelu1")(conv(32, 3, "conv1")(x)), 3, 2)
        x = max_pool_ceil(PReLU(name="prelu2")(conv(64, 3, "conv2")(x)), 3, 2)
        x = max_pool_ceil(PReLU(name="prelu3")(conv(64, 3, "conv3")(x)), 2, 2)
        x = PReLU(name="prelu4")(conv(128, 2, "conv4")(x))
        x = PReLU(name="prelu5")(nn.Dense(256, name="dense5")(flatten_whc(x)))
        probs = jax.nn.softmax(nn.Dense(2, name="dense6_1")(x), axis=-1)
        offsets = nn.Dense(4, name="dense6_2")(x)
        landmarks = nn.Dense(10, name="dense6_3")(x)
        return offsets, landmarks, probs
