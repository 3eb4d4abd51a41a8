"""iFADIT's Secure Identity Flow (SIF): a key-conditioned invertible map of identity vectors.

The flow splits an identity vector z (B, D) into halves (z1, z2) and runs N secure
affine coupling blocks (SACBs, RealNVP's coupling with the key concatenated to every
coupling function's input; the iFADIT paper's eqs. 5-6):

    z2 <- z2 * exp(a(omega([z1, k]))) + phi([z1, k])
    z1 <- z1 * exp(a(rho([z2, k])))   + eta([z2, k])

and the inverse undoes the blocks in reverse order with the same weights (eqs. 7-8),
so ``inverse(forward(z, k), k) == z`` up to float rounding for any weights, while a
different key gives a different map. ``a`` bounds the log-scale (`bounded_log_scale`).
docs/ifadit.md gives the sizes the paper leaves open and why.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

LEAKY_RELU_SLOPE = 0.2


def bounded_log_scale(s: jax.Array, clamp: float) -> jax.Array:
    """The paper's "Sigmoid multiplied by a constant factor", centred: ``clamp * (2 sigmoid(s) - 1)``.

    Centring keeps 0 -> 0 (scale 1) and lets a block shrink as well as grow its
    half (scale in [exp(-clamp), exp(clamp)]); the plain ``clamp * sigmoid`` would
    only ever grow it, so the flow's outputs would inflate block after block.
    """
    return clamp * (2.0 * jax.nn.sigmoid(s) - 1.0)


class CouplingFunction(nn.Module):
    """One of a SACB's four functions: [half, key] (B, D/2 + K) -> (B, D/2).

    An MLP of ``depth`` Dense layers, LeakyReLU(0.2) between them.
    """

    features: int
    hidden: int
    depth: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i in range(self.depth - 1):
            x = nn.leaky_relu(nn.Dense(self.hidden, name=f"dense_{i}")(x), LEAKY_RELU_SLOPE)
        return nn.Dense(self.features, name=f"dense_{self.depth - 1}")(x)


class SecureAffineCoupling(nn.Module):
    """One SACB on the halves (B, D/2) each, conditioned on the key (B, K)."""

    half: int
    hidden: int
    depth: int
    clamp: float

    def setup(self):
        make = lambda: CouplingFunction(self.half, self.hidden, self.depth)  # noqa: E731
        self.omega, self.phi, self.rho, self.eta = make(), make(), make(), make()

    def __call__(self, z1: jax.Array, z2: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Eqs. 5-6."""
        x = jnp.concatenate([z1, key], axis=-1)
        z2 = z2 * jnp.exp(bounded_log_scale(self.omega(x), self.clamp)) + self.phi(x)
        x = jnp.concatenate([z2, key], axis=-1)
        z1 = z1 * jnp.exp(bounded_log_scale(self.rho(x), self.clamp)) + self.eta(x)
        return z1, z2

    def inverse(self, z1: jax.Array, z2: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Eqs. 7-8: undoes `__call__` with the same key."""
        x = jnp.concatenate([z2, key], axis=-1)
        z1 = (z1 - self.eta(x)) * jnp.exp(-bounded_log_scale(self.rho(x), self.clamp))
        x = jnp.concatenate([z1, key], axis=-1)
        z2 = (z2 - self.phi(x)) * jnp.exp(-bounded_log_scale(self.omega(x), self.clamp))
        return z1, z2


class SecureIdentityFlow(nn.Module):
    """SIF: identity (B, identity_dim) and key (B, key_dim) -> transformed identity (B, identity_dim).

    ``__call__`` anonymizes (T), ``inverse`` recovers (T^-1) with the same parameters.

    Attributes:
      identity_dim: width of the identity vector (ArcFace's 512); even.
      key_dim: width of the key vector (the key generator's style_dim, 512).
      blocks: number of SACBs (N).
      hidden: width of the coupling MLPs' hidden layers.
      depth: Dense layers per coupling MLP.
      clamp: bound of the log-scales (`bounded_log_scale`).
    """

    identity_dim: int = 512
    key_dim: int = 512
    blocks: int = 4
    hidden: int = 512
    depth: int = 3
    clamp: float = 2.0

    def setup(self):
        if self.identity_dim % 2:
            raise ValueError(
                f"identity_dim must be even to split in halves, got {self.identity_dim}"
            )
        self.couplings = [
            SecureAffineCoupling(self.identity_dim // 2, self.hidden, self.depth, self.clamp)
            for _ in range(self.blocks)
        ]

    def _halves(self, z: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        if z.shape[-1] != self.identity_dim or key.shape[-1] != self.key_dim:
            raise ValueError(
                f"expected identity (B, {self.identity_dim}) and key (B, {self.key_dim}), got {z.shape}, {key.shape}"
            )
        key = jnp.broadcast_to(key, (*z.shape[:-1], self.key_dim))
        return z[..., : self.identity_dim // 2], z[..., self.identity_dim // 2 :], key

    def __call__(self, z: jax.Array, key: jax.Array) -> jax.Array:
        z1, z2, key = self._halves(z, key)
        for coupling in self.couplings:
            z1, z2 = coupling(z1, z2, key)
        return jnp.concatenate([z1, z2], axis=-1)

    def inverse(self, z: jax.Array, key: jax.Array) -> jax.Array:
        z1, z2, key = self._halves(z, key)
        for coupling in reversed(self.couplings):
            z1, z2 = coupling.inverse(z1, z2, key)
        return jnp.concatenate([z1, z2], axis=-1)
