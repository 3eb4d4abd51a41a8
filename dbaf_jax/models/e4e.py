"""The e4e encoder (Encoder4Editing) and pSp's GradualStyleEncoder, on the shared IR-SE body.

Both map a (B, 256, 256, 3) image in [-1, 1] to a W+ code of ``2*log2(stylegan_size)-2``
latents, through the same layers (so one key mapping converts both):

- the IR-SE50 body, tapped after units 6, 20, 23 (0-based body indices, as in the
  reference's ``if i == 6 / 20 / 23``): c1 (B, 64, 64, 128), c2 (B, 32, 32, 256),
  c3 (B, 16, 16, 512);
- a feature pyramid: p2 = up(c3) + lateral_middle(c2), p1 = up(p2) + lateral_fine(c1),
  with bilinear align_corners=True upsampling and 1x1 lateral convolutions with bias;
- one `GradualStyleBlock` per latent: styles 0-2 read c3, 3-6 read p2, 7.. read p1
  (e4e's coarse_ind=3, middle_ind=7).

They differ in how the block outputs become the code. pSp takes them as they are; e4e
takes block 0 as a base w0 shared by every latent and the others as offsets:
``w_i = w0 + delta_i``. Both add `latent_avg` (collection 'buffers', the checkpoint's
``latent_avg``), as pSp's ``start_from_latent_avg`` does.

DBAF uses e4e frozen, and its MAAR module consumes c3, c2, c1 as well, so the encoders
return all four in an `EncoderOutput`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from dbaf_jax.models.irse import IRSEBody, conv, stage_ends, unit_specs
from dbaf_jax.nn.equalized import EqualLinear
from dbaf_jax.nn.resize import resize_bilinear_align_corners

LEAKY_RELU_SLOPE = 0.01  # torch.nn.LeakyReLU's default, used by the style blocks
COARSE_END = 3  # styles [0, 3) read c3
MIDDLE_END = 7  # styles [3, 7) read p2, the rest p1
# c3, p2 and p1 are the input downsampled by 16, 8 and 4 (16, 32, 64 for a 256 input).
MAP_STRIDES = (16, 8, 4)


def style_count(stylegan_size: int) -> int:
    """Number of W+ latents of a StyleGAN2 generator of this output size (14 for 256)."""
    return 2 * int(math.log2(stylegan_size)) - 2


class EncoderOutput(NamedTuple):
    """`codes` (B, n_styles, style_dim): W+ code with latent_avg added; c3 (B, 16, 16, 512),
    c2 (B, 32, 32, 256), c1 (B, 64, 64, 128): body maps (sizes for a 256 input, full width)."""

    codes: jax.Array
    c3: jax.Array
    c2: jax.Array
    c1: jax.Array


class GradualStyleBlock(nn.Module):
    """[conv3x3 stride 2 pad 1 (bias) + LeakyReLU(0.01)] x log2(spatial), then EqualLinear.

    (B, spatial, spatial, C) -> (B, features).
    """

    features: int
    spatial: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i in range(int(math.log2(self.spatial))):
            x = conv(self.features, 3, 2, f"conv_{i}", use_bias=True)(x)
            x = nn.leaky_relu(x, LEAKY_RELU_SLOPE)
        if x.shape[1:3] != (1, 1):
            raise ValueError(
                f"a style block for {self.spatial}x{self.spatial} maps got {x.shape[1:3]} after its convs"
            )
        return EqualLinear(self.features, name="linear")(x.reshape(x.shape[0], self.features))


class GradualStyleEncoder(nn.Module):
    """pSp's encoder: (B, 256, 256, 3) images in [-1, 1] -> EncoderOutput; codes_i = style_i + avg_i.

    Attributes:
      stylegan_size: output size of the generator the codes drive (sets the latent count).
      style_dim: width of a latent (512).
      width_scale: channel multiplier of the body (1.0 for the public checkpoints).
      num_layers: IR-SE depth (50).
      input_size: side of the input images (256 for the public checkpoints; smaller
        only for reduced test and smoke configurations).
    """

    stylegan_size: int = 256
    style_dim: int = 512
    width_scale: float = 1.0
    num_layers: int = 50
    input_size: int = 256

    @property
    def n_styles(self) -> int:
        return style_count(self.stylegan_size)

    def style_spatial(self, index: int) -> int:
        """Side of the map style block ``index`` reads: c3, p2 or p1 (16, 32, 64 at 256 px)."""
        return self.input_size // MAP_STRIDES[(index >= COARSE_END) + (index >= MIDDLE_END)]

    def setup(self):
        self.body = IRSEBody(self.num_layers, self.width_scale)
        self.styles = [
            GradualStyleBlock(self.style_dim, self.style_spatial(i)) for i in range(self.n_styles)
        ]
        top_channels = unit_specs(self.num_layers, self.width_scale)[-1][1]  # c3's width
        self.lateral_middle = conv(top_channels, 1, 1, "lateral_middle", use_bias=True)
        self.lateral_fine = conv(top_channels, 1, 1, "lateral_fine", use_bias=True)
        self.latent_avg = self.variable(
            "buffers", "latent_avg", lambda: jnp.zeros((self.n_styles, self.style_dim), jnp.float32)
        )

    def style_outputs(self, images: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        """The style blocks' outputs (B, n_styles, style_dim) and the maps c3, c2, c1."""
        units = self.body(images).units
        _, c1_index, c2_index, c3_index = stage_ends(self.num_layers)
        c1, c2, c3 = units[c1_index], units[c2_index], units[c3_index]
        p2 = resize_bilinear_align_corners(c3, c2.shape[1:3]) + self.lateral_middle(c2)
        p1 = resize_bilinear_align_corners(p2, c1.shape[1:3]) + self.lateral_fine(c1)
        by_spatial = {m.shape[1]: m for m in (c3, p2, p1)}
        styles = jnp.stack(
            [block(by_spatial[self.style_spatial(i)]) for i, block in enumerate(self.styles)],
            axis=1,
        )
        return styles, c3, c2, c1

    def combine(self, styles: jax.Array) -> jax.Array:
        """Style-block outputs -> W+ code before latent_avg: pSp uses them as they are."""
        return styles

    def __call__(self, images: jax.Array) -> EncoderOutput:
        styles, c3, c2, c1 = self.style_outputs(images)
        codes = self.combine(styles) + self.latent_avg.value
        return EncoderOutput(codes, c3, c2, c1)


class Encoder4Editing(GradualStyleEncoder):
    """e4e: one base latent w0 (style block 0) plus per-latent offsets, w_i = w0 + delta_i.

    (B, 256, 256, 3) images in [-1, 1] -> EncoderOutput with codes (B, n_styles, style_dim).
    All offsets are applied (the reference's ProgressiveStage.Inference).
    """

    def combine(self, styles: jax.Array) -> jax.Array:
        return styles.at[:, 1:].add(styles[:, :1])
