"""The IR-SE residual body shared by e4e/pSp and ArcFace (InsightFace's IR-SE50).

One body module serves both networks, so the converters share one key mapping
(`convert/irse.py`). Layout of the public checkpoints, in PyTorch names:

- stem `input_layer`: conv3x3 (no bias) 3 -> 64, BatchNorm, per-channel PReLU;
- `body.{i}` for i = 0..23 (IR-SE50): stages of 3/4/14/3 `bottleneck_IR_SE` units at
  64/128/256/512 channels, the first unit of each stage with stride 2. A unit is
  `res_layer` = BatchNorm, conv3x3, PReLU, conv3x3 with the unit's stride, BatchNorm,
  squeeze-excitation (1x1 convs without bias, reduction 16), plus a shortcut: the input
  subsampled (`MaxPool2d(1, s)`, i.e. ``x[:, ::s, ::s]``) when the channel count is
  unchanged, otherwise `shortcut_layer` = conv1x1 with stride s (no bias) + BatchNorm
  (units 3, 7 and 21 of IR-SE50).

Indices are 0-based body indices, as in the reference code: e4e taps units 6, 20, 23
(c1, c2, c3); DBAF's identity loss taps the stem and units 2, 6, 20, 23.

BatchNorm always runs in inference mode from collection 'batch_stats': both users of
this body are frozen networks in DBAF (the reference keeps them in eval mode).
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

BN_EPSILON = 1e-5
SE_REDUCTION = 16
STAGE_UNITS = {50: (3, 4, 14, 3), 100: (3, 13, 30, 3), 152: (3, 8, 36, 3)}
STAGE_CHANNELS = (64, 128, 256, 512)
STEM_CHANNELS = 64


def scaled_channels(channels: int, width_scale: float) -> int:
    return max(1, int(round(channels * width_scale)))


def unit_specs(num_layers: int = 50, width_scale: float = 1.0) -> tuple[tuple[int, int, int], ...]:
    """(in_channels, out_channels, stride) of every body unit, in order."""
    if num_layers not in STAGE_UNITS:
        raise ValueError(f"num_layers must be one of {sorted(STAGE_UNITS)}, got {num_layers}")
    if scaled_channels(STAGE_CHANNELS[0], width_scale) < SE_REDUCTION:
        raise ValueError(
            f"width_scale {width_scale} leaves fewer than {SE_REDUCTION} channels for squeeze-excitation"
        )
    specs = []
    in_channels = scaled_channels(STEM_CHANNELS, width_scale)
    for units, channels in zip(STAGE_UNITS[num_layers], STAGE_CHANNELS):
        out_channels = scaled_channels(channels, width_scale)
        for k in range(units):
            specs.append((in_channels, out_channels, 2 if k == 0 else 1))
            in_channels = out_channels
    return tuple(specs)


def stage_ends(num_layers: int = 50) -> tuple[int, ...]:
    """Index of the last unit of each stage: (2, 6, 20, 23) for IR-SE50."""
    ends, total = [], 0
    for units in STAGE_UNITS[num_layers]:
        total += units
        ends.append(total - 1)
    return tuple(ends)


def batch_norm(name: str) -> nn.BatchNorm:
    """PyTorch BatchNorm in eval mode: running statistics, eps 1e-5."""
    return nn.BatchNorm(use_running_average=True, epsilon=BN_EPSILON, name=name)


def conv(features: int, kernel: int, stride: int, name: str, use_bias: bool = False) -> nn.Conv:
    """A PyTorch-style convolution with symmetric padding kernel//2 (XLA's 'SAME' pads (0, 1) at stride 2)."""
    pad = kernel // 2
    return nn.Conv(
        features,
        (kernel, kernel),
        strides=(stride, stride),
        padding=((pad, pad), (pad, pad)),
        use_bias=use_bias,
        name=name,
    )


class PReLU(nn.Module):
    """Per-channel PReLU: x for x >= 0, slope * x otherwise (slopes start at PyTorch's 0.25)."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        slope = self.param("slope", nn.initializers.constant(0.25), (x.shape[-1],))
        return jnp.where(x >= 0, x, slope * x)


class SqueezeExcite(nn.Module):
    """Channel gate: x * sigmoid(fc_expand(relu(fc_reduce(mean_hw(x))))), 1x1 convs without bias."""

    reduction: int = SE_REDUCTION

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        channels = x.shape[-1]
        gate = x.mean(axis=(1, 2), keepdims=True)
        gate = nn.relu(conv(channels // self.reduction, 1, 1, "fc_reduce")(gate))
        gate = nn.sigmoid(conv(channels, 1, 1, "fc_expand")(gate))
        return x * gate


class BottleneckIRSE(nn.Module):
    """One `bottleneck_IR_SE` unit: (B, H, W, C_in) -> (B, H/stride, W/stride, out_channels)."""

    out_channels: int
    stride: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if x.shape[-1] == self.out_channels:
            shortcut = x[:, :: self.stride, :: self.stride]
        else:
            shortcut = conv(self.out_channels, 1, self.stride, "shortcut_conv")(x)
            shortcut = batch_norm("shortcut_bn")(shortcut)
        res = batch_norm("bn_in")(x)
        res = conv(self.out_channels, 3, 1, "conv_1")(res)
        res = PReLU(name="prelu")(res)
        res = conv(self.out_channels, 3, self.stride, "conv_2")(res)
        res = batch_norm("bn_out")(res)
        res = SqueezeExcite(name="se")(res)
        return res + shortcut


class IRSEFeatures(NamedTuple):
    """The body's maps: `stem` (B, H, W, 64) and `units[i]`, the output of body unit i."""

    stem: jax.Array
    units: tuple[jax.Array, ...]


class IRSEBody(nn.Module):
    """Stem + IR-SE units. (B, H, W, 3) -> IRSEFeatures.

    Every unit's output is returned; under `jax.jit` the maps a caller does not use
    cost nothing. For a 256 input the IR-SE50 units give 128x128x64 (0-2),
    64x64x128 (3-6), 32x32x256 (7-20), 16x16x512 (21-23); for 112, 56/28/14/7.
    """

    num_layers: int = 50
    width_scale: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> IRSEFeatures:
        x = conv(scaled_channels(STEM_CHANNELS, self.width_scale), 3, 1, "stem_conv")(x)
        x = batch_norm("stem_bn")(x)
        stem = PReLU(name="stem_prelu")(x)
        units = []
        x = stem
        for i, (_, out_channels, stride) in enumerate(
            unit_specs(self.num_layers, self.width_scale)
        ):
            x = BottleneckIRSE(out_channels, stride, name=f"unit_{i}")(x)
            units.append(x)
        return IRSEFeatures(stem, tuple(units))
