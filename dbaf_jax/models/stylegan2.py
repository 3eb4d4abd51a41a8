"""StyleGAN2 generator and discriminator with the layout of rosinality's stylegan2-pytorch, NHWC.

Latents: the generator takes W+ codes (B, n_latent, style_dim). To start from Z:

    w = gen.apply(variables, z, method=Generator.map)            # (B, style_dim)
    w = truncate(w, w_avg, psi)                                  # optional, w_avg: mean of many w
    image = gen.apply(variables, jnp.repeat(w[:, None], gen.n_latent, axis=1))

Latent routing (rosinality's): the 4x4 conv reads latent 0 and the first ToRGB latent 1;
the block at resolution 2^(j+3) reads latents 1+2j (upsampling conv), 2+2j (conv) and
3+2j (ToRGB).

Noise: layer i (0 at 4x4, then two per resolution) adds ``noise_weight * noise_i``. By
default noise_i is the stored buffer ``variables['buffers']['noise_i']`` (1, R, R, 1), as
rosinality's ``randomize_noise=False``. ``noise={i: array}`` replaces chosen layers'
inputs; an array may be a noise map (B, R, R, 1) or a feature map with the layer's
channel count (B, R, R, C): DBAF's MAAR feeds its attribute maps to layers 3-8 that way.
``randomize_noise=True`` draws the remaining layers' noise from the ``'noise'`` RNG.

Intermediate results are sown into the ``'intermediates'`` collection: ``features_R``
(B, R, R, C) after the last conv at resolution R and ``rgb_R`` (B, R, R, 3), the running
ToRGB sum.
"""

from __future__ import annotations

import math
from typing import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from dbaf_jax.nn.equalized import (
    EqualConv2d,
    EqualLinear,
    cast,
    conv2d,
    fused_leaky_relu,
    pixel_norm,
)
from dbaf_jax.nn.upfirdn import BLUR_TAPS, blur, make_kernel, upfirdn2d

# Channel counts of rosinality's networks at width 1, per resolution.
# How DBAF's networks split the 14 W+ rows of the 256 px generator: 4 coarse (pose,
# shape), 4 medium (features), 6 fine (colour, texture) rows, one latent group each.
LATENT_GROUPS = (4, 4, 6)
_BASE_CHANNELS = {4: 512, 8: 512, 16: 512, 32: 512}


def channels_at(resolution: int, channel_multiplier: int, width_scale: float) -> int:
    """Feature channels at ``resolution``: 512 up to 32x32, then 16384 * multiplier / R."""
    base = _BASE_CHANNELS.get(resolution, (16384 // resolution) * channel_multiplier)
    channels = int(base * width_scale)
    if channels < 1:
        raise ValueError(
            f"width_scale {width_scale} leaves no channels at {resolution}x{resolution}"
        )
    return channels


def noise_resolution(index: int) -> int:
    """Side of noise input ``index``: 4 for 0, then two inputs per doubling."""
    return 2 ** ((index + 5) // 2)


def truncate(w: jax.Array, w_avg: jax.Array, psi: float | jax.Array) -> jax.Array:
    """The truncation trick in W: ``w_avg + psi * (w - w_avg)`` (psi 1 leaves w as is)."""
    return w_avg + psi * (w - w_avg)


class ModulatedConv2d(nn.Module):
    """Style-modulated convolution, computed without per-sample weights.

    The definition modulates the weight per sample, ``W'_b = W * s_b / sqrt(Cin k k)``,
    and demodulates it, ``W''_b = W'_b * rsqrt(sum W'_b^2 + 1e-8)`` per output channel.
    Because s_b scales input channels and the demodulation scales output channels, the
    same result is: scale the input by s_b, convolve with the one shared W, scale the
    output by the demodulation coefficients, so one dense convolution serves the batch.

    Upsampling is a stride-2 transposed convolution (output 2H + 1) followed by a blur
    with pad (1, 1) and the kernel scaled by 4, as rosinality's.

    Input (B, H, W, Cin) and style (B, style_dim) -> (B, H or 2H, W or 2W, features).
    """

    features: int
    kernel_size: int
    demodulate: bool = True
    upsample: bool = False
    dtype: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array, style: jax.Array) -> jax.Array:
        in_features = x.shape[-1]
        k = self.kernel_size
        kernel = self.param(
            "kernel", nn.initializers.normal(1.0), (k, k, in_features, self.features)
        )
        kernel = kernel / math.sqrt(in_features * k * k)
        style = EqualLinear(in_features, bias_init=1.0, name="modulation")(style)  # (B, Cin)
        if self.demodulate:
            # sum over (kh, kw, Cin) of (W s_b)^2 = (s_b^2) @ sum_{kh,kw} W^2, in float32.
            demodulation = jax.lax.rsqrt(
                jnp.square(style) @ jnp.sum(jnp.square(kernel), axis=(0, 1)) + 1e-8
            )
        x, kernel, style = cast(self.dtype, x, kernel, style)
        x = x * style[:, None, None, :]
        if self.upsample:
            # Transposed conv = conv of the 2x-dilated input with the spatially flipped kernel.
            y = jax.lax.conv_general_dilated(
                x,
                jnp.flip(kernel, (0, 1)),
                window_strides=(1, 1),
                padding=((k - 1, k - 1), (k - 1, k - 1)),
                lhs_dilation=(2, 2),
                dimension_numbers=("NHWC", "HWIO", "NHWC"),
            )
            pad = len(BLUR_TAPS) - 2 - (k - 1)
            y = blur(y, make_kernel(BLUR_TAPS, gain=4.0), pad=((pad + 1) // 2 + 1, pad // 2 + 1))
        else:
            y = conv2d(x, kernel, padding=(k // 2, k // 2))
        if self.demodulate:
            y = y * cast(self.dtype, demodulation)[:, None, None, :]
        return y


class StyledConv(nn.Module):
    """Modulated 3x3 conv, ``+ noise_weight * noise``, fused leaky ReLU with a bias."""

    features: int
    upsample: bool = False
    dtype: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array, style: jax.Array, noise: jax.Array) -> jax.Array:
        y = ModulatedConv2d(
            self.features, 3, upsample=self.upsample, dtype=self.dtype, name="conv"
        )(x, style)
        noise_weight = self.param("noise_weight", nn.initializers.zeros, ())
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        noise_weight, noise, bias = cast(self.dtype, noise_weight, noise, bias)
        return fused_leaky_relu(y + noise_weight * noise, bias)


class ToRGB(nn.Module):
    """Modulated 1x1 conv to RGB without demodulation, plus the upsampled skip image."""

    dtype: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array, style: jax.Array, skip: jax.Array | None = None) -> jax.Array:
        rgb = ModulatedConv2d(3, 1, demodulate=False, dtype=self.dtype, name="conv")(x, style)
        rgb = rgb + cast(self.dtype, self.param("bias", nn.initializers.zeros, (3,)))
        if skip is not None:
            rgb = rgb + upfirdn2d(skip, make_kernel(BLUR_TAPS, gain=4.0), up=2, pad=(2, 1))
        return rgb


class Generator(nn.Module):
    """StyleGAN2 synthesis and mapping networks (rosinality's ``Generator``).

    Attributes:
      size: output side (a power of two >= 4).
      style_dim: width of z and w.
      n_mlp: mapping layers.
      channel_multiplier: rosinality's channel multiplier (2 for the FFHQ-256 model).
      width_scale: multiplies every feature channel count (reduced copies for tests).
      lr_mlp: learning-rate multiplier of the mapping layers.
      dtype: computation dtype name (``"float32"``, ``"bfloat16"``); parameters stay float32.
    """

    size: int = 256
    style_dim: int = 512
    n_mlp: int = 8
    channel_multiplier: int = 2
    width_scale: float = 1.0
    lr_mlp: float = 0.01
    dtype: str = "float32"

    @property
    def log_size(self) -> int:
        log_size = int(math.log2(self.size))
        if 2**log_size != self.size or log_size < 2:
            raise ValueError(f"size must be a power of two >= 4, got {self.size}")
        return log_size

    @property
    def n_latent(self) -> int:
        """Number of W+ latents: 2 * log2(size) - 2 (14 at 256)."""
        return 2 * self.log_size - 2

    @property
    def num_noise(self) -> int:
        """Number of noise inputs: 2 * log2(size) - 3 (13 at 256)."""
        return 2 * self.log_size - 3

    def channels(self, resolution: int) -> int:
        return channels_at(resolution, self.channel_multiplier, self.width_scale)

    def setup(self):
        self.mapping = [
            EqualLinear(self.style_dim, lr_mul=self.lr_mlp, activation=True)
            for _ in range(self.n_mlp)
        ]
        self.constant_input = self.param(
            "constant_input", nn.initializers.normal(1.0), (1, 4, 4, self.channels(4))
        )
        self.conv1 = StyledConv(self.channels(4), dtype=self.dtype)
        self.to_rgb1 = ToRGB(dtype=self.dtype)
        convs, to_rgbs = [], []
        for log_res in range(3, self.log_size + 1):
            features = self.channels(2**log_res)
            convs += [
                StyledConv(features, upsample=True, dtype=self.dtype),
                StyledConv(features, dtype=self.dtype),
            ]
            to_rgbs.append(ToRGB(dtype=self.dtype))
        self.convs = convs
        self.to_rgbs = to_rgbs
        if self.is_initializing():
            # Fixed noise buffers; only created at init so that `map` runs with params alone.
            for i in range(self.num_noise):
                res = noise_resolution(i)
                self.variable(
                    "buffers",
                    f"noise_{i}",
                    lambda r=res: jax.random.normal(self.make_rng("params"), (1, r, r, 1)),
                )

    def map(self, z: jax.Array) -> jax.Array:
        """Mapping network: z (B, style_dim) -> w (B, style_dim); PixelNorm then the MLP."""
        w = pixel_norm(z)
        for layer in self.mapping:
            w = layer(w)
        return w

    def __call__(
        self,
        latents: jax.Array,
        noise: Mapping[int, jax.Array] | None = None,
        randomize_noise: bool = False,
    ) -> jax.Array:
        """Synthesis: W+ latents (B, n_latent, style_dim) -> image (B, size, size, 3).

        Args:
          latents: W+ codes, one per latent slot.
          noise: optional {noise index: (B or 1, R, R, 1 or C)} replacing those inputs.
          randomize_noise: draw the inputs not in ``noise`` from the ``'noise'`` RNG
            instead of reading the stored buffers.

        Returns:
          The image, unbounded (no tanh or clamp), in the computation dtype.
        """
        if latents.shape[1:] != (self.n_latent, self.style_dim):
            raise ValueError(
                f"latents must be (B, {self.n_latent}, {self.style_dim}), got {latents.shape}"
            )
        noise = dict(noise or {})
        unknown = sorted(set(noise) - set(range(self.num_noise)))
        if unknown:
            raise ValueError(f"noise indices {unknown} out of range 0..{self.num_noise - 1}")
        batch = latents.shape[0]
        if self.is_initializing():
            self.map(jnp.zeros((1, self.style_dim)))  # `init` creates the mapping parameters too

        def noise_input(i: int) -> jax.Array:
            if i in noise:
                return noise[i]
            res = noise_resolution(i)
            if randomize_noise:
                return jax.random.normal(self.make_rng("noise"), (batch, res, res, 1))
            return self.get_variable("buffers", f"noise_{i}")

        x = jnp.broadcast_to(
            cast(self.dtype, self.constant_input), (batch, *self.constant_input.shape[1:])
        )
        x = self.conv1(x, latents[:, 0], noise_input(0))
        skip = self.to_rgb1(x, latents[:, 1])
        self.sow("intermediates", "features_4", x)
        self.sow("intermediates", "rgb_4", skip)
        for j, to_rgb in enumerate(self.to_rgbs):
            x = self.convs[2 * j](x, latents[:, 1 + 2 * j], noise_input(1 + 2 * j))
            x = self.convs[2 * j + 1](x, latents[:, 2 + 2 * j], noise_input(2 + 2 * j))
            skip = to_rgb(x, latents[:, 3 + 2 * j], skip)
            res = 2 ** (j + 3)
            self.sow("intermediates", f"features_{res}", x)
            self.sow("intermediates", f"rgb_{res}", skip)
        return skip


class ConvLayer(nn.Module):
    """The discriminator's conv: [blur, stride 2] equalized conv, then fused leaky ReLU.

    With ``downsample`` the input is blurred (pad (2, 2) for k=3, (1, 1) for k=1) and the
    conv runs with stride 2 and no padding; otherwise padding is k // 2. With
    ``activate`` the bias belongs to the activation; without, the conv has no bias here.
    """

    features: int
    kernel_size: int
    downsample: bool = False
    activate: bool = True
    dtype: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k = self.kernel_size
        if self.downsample:
            pad = len(BLUR_TAPS) - 2 + (k - 1)
            x = blur(x, make_kernel(BLUR_TAPS), pad=((pad + 1) // 2, pad // 2))
            conv = EqualConv2d(
                self.features, k, stride=2, use_bias=False, dtype=self.dtype, name="conv"
            )
        else:
            conv = EqualConv2d(
                self.features, k, padding=k // 2, use_bias=False, dtype=self.dtype, name="conv"
            )
        y = conv(x)
        if self.activate:
            y = fused_leaky_relu(
                y, cast(self.dtype, self.param("bias", nn.initializers.zeros, (self.features,)))
            )
        return y


class ResBlock(nn.Module):
    """conv3x3, downsampling conv3x3, plus a downsampling 1x1 skip; ``(out + skip) / sqrt(2)``."""

    features: int
    dtype: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = ConvLayer(x.shape[-1], 3, dtype=self.dtype, name="conv1")(x)
        y = ConvLayer(self.features, 3, downsample=True, dtype=self.dtype, name="conv2")(y)
        skip = ConvLayer(
            self.features, 1, downsample=True, activate=False, dtype=self.dtype, name="skip"
        )(x)
        return (y + skip) / math.sqrt(2.0)


class Discriminator(nn.Module):
    """StyleGAN2 residual discriminator (rosinality's ``Discriminator``).

    ``__call__``: images (B, size, size, 3) -> logits (B, 1). B must be divisible by
    min(B, 4) (the minibatch-stddev group), as in the reference.

    Attributes:
      size: input side.
      channel_multiplier: rosinality's channel multiplier.
      width_scale: multiplies every channel count.
      dtype: computation dtype name.
    """

    size: int = 256
    channel_multiplier: int = 2
    width_scale: float = 1.0
    dtype: str = "float32"

    def channels(self, resolution: int) -> int:
        return channels_at(resolution, self.channel_multiplier, self.width_scale)

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        log_size = int(math.log2(self.size))
        x = ConvLayer(self.channels(self.size), 1, dtype=self.dtype, name="from_rgb")(images)
        for log_res in range(log_size, 2, -1):
            x = ResBlock(
                self.channels(2 ** (log_res - 1)),
                dtype=self.dtype,
                name=f"res_blocks_{log_size - log_res}",
            )(x)
        x = minibatch_stddev(x)
        x = ConvLayer(self.channels(4), 3, dtype=self.dtype, name="final_conv")(x)
        # Flatten in PyTorch's (C, H, W) order so final_linear's converted weight applies as is.
        x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
        x = EqualLinear(self.channels(4), activation=True, dtype=self.dtype, name="final_linear_0")(
            x
        )
        return EqualLinear(1, dtype=self.dtype, name="final_linear_1")(x)


def minibatch_stddev(x: jax.Array, group_size: int = 4) -> jax.Array:
    """Appends the minibatch standard-deviation channel: (B, H, W, C) -> (B, H, W, C + 1).

    As rosinality's: the batch is viewed as (group, B / group), so samples b and
    b + B / group share a statistic, which is the mean over (H, W, C) of the
    population standard deviation (+ 1e-8 inside the sqrt) across the group.
    """
    batch, height, width, channels = x.shape
    group = min(batch, group_size)
    if batch % group:
        raise ValueError(f"batch {batch} is not divisible by the stddev group {group}")
    grouped = x.astype(jnp.float32).reshape(group, batch // group, height, width, channels)
    stddev = jnp.sqrt(jnp.var(grouped, axis=0) + 1e-8).mean(axis=(1, 2, 3))  # (B / group,)
    stddev = jnp.tile(stddev, group).astype(x.dtype)  # sample b reads entry b % (B / group)
    return jnp.concatenate(
        [x, jnp.broadcast_to(stddev[:, None, None, None], (batch, height, width, 1))], axis=-1
    )
