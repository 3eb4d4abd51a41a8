"""Equalized-learning-rate layers of StyleGAN2 (rosinality's layout), NHWC.

An equalized layer stores a weight drawn from N(0, 1/lr_mul^2) and multiplies it at run
time by ``lr_mul / sqrt(fan_in)``; its bias is stored divided by ``lr_mul`` the same way.
The scaling stays in the forward pass (it is not folded into the stored values) so that
an optimizer fine-tuning a converted network sees the parameterisation the PyTorch
training saw: the step on the stored value is what ``lr_mul`` slows down.

Every layer takes ``dtype``, the computation dtype as a string (``"bfloat16"``), or
None to compute in the promoted dtype of the inputs and the float32 parameters.
"""

from __future__ import annotations

import math
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

LEAKY_RELU_SLOPE = 0.2
LEAKY_RELU_GAIN = math.sqrt(2.0)


def cast(dtype: str | None, *arrays):
    """The arrays in ``dtype`` (unchanged when dtype is None); one array -> one array."""
    if dtype is not None:
        arrays = tuple(jnp.asarray(a).astype(dtype) for a in arrays)
    return arrays[0] if len(arrays) == 1 else arrays


def fused_leaky_relu(x: jax.Array, bias: jax.Array | None = None) -> jax.Array:
    """``leaky_relu(x + bias, 0.2) * sqrt(2)``, bias broadcast over the last (channel) axis.

    The sqrt(2) gain keeps the activations' second moment at 1 through the network.
    """
    if bias is not None:
        x = x + bias
    return jnp.where(x >= 0, x, LEAKY_RELU_SLOPE * x) * LEAKY_RELU_GAIN


def pixel_norm(x: jax.Array, eps: float = 1e-8) -> jax.Array:
    """``x * rsqrt(mean(x^2, last axis) + eps)``: each vector scaled to unit RMS."""
    return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps)


def _scaled_normal(divisor: float):
    """Initializer N(0, 1) / divisor (rosinality's ``randn(...).div_(lr_mul)``)."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.normal(key, shape, dtype) / divisor

    return init


class EqualLinear(nn.Module):
    """Equalized dense layer: (..., in) -> (..., features).

    Effective weight ``kernel * lr_mul / sqrt(in)``, effective bias ``bias * lr_mul``.
    The kernel is stored (in, features), the transpose of PyTorch's ``weight``.

    Attributes:
      features: output width.
      use_bias: whether there is a bias.
      bias_init: the stored bias's initial value (1.0 for StyleGAN2's style modulations).
      lr_mul: learning-rate multiplier (0.01 in StyleGAN2's mapping network).
      activation: apply `fused_leaky_relu` with the bias (rosinality's ``"fused_lrelu"``).
      dtype: computation dtype, or None.
    """

    features: int
    use_bias: bool = True
    bias_init: float = 0.0
    lr_mul: float = 1.0
    activation: bool = False
    dtype: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        in_features = x.shape[-1]
        kernel = self.param("kernel", _scaled_normal(self.lr_mul), (in_features, self.features))
        kernel = kernel * (self.lr_mul / math.sqrt(in_features))
        x, kernel = cast(self.dtype, x, kernel)
        y = x @ kernel
        bias = None
        if self.use_bias:
            bias = self.param("bias", nn.initializers.constant(self.bias_init), (self.features,))
            bias = cast(self.dtype, bias * self.lr_mul)
        if self.activation:
            return fused_leaky_relu(y, bias)
        return y if bias is None else y + bias


class EqualConv2d(nn.Module):
    """Equalized convolution: (B, H, W, Cin) -> (B, H', W', features).

    Effective kernel ``kernel / sqrt(Cin * k * k)``; kernel stored (k, k, Cin, features)
    (PyTorch's OIHW ``weight`` transposed). Padding is symmetric, as in PyTorch.

    Attributes:
      features: output channels.
      kernel_size: square kernel size k.
      stride: stride in both directions.
      padding: zero padding on every side.
      use_bias: whether a bias is added.
      dtype: computation dtype, or None.
    """

    features: int
    kernel_size: int
    stride: int = 1
    padding: int = 0
    use_bias: bool = True
    dtype: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        in_features = x.shape[-1]
        k = self.kernel_size
        kernel = self.param(
            "kernel", nn.initializers.normal(1.0), (k, k, in_features, self.features)
        )
        kernel = kernel / math.sqrt(in_features * k * k)
        x, kernel = cast(self.dtype, x, kernel)
        y = conv2d(x, kernel, stride=self.stride, padding=(self.padding, self.padding))
        if self.use_bias:
            bias = self.param("bias", nn.initializers.zeros, (self.features,))
            y = y + cast(self.dtype, bias)
        return y


def conv2d(
    x: jax.Array, kernel: jax.Array, stride: int = 1, padding: Sequence[int] = (0, 0)
) -> jax.Array:
    """Plain cross-correlation, NHWC x HWIO, with explicit (before, after) padding per side."""
    return jax.lax.conv_general_dilated(
        x,
        kernel,
        window_strides=(stride, stride),
        padding=(tuple(padding), tuple(padding)),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )
