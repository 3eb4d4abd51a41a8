"""Face parsers, 19 CelebAMask-HQ classes (0 = background): DBAF's U-Net and BiSeNet.

Both are frozen, pre-trained networks here: BatchNorm always uses its running
statistics (collection 'batch_stats', epsilon 1e-5 as PyTorch), there is no training mode.

- `UNetParser` is the `unet` behind DBAF's parse loss (``parsenet.pth``). It takes the
  image (B, H, W, 3) in [-1, 1] as is (the reference feeds it the generator's output
  without any normalisation) and returns logits (B, H, W, 19). H and W must be
  multiples of 16 (four 2x max-pools, undone by exact 2x transposed convolutions).
- `BiSeNet` is face-parsing.PyTorch's model (``79999_iter.pth``), not used by DBAF's
  losses but the usual source of soft face masks. It takes ImageNet-normalised RGB
  (see `bisenet_inputs`), usually at 512x512, and returns logits (B, H, W, 19).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from dbaf_jax.nn.resize import resize_bilinear_align_corners

NUM_CLASSES = 19
BN_EPS = 1e-5
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PARSE_SIZE = 512  # BiSeNet's training resolution
# CelebAMask-HQ labels 1-13: skin, brows, eyes, glasses, ears, earrings, nose, mouth, lips.
FACE_LABELS = tuple(range(1, 14))
# A face mask's soft edge: a Gaussian of this sigma (of the crop's side), for the photo
# path's masks and iFADIT's background refinement alike; 3 sigma < the box mask's margin.
FEATHER = 0.03


def _batch_norm(name: str) -> nn.BatchNorm:
    return nn.BatchNorm(use_running_average=True, epsilon=BN_EPS, name=name)


def _conv(
    features: int, kernel: int, stride: int, padding: int, use_bias: bool, name: str
) -> nn.Conv:
    # Explicit symmetric padding: PyTorch's, which XLA's 'SAME' differs from at stride 2.
    return nn.Conv(
        features,
        (kernel, kernel),
        (stride, stride),
        padding=((padding, padding),) * 2,
        use_bias=use_bias,
        name=name,
    )


def global_mean(x: jnp.ndarray) -> jnp.ndarray:
    """Spatial mean (B, H, W, C) -> (B, 1, 1, C): `F.avg_pool2d(x, x.shape[2:])`."""
    return jnp.mean(x, axis=(1, 2), keepdims=True)


def resize_nearest(x: jnp.ndarray, out_hw: tuple[int, int]) -> jnp.ndarray:
    """`F.interpolate(mode='nearest')` on (B, H, W, C): source index floor(i * in / out), in float32."""
    for axis, out_size in zip((1, 2), out_hw):
        in_size = x.shape[axis]
        if in_size != out_size:
            scale = np.float32(in_size) / np.float32(out_size)
            index = np.minimum(
                np.floor(np.arange(out_size, dtype=np.float32) * scale).astype(np.int32),
                in_size - 1,
            )
            x = jnp.take(x, jnp.asarray(index), axis=axis)
    return x


class ConvBNReLU(nn.Module):
    """Convolution (explicit padding), inference BatchNorm, ReLU: (B, H, W, Cin) -> (B, H', W', features)."""

    features: int
    kernel: int = 3
    stride: int = 1
    padding: int = 1
    use_bias: bool = False

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = _conv(self.features, self.kernel, self.stride, self.padding, self.use_bias, "conv")(x)
        return nn.relu(_batch_norm("bn")(x))


# DBAF's U-Net ---------------------------------------------------------------------------


class UNetConvBlock(nn.Module):
    """Two 3x3 conv (with bias) + BatchNorm + ReLU: (B, H, W, Cin) -> (B, H, W, features)."""

    features: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = ConvBNReLU(self.features, use_bias=True, name="conv1")(x)
        return ConvBNReLU(self.features, use_bias=True, name="conv2")(x)


class TransposedConv2x2(nn.Module):
    """ConvTranspose2d(kernel 2, stride 2): (B, H, W, Cin) -> (B, 2H, 2W, features).

    The windows do not overlap, so each input pixel spreads into its own 2x2 block:
    ``out[2i + a, 2j + b] = x[i, j] @ kernel[a, b] + bias``. Kernel (2, 2, Cin, features).
    """

    features: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        kernel = self.param(
            "kernel", nn.initializers.lecun_normal(), (2, 2, x.shape[-1], self.features)
        )
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        n, h, w, _ = x.shape
        blocks = jnp.einsum("nijc,abco->niajbo", x, kernel)
        return blocks.reshape(n, 2 * h, 2 * w, self.features) + bias


class UNetUp(nn.Module):
    """Upsample the deeper map 2x, concatenate the skip map before it, conv block."""

    features: int

    @nn.compact
    def __call__(self, skip: jnp.ndarray, deeper: jnp.ndarray) -> jnp.ndarray:
        up = TransposedConv2x2(self.features, name="up")(deeper)
        return UNetConvBlock(self.features, name="conv")(jnp.concatenate([skip, up], axis=-1))


class UNetParser(nn.Module):
    """DBAF's `unet` face parser: image (B, H, W, 3) in [-1, 1] -> logits (B, H, W, num_classes).

    Attributes:
      feature_scale: divides the widths 64..1024; the checkpoint's 4 gives 16/32/64/128/256.
      num_classes: 19 for parsenet.pth.
    """

    feature_scale: int = 4
    num_classes: int = NUM_CLASSES

    @nn.compact
    def __call__(self, images: jnp.ndarray) -> jnp.ndarray:
        widths = [w // self.feature_scale for w in (64, 128, 256, 512, 1024)]
        pool = lambda h: nn.max_pool(h, (2, 2), (2, 2))  # noqa: E731
        skips = []
        x = images
        for level, width in enumerate(widths[:4], start=1):
            x = UNetConvBlock(width, name=f"conv{level}")(x)
            skips.append(x)
            x = pool(x)
        x = UNetConvBlock(widths[4], name="center")(x)
        for level in (4, 3, 2, 1):
            x = UNetUp(widths[level - 1], name=f"up_concat{level}")(skips[level - 1], x)
        return nn.Conv(self.num_classes, (1, 1), name="final")(x)


# BiSeNet ------------------------------------------------------------------------------


def bisenet_inputs(images: jnp.ndarray) -> jnp.ndarray:
    """RGB images (B, H, W, 3) in [-1, 1] -> BiSeNet's input: [0, 1] then ImageNet mean/std.

    Resizing (BiSeNet was trained at 512x512) is the caller's choice.
    """
    unit = (images + 1.0) * 0.5
    return (unit - jnp.asarray(IMAGENET_MEAN, images.dtype)) / jnp.asarray(
        IMAGENET_STD, images.dtype
    )


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv + BN, projection shortcut when the shape changes."""

    features: int
    stride: int = 1

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        residual = ConvBNReLU(self.features, stride=self.stride, name="conv1")(x)
        residual = _batch_norm("bn2")(_conv(self.features, 3, 1, 1, False, "conv2")(residual))
        shortcut = x
        if self.stride != 1 or x.shape[-1] != self.features:
            shortcut = _conv(self.features, 1, self.stride, 0, False, "downsample_conv")(x)
            shortcut = _batch_norm("downsample_bn")(shortcut)
        return nn.relu(shortcut + residual)


class ResNet18Features(nn.Module):
    """ResNet18 without its head: (B, H, W, 3) -> feature maps at 1/8, 1/16, 1/32 (128, 256, 512 ch)."""

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        x = ConvBNReLU(64, kernel=7, stride=2, padding=3, name="stem")(x)
        x = nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
        outputs = []
        for stage, (width, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2)), start=1):
            x = BasicBlock(width, stride, name=f"layer{stage}_0")(x)
            x = BasicBlock(width, 1, name=f"layer{stage}_1")(x)
            outputs.append(x)
        return outputs[1], outputs[2], outputs[3]


class AttentionRefinement(nn.Module):
    """ConvBNReLU, then a channel gate from the global mean (1x1 conv, BN, sigmoid)."""

    features: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        features = ConvBNReLU(self.features, name="conv")(x)
        gate = _conv(self.features, 1, 1, 0, False, "gate_conv")(global_mean(features))
        return features * nn.sigmoid(_batch_norm("gate_bn")(gate))


class ContextPath(nn.Module):
    """ResNet18 + attention refinement, top-down with nearest upsampling.

    (B, H, W, 3) -> (1/8 ResNet map (128 ch), 1/8 context map (128 ch), 1/16 context map (128 ch)).
    """

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        feat8, feat16, feat32 = ResNet18Features(name="resnet")(x)
        context = ConvBNReLU(128, kernel=1, padding=0, name="conv_avg")(global_mean(feat32))
        feat32_sum = (
            AttentionRefinement(128, name="arm32")(feat32) + context
        )  # broadcast == nearest from 1x1
        feat32_up = ConvBNReLU(128, name="conv_head32")(
            resize_nearest(feat32_sum, feat16.shape[1:3])
        )
        feat16_sum = AttentionRefinement(128, name="arm16")(feat16) + feat32_up
        feat16_up = ConvBNReLU(128, name="conv_head16")(
            resize_nearest(feat16_sum, feat8.shape[1:3])
        )
        return feat8, feat16_up, feat32_up


class FeatureFusion(nn.Module):
    """Concatenate, 1x1 ConvBNReLU, squeeze-excite style gate: out = feat * (1 + gate)."""

    features: int

    @nn.compact
    def __call__(self, spatial: jnp.ndarray, context: jnp.ndarray) -> jnp.ndarray:
        feat = ConvBNReLU(self.features, kernel=1, padding=0, name="convblk")(
            jnp.concatenate([spatial, context], axis=-1)
        )
        gate = nn.relu(_conv(self.features // 4, 1, 1, 0, False, "conv1")(global_mean(feat)))
        gate = nn.sigmoid(_conv(self.features, 1, 1, 0, False, "conv2")(gate))
        return feat * gate + feat


class SegmentationHead(nn.Module):
    """3x3 ConvBNReLU then a 1x1 classifier without bias: (B, h, w, C) -> (B, h, w, num_classes)."""

    mid_features: int
    num_classes: int

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        x = ConvBNReLU(self.mid_features, name="conv")(x)
        return _conv(self.num_classes, 1, 1, 0, False, "classifier")(x)


class BiSeNet(nn.Module):
    """face-parsing.PyTorch's BiSeNet: normalised RGB (B, H, W, 3) -> logits (B, H, W, num_classes).

    The ResNet18 1/8 map stands in for the spatial path (as in that repository). Heads are
    upsampled to the input size with bilinear align_corners=True.

    Attributes:
      num_classes: 19 for 79999_iter.pth.
    """

    num_classes: int = NUM_CLASSES

    @nn.compact
    def __call__(
        self, x: jnp.ndarray, with_aux: bool = False
    ) -> jnp.ndarray | Sequence[jnp.ndarray]:
        """Logits (B, H, W, num_classes); with_aux also the two auxiliary heads' (training-time) logits."""
        size = x.shape[1:3]
        feat8, context8, context16 = ContextPath(name="context_path")(x)
        fused = FeatureFusion(256, name="ffm")(feat8, context8)
        logits = resize_bilinear_align_corners(
            SegmentationHead(256, self.num_classes, name="head")(fused), size
        )
        if not with_aux:
            return logits
        aux16 = SegmentationHead(64, self.num_classes, name="head16")(context8)
        aux32 = SegmentationHead(64, self.num_classes, name="head32")(context16)
        return (
            logits,
            resize_bilinear_align_corners(aux16, size),
            resize_bilinear_align_corners(aux32, size),
        )
