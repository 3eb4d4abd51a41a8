"""LPIPS v0.1 (Zhang et al. 2018), as the `lpips` package computes it, on AlexNet or VGG16.

Both images (B, H, W, 3) in [-1, 1] are z-scored with LPIPS's fixed shift and scale,
run through the ImageNet trunk, and compared at five ReLU taps: each tap is divided by
its per-pixel channel norm, the squared difference is weighted per channel by the
learned v0.1 vector (a 1x1 convolution to one channel, no bias), averaged over space,
and the five layer terms are summed. The result is one distance per image pair, (B,);
averaging over the batch (what DBAF's loss does) is left to the loss.

Matches ``lpips.LPIPS(net=..., version='0.1')(in0, in1)`` with its default
``normalize=False``: inputs are expected in [-1, 1], not [0, 1].
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

# LPIPS's ScalingLayer: (x - shift) / scale, per RGB channel.
INPUT_SHIFT = (-0.030, -0.088, -0.188)
INPUT_SCALE = (0.458, 0.448, 0.450)
NORM_EPS = 1e-10

# Channels at the five taps.
TAP_CHANNELS = {"alex": (64, 192, 384, 256, 256), "vgg": (64, 128, 256, 512, 512)}

# VGG16 convolutions per stage (all 3x3, padding 1); a tap after each stage, 2x2 max-pool before the next.
VGG16_STAGES = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


def _conv(features: int, kernel: int, stride: int, padding: int, name: str) -> nn.Conv:
    # Explicit symmetric padding: PyTorch's, which XLA's 'SAME' differs from at stride > 1.
    return nn.Conv(
        features, (kernel, kernel), (stride, stride), padding=((padding, padding),) * 2, name=name
    )


class AlexNetFeatures(nn.Module):
    """torchvision AlexNet `features` up to relu5: (B, H, W, 3) -> the five ReLU outputs.

    Taps relu1..relu5 are (B, h, w, 64 | 192 | 384 | 256 | 256), e.g. 15, 7, 3, 3, 3 pixels for H=64.
    """

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
        pool = lambda h: nn.max_pool(h, (3, 3), (2, 2), padding="VALID")  # noqa: E731
        relu1 = nn.relu(_conv(64, 11, 4, 2, "conv1")(x))
        relu2 = nn.relu(_conv(192, 5, 1, 2, "conv2")(pool(relu1)))
        relu3 = nn.relu(_conv(384, 3, 1, 1, "conv3")(pool(relu2)))
        relu4 = nn.relu(_conv(256, 3, 1, 1, "conv4")(relu3))
        relu5 = nn.relu(_conv(256, 3, 1, 1, "conv5")(relu4))
        return relu1, relu2, relu3, relu4, relu5


class VGG16Features(nn.Module):
    """torchvision VGG16 `features` up to relu5_3: (B, H, W, 3) -> relu1_2, 2_2, 3_3, 4_3, 5_3.

    Taps are (B, H / 2**s, W / 2**s, 64 | 128 | 256 | 512 | 512) for stage s = 0..4.
    """

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
        taps = []
        for stage, widths in enumerate(VGG16_STAGES, start=1):
            if stage > 1:
                x = nn.max_pool(x, (2, 2), (2, 2), padding="VALID")
            for index, width in enumerate(widths, start=1):
                x = nn.relu(_conv(width, 3, 1, 1, f"conv{stage}_{index}")(x))
            taps.append(x)
        return tuple(taps)


def normalize_channels(x: jnp.ndarray) -> jnp.ndarray:
    """x / (||x||_channels + 1e-10) per pixel, as `lpips.normalize_tensor`.

    Where a pixel's feature vector is exactly zero the forward value is the same (zero),
    but the norm's gradient is taken as zero instead of PyTorch's 0/0 = NaN.
    """
    sum_sq = jnp.sum(jnp.square(x), axis=-1, keepdims=True)
    nonzero = sum_sq > 0
    norm = jnp.where(nonzero, jnp.sqrt(jnp.where(nonzero, sum_sq, 1.0)), 0.0)
    return x / (norm + NORM_EPS)


class LPIPS(nn.Module):
    """LPIPS distance between image pairs.

    Attributes:
      net: 'alex' (what DBAF trains with) or 'vgg'.

    Params: ``trunk`` (the ImageNet convolutions) and ``linear_{1..5}`` (C,), the v0.1
    per-channel weights of the five taps.
    """

    net: str = "alex"

    def setup(self):
        if self.net not in TAP_CHANNELS:
            raise ValueError(f"net must be one of {sorted(TAP_CHANNELS)}, got {self.net!r}")
        self.trunk = AlexNetFeatures() if self.net == "alex" else VGG16Features()
        self.linear_weights = [
            self.param(f"linear_{k}", nn.initializers.ones, (channels,))
            for k, channels in enumerate(TAP_CHANNELS[self.net], start=1)
        ]

    def layer_distances(
        self, images0: jnp.ndarray, images1: jnp.ndarray
    ) -> tuple[jnp.ndarray, ...]:
        """Per-layer terms: images (B, H, W, 3) in [-1, 1] -> five (B,) arrays."""
        shift = jnp.asarray(INPUT_SHIFT, images0.dtype)
        scale = jnp.asarray(INPUT_SCALE, images0.dtype)
        batch = images0.shape[0]
        # One trunk pass over both images: the same arithmetic, half the dispatches.
        z = (jnp.concatenate([images0, images1], axis=0) - shift) / scale
        terms = []
        for features, weight in zip(self.trunk(z), self.linear_weights):
            features = normalize_channels(features)
            diff = jnp.square(features[:batch] - features[batch:])
            terms.append(jnp.mean(diff @ weight, axis=(1, 2)))
        return tuple(terms)

    def __call__(self, images0: jnp.ndarray, images1: jnp.ndarray) -> jnp.ndarray:
        """LPIPS distance per pair: images (B, H, W, 3) in [-1, 1] -> (B,)."""
        return sum(self.layer_distances(images0, images1))
