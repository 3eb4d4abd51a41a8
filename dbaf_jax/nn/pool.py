"""PyTorch's `max_pool2d` / `avg_pool2d` with their arguments, on (B, H, W, C).

PyTorch pads symmetrically by ``padding`` and, in its default floor mode, drops a last
window that would start in the padding, which is Flax's explicit-padding 'VALID'
pooling. Max pooling pads with -inf (a padded value never wins); ``count_include_pad``
says whether an average divides by the whole window or only by the real pixels in it
(TensorFlow's rule, which the FID Inception relies on).
"""

from __future__ import annotations

import flax.linen as nn
import jax


def max_pool2d(x: jax.Array, kernel: int, stride: int, padding: int = 0) -> jax.Array:
    """`F.max_pool2d(x, kernel, stride, padding)`: (B, H, W, C) -> (B, (H+2p-k)//s+1, .., C)."""
    pad = ((padding, padding), (padding, padding))
    return nn.max_pool(x, (kernel, kernel), strides=(stride, stride), padding=pad)


def avg_pool2d(
    x: jax.Array, kernel: int, stride: int, padding: int = 0, count_include_pad: bool = True
) -> jax.Array:
    """`F.avg_pool2d(x, kernel, stride, padding, count_include_pad=...)`: (B, H, W, C) -> (B, H', W', C)."""
    pad = ((padding, padding), (padding, padding))
    return nn.avg_pool(
        x,
        (kernel, kernel),
        strides=(stride, stride),
        padding=pad,
        count_include_pad=count_include_pad,
    )
