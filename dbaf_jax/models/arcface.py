"""ArcFace IR-SE50 (`model_ir_se50.pth`) with DBAF's input preprocessing.

The reference (`IDLossExtractor` in DBAF's losses/id_loss_new.py) prepares a face image
in [-1, 1] as follows: adaptive-average-pool it to 256x256 if it is not that size
already (PyTorch's `AdaptiveAvgPool2d`, which for 1024 -> 256 is a 4x4 mean, not a
bilinear resize), crop rows 35:223 and columns 32:220 (188x188), adaptive-average-pool
to 112x112 (overlapping 2-3 pixel windows), then runs the IR-SE50 body and the output
layer: BatchNorm2d(512), dropout (inference: identity), flatten, Linear(7*7*512 -> 512),
BatchNorm1d(512), and `x / ||x||` (no epsilon, as the reference).

The reference flattens NCHW; the converter permutes the Linear's input rows once so
that this module flattens its NHWC map directly.

The reference checks only the width (`X.shape[-1] != 256`) before pooling; this
module pools whenever height or width differs from 256, which agrees on square inputs.
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from dbaf_jax.models.irse import IRSEBody, batch_norm, stage_ends
from dbaf_jax.nn.resize import adaptive_avg_pool2d

ALIGNED_SIZE = 256
CROP_ROWS = (35, 223)
CROP_COLS = (32, 220)
INPUT_SIZE = 112


def preprocess(images: jax.Array) -> jax.Array:
    """(B, H, W, 3) face images in [-1, 1] -> (B, 112, 112, 3) ArcFace input."""
    if images.shape[1:3] != (ALIGNED_SIZE, ALIGNED_SIZE):
        images = adaptive_avg_pool2d(images, (ALIGNED_SIZE, ALIGNED_SIZE))
    crop = images[:, CROP_ROWS[0] : CROP_ROWS[1], CROP_COLS[0] : CROP_COLS[1]]
    return adaptive_avg_pool2d(crop, (INPUT_SIZE, INPUT_SIZE))


class ArcFaceFeatures(NamedTuple):
    """`embedding` (B, 512), unit-norm; `maps`: the stem output (B, 112, 112, 64) and the
    outputs of body units 2, 6, 20, 23: (B, 56, 56, 64), (B, 28, 28, 128), (B, 14, 14, 256),
    (B, 7, 7, 512) at full width (DBAF's h0..h4)."""

    embedding: jax.Array
    maps: tuple[jax.Array, ...]


class ArcFace(nn.Module):
    """IR-SE ArcFace. (B, H, W, 3) images in [-1, 1] -> (B, 512) unit embeddings.

    With ``return_maps=True`` returns `ArcFaceFeatures`: the embedding and the maps DBAF's
    perceptual identity term compares, the stem output and the last unit of each stage
    (body units 2, 6, 20, 23 of IR-SE50, the reference's slice boundaries).
    """

    num_layers: int = 50
    width_scale: float = 1.0
    embedding_dim: int = 512

    @nn.compact
    def __call__(self, images: jax.Array, return_maps: bool = False) -> jax.Array | ArcFaceFeatures:
        features = IRSEBody(self.num_layers, self.width_scale, name="body")(preprocess(images))
        x = batch_norm("output_bn2d")(features.units[-1])
        x = x.reshape(x.shape[0], -1)
        x = nn.Dense(self.embedding_dim, name="output_linear")(x)
        x = batch_norm("output_bn1d")(x)
        embedding = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
        if not return_maps:
            return embedding
        maps = (features.stem,) + tuple(features.units[i] for i in stage_ends(self.num_layers))
        return ArcFaceFeatures(embedding, maps)
