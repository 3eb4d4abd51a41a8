"""MAAR: Multi-scale Attentional Attribute Retention (the reference's ``AttrBlock``).

Three e4e feature maps, c3 (B, 16, 16, 512), c2 (B, 32, 32, 256) and c1
(B, 64, 64, 128) at 256 px, are each projected to ``channels`` (512) by a 1x1
convolution with bias and re-weighted by attention. The three outputs replace the
generator's noise inputs 3-4 (16x16), 5-6 (32x32) and 7-8 (64x64): see
`dbaf_jax.models.dbaf.dbaf.DBAF.noise_inputs`.

``variant='reference'`` is the authors' code: CBAM after the projection,
- channel gate: spatial average- and max-pooling, each through one shared MLP
  (Linear C -> C/16, ReLU, Linear C/16 -> C, both with bias), summed, sigmoid,
  multiplied into the map;
- spatial gate on that result: per-pixel channel max and channel mean,
  concatenated in that order, 7x7 convolution 2 -> 1 without bias, BatchNorm
  (eps 1e-5, PyTorch momentum 0.01), sigmoid, multiplied into the map.

``variant='paper'`` follows the paper's equations (6)-(8) literally, with X the
projected map M W (the same 1x1 convolution, with its bias):
- (6) M' = sigmoid(Phi_CA(Psi_CME(X) + Psi_CAE(X))): Psi_CME / Psi_CAE are the max /
  mean ACROSS CHANNELS at each pixel, repeated along the channels to (k, k, d);
  Phi_CA is one dense layer d -> d. Because its input is constant along the channels,
  the layer is evaluated as ``s * kernel.sum(0) + bias`` with s the (k, k, 1) pooled
  map: the same function and the same parameters as the dense layer on the repeated
  input, without a d x d product per pixel;
- (7) M_bar = sigmoid(Phi_SA([Psi_SME(M'), Psi_SAE(M')])): max / mean OVER THE PIXELS
  of M' per channel, concatenated (2d), one dense layer 2d -> d, repeated over the
  pixels;
- (8) output = M_bar * M' * X.
The paper names the gates the other way round from CBAM (its "channel attention"
pools across channels) and computes M_bar from the weights M', not from the
re-weighted map; the port keeps both as written. It has no BatchNorm.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from dbaf_jax.nn.batch_norm import BatchNorm

VARIANTS = ("reference", "paper")


class ChannelGate(nn.Module):
    """CBAM channel attention: x (B, H, W, C) -> x * sigmoid(MLP(avg) + MLP(max))."""

    reduction: int = 16

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        channels = x.shape[-1]
        hidden = nn.Dense(channels // self.reduction, name="hidden")
        out = nn.Dense(channels, name="out")
        mlp = lambda v: out(nn.relu(hidden(v)))  # noqa: E731 - one MLP shared by both poolings
        gate = nn.sigmoid(mlp(x.mean(axis=(1, 2))) + mlp(x.max(axis=(1, 2))))
        return x * gate[:, None, None, :]


class SpatialGate(nn.Module):
    """CBAM spatial attention: x (B, H, W, C) -> x * sigmoid(BN(conv7x7([max_c, mean_c])))."""

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool) -> jnp.ndarray:
        pooled = jnp.concatenate(
            [x.max(axis=-1, keepdims=True), x.mean(axis=-1, keepdims=True)], axis=-1
        )
        logits = nn.Conv(1, (7, 7), padding=3, use_bias=False, name="conv")(pooled)
        logits = BatchNorm(momentum=0.99, epsilon=1e-5, name="bn")(logits, train)
        return x * nn.sigmoid(logits)


class CBAM(nn.Module):
    """Channel gate then spatial gate, (B, H, W, C) -> (B, H, W, C)."""

    reduction: int = 16

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool) -> jnp.ndarray:
        x = ChannelGate(self.reduction, name="channel_gate")(x)
        return SpatialGate(name="spatial_gate")(x, train)


class PaperAttention(nn.Module):
    """The paper's eqs. (6)-(8) (see the module docstring), (B, H, W, d) -> (B, H, W, d)."""

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        d = x.shape[-1]
        pooled = x.max(axis=-1, keepdims=True) + x.mean(axis=-1, keepdims=True)  # (B, H, W, 1)
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (d, d))
        bias = self.param("bias", nn.initializers.zeros, (d,))
        channel_weights = nn.sigmoid(pooled * kernel.sum(axis=0) + bias)  # eq. (6), M'
        summary = jnp.concatenate(
            [channel_weights.max(axis=(1, 2)), channel_weights.mean(axis=(1, 2))], axis=-1
        )
        spatial_weights = nn.sigmoid(nn.Dense(d, name="spatial_mlp")(summary))[
            :, None, None, :
        ]  # eq. (7)
        return spatial_weights * channel_weights * x  # eq. (8)


class MAAR(nn.Module):
    """Attribute maps for the generator's noise inputs 3-8.

    Call: ``m16, m32, m64 = maar.apply(variables, c3, c2, c1)`` with the e4e maps
    (B, 16, 16, *), (B, 32, 32, *), (B, 64, 64, *); each output has ``channels``
    channels at its input's resolution. ``train=True`` uses batch statistics in the
    reference variant's BatchNorm and updates its running statistics (apply with
    ``mutable=['batch_stats']``); ``train=False`` uses the running statistics.
    """

    channels: int = 512
    reduction: int = 16
    variant: str = "reference"

    @nn.compact
    def __call__(
        self, c3: jnp.ndarray, c2: jnp.ndarray, c1: jnp.ndarray, train: bool = False
    ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, not {self.variant!r}")
        outputs = []
        for name, features in (("c3", c3), ("c2", c2), ("c1", c1)):
            x = nn.Conv(self.channels, (1, 1), name=f"conv_{name}")(features)
            if self.variant == "reference":
                x = CBAM(self.reduction, name=f"cbam_{name}")(x, train)
            else:
                x = PaperAttention(name=f"attention_{name}")(x)
            outputs.append(x)
        return tuple(outputs)
