"""BatchNorm with PyTorch's training semantics (channels last).

Flax's ``nn.BatchNorm`` updates its running variance with the biased batch variance;
PyTorch's ``BatchNorm2d`` normalises with the biased variance but accumulates the
UNBIASED one (n / (n - 1)). Networks that keep training from PyTorch checkpoints
(MAAR's spatial gate) need PyTorch's rule so their running statistics evolve as the
reference's do. Variables: params ``scale``, ``bias``; batch_stats ``mean``, ``var``.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class BatchNorm(nn.Module):
    """Normalises over every axis but the last (B, H, W, C) -> (B, H, W, C).

    ``momentum`` follows Flax's convention, the weight of the old running value:
    PyTorch's ``momentum=0.01`` is ``momentum=0.99`` here. With ``train=True`` the
    batch statistics normalise and the running statistics are updated (pass
    ``mutable=['batch_stats']``); with ``train=False`` the running statistics
    normalise. Under ``jax.jit`` with a data-sharded batch the statistics are those of
    the global batch.
    """

    momentum: float = 0.9
    epsilon: float = 1e-5

    @nn.compact
    def __call__(self, x: jnp.ndarray, train: bool) -> jnp.ndarray:
        channels = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (channels,))
        bias = self.param("bias", nn.initializers.zeros, (channels,))
        running_mean = self.variable("batch_stats", "mean", jnp.zeros, (channels,))
        running_var = self.variable("batch_stats", "var", jnp.ones, (channels,))
        if train:
            axes = tuple(range(x.ndim - 1))
            mean = x.mean(axes)
            var = jnp.square(x - mean).mean(axes)
            if not self.is_initializing():
                count = x.size // channels
                unbiased = jax.lax.stop_gradient(var) * (count / max(count - 1, 1))
                running_mean.value = self.momentum * running_mean.value + (
                    1 - self.momentum
                ) * jax.lax.stop_gradient(mean)
                running_var.value = (
                    self.momentum * running_var.value + (1 - self.momentum) * unbiased
                )
        else:
            # Running statistics stay float32 (see dbaf_jax.core.precision); normalise in x's dtype.
            mean, var = running_mean.value.astype(x.dtype), running_var.value.astype(x.dtype)
        return (x - mean) * jax.lax.rsqrt(var + self.epsilon) * scale + bias
