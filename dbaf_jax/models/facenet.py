"""FaceNet: facenet-pytorch's InceptionResnetV1, the identity metric of the evaluation.

Both published checkpoints (`20180402-114759-vggface2.pt`, `20180408-102900-casia-webface.pt`)
share this network; they differ only in the classifier `logits` (8631 and 10575
identities), which the embedding does not use, so one module serves both.

Layout, in the checkpoint's names (every `BasicConv2d` is conv without bias, BatchNorm
eps 1e-3, ReLU; see dbaf_jax/nn/basic_conv.py):

- stem: conv2d_1a 3x3/2 (32), conv2d_2a 3x3 (32), conv2d_2b 3x3 pad 1 (64), max-pool 3/2,
  conv2d_3b 1x1 (80), conv2d_4a 3x3 (192), conv2d_4b 3x3/2 (256); no other padding;
- repeat_1: 5 Block35 (35x35 in TF terms), residual scale 0.17; mixed_6a -> 896 channels;
- repeat_2: 10 Block17, scale 0.10; mixed_7a -> 1792 channels;
- repeat_3: 5 Block8, scale 0.20, then `block8`: scale 1.0 and no ReLU;
- global average pool, (dropout: identity in inference), last_linear 1792 -> 512 without
  bias, last_bn (BatchNorm1d, eps 1e-3), L2 normalisation (F.normalize, eps 1e-12).

A residual block computes relu(x + scale * conv2d(concat(branches))), conv2d a 1x1
convolution with bias back to the input width.

Input. The published network takes a 160x160 RGB face crop as ``(p - 127.5) / 128`` of
its 0..255 pixels p. This module takes the project's images in [-1, 1], x = p / 127.5 - 1
(dbaf_jax.storage.images.to_float), so the network input is x * 127.5 / 128 exactly. Faces of
another size are first area-resized to 160x160 (PyTorch's adaptive average pooling, what
facenet-pytorch's `interpolate(mode='area')` crop of a tensor does).

Sizes for a 160 input: stem 17x17x256, mixed_6a 8x8x896, mixed_7a 3x3x1792.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from dbaf_jax.nn.basic_conv import BN_EPSILON, BasicConv
from dbaf_jax.nn.pool import max_pool2d
from dbaf_jax.nn.resize import adaptive_avg_pool2d

INPUT_SIZE = 160
PIXEL_SCALE = 127.5 / 128.0  # [-1, 1] images -> the published (p - 127.5) / 128
NORMALIZE_EPSILON = 1e-12  # F.normalize's
EMBEDDING_DIM = 512
BLOCK35_SCALE, BLOCK17_SCALE, BLOCK8_SCALE = 0.17, 0.10, 0.20


def preprocess(images: jax.Array) -> jax.Array:
    """(B, H, W, 3) faces in [-1, 1] -> (B, 160, 160, 3) network input."""
    if images.shape[1:3] != (INPUT_SIZE, INPUT_SIZE):
        images = adaptive_avg_pool2d(images, (INPUT_SIZE, INPUT_SIZE))
    return images * PIXEL_SCALE


def residual(x: jax.Array, branches: jax.Array, scale: float, relu: bool, name: str) -> jax.Array:
    """x + scale * conv1x1(branches) (with bias), then ReLU unless ``relu`` is False."""
    up = nn.Conv(x.shape[-1], (1, 1), name=name)(branches)
    out = x + scale * up
    return nn.relu(out) if relu else out


class Block35(nn.Module):
    """(B, H, W, 256) -> (B, H, W, 256): three branches of 32 channels (1x1; 1x1, 3x3; 1x1, 3x3, 3x3)."""

    scale: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b0 = BasicConv(32, (1, 1), name="branch0")(x)
        b1 = BasicConv(32, (1, 1), name="branch1_0")(x)
        b1 = BasicConv(32, (3, 3), padding=(1, 1), name="branch1_1")(b1)
        b2 = BasicConv(32, (1, 1), name="branch2_0")(x)
        b2 = BasicConv(32, (3, 3), padding=(1, 1), name="branch2_1")(b2)
        b2 = BasicConv(32, (3, 3), padding=(1, 1), name="branch2_2")(b2)
        return residual(x, jnp.concatenate([b0, b1, b2], axis=-1), self.scale, True, "conv2d")


class FactorizedBlock(nn.Module):
    """facenet-pytorch's Block17 (width 128, kernel 7, on 896 channels) and Block8 (width 192,
    kernel 3, on 1792 channels): a 1x1 branch and a 1x1, 1xk, kx1 branch. (B, H, W, C) -> same."""

    width: int
    kernel: int
    scale: float
    relu: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k, pad = self.kernel, self.kernel // 2
        b0 = BasicConv(self.width, (1, 1), name="branch0")(x)
        b1 = BasicConv(self.width, (1, 1), name="branch1_0")(x)
        b1 = BasicConv(self.width, (1, k), padding=(0, pad), name="branch1_1")(b1)
        b1 = BasicConv(self.width, (k, 1), padding=(pad, 0), name="branch1_2")(b1)
        return residual(x, jnp.concatenate([b0, b1], axis=-1), self.scale, self.relu, "conv2d")


class Mixed6a(nn.Module):
    """Reduction (B, H, W, 256) -> (B, (H-3)//2+1, .., 896): 3x3/2 conv 384 | 1x1, 3x3, 3x3/2 256 | max-pool."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b0 = BasicConv(384, (3, 3), stride=2, name="branch0")(x)
        b1 = BasicConv(192, (1, 1), name="branch1_0")(x)
        b1 = BasicConv(192, (3, 3), padding=(1, 1), name="branch1_1")(b1)
        b1 = BasicConv(256, (3, 3), stride=2, name="branch1_2")(b1)
        return jnp.concatenate([b0, b1, max_pool2d(x, 3, 2)], axis=-1)


class Mixed7a(nn.Module):
    """Reduction (B, H, W, 896) -> (B, (H-3)//2+1, .., 1792): three conv branches (384, 256, 256) | max-pool."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b0 = BasicConv(256, (1, 1), name="branch0_0")(x)
        b0 = BasicConv(384, (3, 3), stride=2, name="branch0_1")(b0)
        b1 = BasicConv(256, (1, 1), name="branch1_0")(x)
        b1 = BasicConv(256, (3, 3), stride=2, name="branch1_1")(b1)
        b2 = BasicConv(256, (1, 1), name="branch2_0")(x)
        b2 = BasicConv(256, (3, 3), padding=(1, 1), name="branch2_1")(b2)
        b2 = BasicConv(256, (3, 3), stride=2, name="branch2_2")(b2)
        return jnp.concatenate([b0, b1, b2, max_pool2d(x, 3, 2)], axis=-1)


class InceptionResnetV1(nn.Module):
    """FaceNet. (B, H, W, 3) faces in [-1, 1] -> (B, 512) unit-norm embeddings.

    With ``normalize=False`` returns last_bn's output before the L2 normalisation (what
    the published classifier heads read).
    """

    @nn.compact
    def __call__(self, images: jax.Array, normalize: bool = True) -> jax.Array:
        x = preprocess(images)
        x = BasicConv(32, (3, 3), stride=2, name="conv2d_1a")(x)
        x = BasicConv(32, (3, 3), name="conv2d_2a")(x)
        x = BasicConv(64, (3, 3), padding=(1, 1), name="conv2d_2b")(x)
        x = max_pool2d(x, 3, 2)
        x = BasicConv(80, (1, 1), name="conv2d_3b")(x)
        x = BasicConv(192, (3, 3), name="conv2d_4a")(x)
        x = BasicConv(256, (3, 3), stride=2, name="conv2d_4b")(x)
        for i in range(5):
            x = Block35(BLOCK35_SCALE, name=f"repeat_1_{i}")(x)
        x = Mixed6a(name="mixed_6a")(x)
        for i in range(10):
            x = FactorizedBlock(128, 7, BLOCK17_SCALE, name=f"repeat_2_{i}")(x)
        x = Mixed7a(name="mixed_7a")(x)
        for i in range(5):
            x = FactorizedBlock(192, 3, BLOCK8_SCALE, name=f"repeat_3_{i}")(x)
        x = FactorizedBlock(192, 3, 1.0, relu=False, name="block8")(x)
        x = x.mean(axis=(1, 2))
        x = nn.Dense(EMBEDDING_DIM, use_bias=False, name="last_linear")(x)
        x = nn.BatchNorm(use_running_average=True, epsilon=BN_EPSILON, name="last_bn")(x)
        if not normalize:
            return x
        norm = jnp.linalg.norm(x, axis=-1, keepdims=True)
        return x / jnp.maximum(norm, NORMALIZE_EPSILON)
