"""iFADIT's mapping network M: identity vector and W+ attribute code -> W+ latent code.

The paper's eq. 2: the identity vector is replicated once per W+ row, concatenated
with each row of the attribute code, and a two-layer MLP maps each row to a W+ latent
(one MLP shared by every row).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

LEAKY_RELU_SLOPE = 0.2


class IdentityAttributeMapper(nn.Module):
    """identity (B, Dz), attributes (B, L, D) -> latents (B, L, D).

    Attributes:
      style_dim: D, the generator's latent width (512).
      hidden: width of the hidden layer.
    """

    style_dim: int = 512
    hidden: int = 1024

    @nn.compact
    def __call__(self, identity: jax.Array, attributes: jax.Array) -> jax.Array:
        rows = jnp.broadcast_to(identity[:, None, :], (*attributes.shape[:2], identity.shape[-1]))
        x = jnp.concatenate([rows, attributes], axis=-1)
        x = nn.leaky_relu(nn.Dense(self.hidden, name="dense_0")(x), LEAKY_RELU_SLOPE)
        return nn.Dense(self.style_dim, name="dense_1")(x)
