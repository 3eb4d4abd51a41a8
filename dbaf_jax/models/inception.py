"""The FID Inception network: pytorch-fid's InceptionV3 up to its 2048-d pool features.

This is TensorFlow's 2015-12-05 Inception graph as pytorch-fid rebuilds it for
`pt_inception-2015-12-05-6726825d.pth`: torchvision's Inception v3 layout (names
`Conv2d_1a_3x3` ... `Mixed_7c`, each `BasicConv2d` conv without bias + BatchNorm eps 1e-3
+ ReLU; see dbaf_jax/nn/basic_conv.py) with three changes that make its features those
of the TensorFlow FID code:

- the 3x3 stride-1 average pools of the InceptionA (Mixed_5b-d), InceptionC (Mixed_6b-e)
  and first InceptionE (Mixed_7b) blocks divide by the real pixels only at the border
  (count_include_pad=False);
- the last InceptionE block (Mixed_7c) max-pools its pool branch instead;
- the file's classifier (`fc`, 1008 classes) is not used: the features are the global
  average pool of Mixed_7c, (B, 2048).

Input. pytorch-fid takes RGB in [0, 1], resizes it to 299x299 with
`F.interpolate(mode='bilinear', align_corners=False)` (no antialiasing) and maps it to
[-1, 1] with 2x - 1. This module takes the project's images in [-1, 1] and applies the
same resize to them; the resize is affine-invariant (its weights sum to one), so
`FIDInceptionV3()(2 * u - 1)` gives pytorch-fid's features of an image u in [0, 1].

Sizes for a 299 input: 147x147x64 before the first max-pool, 35x35x288 after Mixed_5d,
17x17x768 after Mixed_6e, 8x8x2048 after Mixed_7c.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from dbaf_jax.nn.basic_conv import BasicConv
from dbaf_jax.nn.pool import avg_pool2d, max_pool2d
from dbaf_jax.nn.resize import resize_bilinear

INPUT_SIZE = 299
FEATURES = 2048


def preprocess(images: jax.Array) -> jax.Array:
    """(B, H, W, 3) images in [-1, 1] -> (B, 299, 299, 3), resized as pytorch-fid does."""
    return resize_bilinear(images, (INPUT_SIZE, INPUT_SIZE))


def pool_branch_input(x: jax.Array, pool: str) -> jax.Array:
    """The 3x3 stride-1 pool in front of a block's branch_pool: 'avg' excludes the padding."""
    if pool == "max":
        return max_pool2d(x, 3, 1, padding=1)
    return avg_pool2d(x, 3, 1, padding=1, count_include_pad=False)


class InceptionA(nn.Module):
    """Mixed_5b-d: (B, H, W, C) -> (B, H, W, 224 + pool_features)."""

    pool_features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b1 = BasicConv(64, (1, 1), name="branch1x1")(x)
        b5 = BasicConv(48, (1, 1), name="branch5x5_1")(x)
        b5 = BasicConv(64, (5, 5), padding=(2, 2), name="branch5x5_2")(b5)
        b3 = BasicConv(64, (1, 1), name="branch3x3dbl_1")(x)
        b3 = BasicConv(96, (3, 3), padding=(1, 1), name="branch3x3dbl_2")(b3)
        b3 = BasicConv(96, (3, 3), padding=(1, 1), name="branch3x3dbl_3")(b3)
        bp = BasicConv(self.pool_features, (1, 1), name="branch_pool")(pool_branch_input(x, "avg"))
        return jnp.concatenate([b1, b5, b3, bp], axis=-1)


class InceptionB(nn.Module):
    """Mixed_6a, a reduction: (B, H, W, C) -> (B, (H-3)//2+1, .., 480 + C)."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b3 = BasicConv(384, (3, 3), stride=2, name="branch3x3")(x)
        bd = BasicConv(64, (1, 1), name="branch3x3dbl_1")(x)
        bd = BasicConv(96, (3, 3), padding=(1, 1), name="branch3x3dbl_2")(bd)
        bd = BasicConv(96, (3, 3), stride=2, name="branch3x3dbl_3")(bd)
        return jnp.concatenate([b3, bd, max_pool2d(x, 3, 2)], axis=-1)


class InceptionC(nn.Module):
    """Mixed_6b-e, factorised 7x7 convolutions of width ``channels_7x7``: (B, H, W, C) -> (B, H, W, 768)."""

    channels_7x7: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c7 = self.channels_7x7
        row, col = dict(kernel=(1, 7), padding=(0, 3)), dict(kernel=(7, 1), padding=(3, 0))
        b1 = BasicConv(192, (1, 1), name="branch1x1")(x)
        b7 = BasicConv(c7, (1, 1), name="branch7x7_1")(x)
        b7 = BasicConv(c7, **row, name="branch7x7_2")(b7)
        b7 = BasicConv(192, **col, name="branch7x7_3")(b7)
        bd = BasicConv(c7, (1, 1), name="branch7x7dbl_1")(x)
        bd = BasicConv(c7, **col, name="branch7x7dbl_2")(bd)
        bd = BasicConv(c7, **row, name="branch7x7dbl_3")(bd)
        bd = BasicConv(c7, **col, name="branch7x7dbl_4")(bd)
        bd = BasicConv(192, **row, name="branch7x7dbl_5")(bd)
        bp = BasicConv(192, (1, 1), name="branch_pool")(pool_branch_input(x, "avg"))
        return jnp.concatenate([b1, b7, bd, bp], axis=-1)


class InceptionD(nn.Module):
    """Mixed_7a, a reduction: (B, H, W, C) -> (B, (H-3)//2+1, .., 512 + C)."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b3 = BasicConv(192, (1, 1), name="branch3x3_1")(x)
        b3 = BasicConv(320, (3, 3), stride=2, name="branch3x3_2")(b3)
        b7 = BasicConv(192, (1, 1), name="branch7x7x3_1")(x)
        b7 = BasicConv(192, (1, 7), padding=(0, 3), name="branch7x7x3_2")(b7)
        b7 = BasicConv(192, (7, 1), padding=(3, 0), name="branch7x7x3_3")(b7)
        b7 = BasicConv(192, (3, 3), stride=2, name="branch7x7x3_4")(b7)
        return jnp.concatenate([b3, b7, max_pool2d(x, 3, 2)], axis=-1)


class InceptionE(nn.Module):
    """Mixed_7b (``pool='avg'``) and Mixed_7c (``pool='max'``): (B, H, W, C) -> (B, H, W, 2048)."""

    pool: str

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        row, col = dict(kernel=(1, 3), padding=(0, 1)), dict(kernel=(3, 1), padding=(1, 0))
        b1 = BasicConv(320, (1, 1), name="branch1x1")(x)
        b3 = BasicConv(384, (1, 1), name="branch3x3_1")(x)
        b3 = jnp.concatenate(
            [
                BasicConv(384, **row, name="branch3x3_2a")(b3),
                BasicConv(384, **col, name="branch3x3_2b")(b3),
            ],
            axis=-1,
        )
        bd = BasicConv(448, (1, 1), name="branch3x3dbl_1")(x)
        bd = BasicConv(384, (3, 3), padding=(1, 1), name="branch3x3dbl_2")(bd)
        bd = jnp.concatenate(
            [
                BasicConv(384, **row, name="branch3x3dbl_3a")(bd),
                BasicConv(384, **col, name="branch3x3dbl_3b")(bd),
            ],
            axis=-1,
        )
        bp = BasicConv(192, (1, 1), name="branch_pool")(pool_branch_input(x, self.pool))
        return jnp.concatenate([b1, b3, bd, bp], axis=-1)


class FIDInceptionV3(nn.Module):
    """(B, H, W, 3) images in [-1, 1] -> (B, 2048) FID pool features (resized to 299 first)."""

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        x = preprocess(images)
        x = BasicConv(32, (3, 3), stride=2, name="Conv2d_1a_3x3")(x)
        x = BasicConv(32, (3, 3), name="Conv2d_2a_3x3")(x)
        x = BasicConv(64, (3, 3), padding=(1, 1), name="Conv2d_2b_3x3")(x)
        x = max_pool2d(x, 3, 2)
        x = BasicConv(80, (1, 1), name="Conv2d_3b_1x1")(x)
        x = BasicConv(192, (3, 3), name="Conv2d_4a_3x3")(x)
        x = max_pool2d(x, 3, 2)
        x = InceptionA(32, name="Mixed_5b")(x)
        x = InceptionA(64, name="Mixed_5c")(x)
        x = InceptionA(64, name="Mixed_5d")(x)
        x = InceptionB(name="Mixed_6a")(x)
        for name, channels_7x7 in (
            ("Mixed_6b", 128),
            ("Mixed_6c", 160),
            ("Mixed_6d", 160),
            ("Mixed_6e", 192),
        ):
            x = InceptionC(channels_7x7, name=name)(x)
        x = InceptionD(name="Mixed_7a")(x)
        x = InceptionE("avg", name="Mixed_7b")(x)
        x = InceptionE("max", name="Mixed_7c")(x)
        return x.mean(axis=(1, 2))
