"""Convolution + inference BatchNorm + ReLU, the unit both Inception networks are built of.

FaceNet's InceptionResnetV1 and torchvision's Inception v3 (and so pytorch-fid's FID
network) call it `BasicConv2d`: a Conv2d without bias, BatchNorm2d with eps 1e-3 (the
value of the TensorFlow originals), ReLU. The sub-modules are named `conv` and `bn`
as in those checkpoints (`<block>.conv.weight`, `<block>.bn.running_mean`, ...).
"""

from __future__ import annotations

import flax.linen as nn
import jax

BN_EPSILON = 1e-3


class BasicConv(nn.Module):
    """(B, H, W, C_in) -> (B, H', W', features), PyTorch's explicit zero padding.

    ``kernel``, ``stride`` and ``padding`` are (height, width) pairs, as Conv2d's
    arguments; BatchNorm always uses its running statistics (frozen metric networks).
    """

    features: int
    kernel: tuple[int, int]
    stride: int = 1
    padding: tuple[int, int] = (0, 0)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        pad_h, pad_w = self.padding
        x = nn.Conv(
            self.features,
            self.kernel,
            strides=(self.stride, self.stride),
            padding=((pad_h, pad_h), (pad_w, pad_w)),
            use_bias=False,
            name="conv",
        )(x)
        x = nn.BatchNorm(use_running_average=True, epsilon=BN_EPSILON, name="bn")(x)
        return nn.relu(x)
