"""iFADIT's Identity Compensation Layer (ICL, the paper's C in eq. 10).

The identity ArcFace reads from an anonymized image differs slightly from the
anonymized identity it was generated from; before the flow's inverse, a four-layer
MLP corrects it. It is written as a residual correction ``z + MLP(z)`` whose last
layer starts at zero, so an untrained ICL passes the identity through unchanged.
"""

from __future__ import annotations

import flax.linen as nn
import jax

LEAKY_RELU_SLOPE = 0.2


class IdentityCompensation(nn.Module):
    """identity (B, features) -> corrected identity (B, features).

    Attributes:
      features: identity width (ArcFace's 512).
      hidden: width of the three hidden layers.
      layers: Dense layers of the MLP.
    """

    features: int = 512
    hidden: int = 512
    layers: int = 4

    @nn.compact
    def __call__(self, identity: jax.Array) -> jax.Array:
        x = identity
        for i in range(self.layers - 1):
            x = nn.leaky_relu(nn.Dense(self.hidden, name=f"dense_{i}")(x), LEAKY_RELU_SLOPE)
        last = nn.Dense(
            self.features, kernel_init=nn.initializers.zeros, name=f"dense_{self.layers - 1}"
        )
        return identity + last(x)
