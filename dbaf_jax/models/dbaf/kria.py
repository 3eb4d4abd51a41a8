"""KRIA: Key-authorized Reversible Identity Anonymization (the reference's ``AnonymizationNet``).

One cMLP per latent group (coarse, medium, fine: 4/4/6 at 256 px), applied to every
latent of its group separately. Its input per latent is ``concat(identity_code, key)``,
identity first (2 * style_dim); the layers, as the reference builds them:
EqualLinear 2d -> 4d -> 2d -> d, then ``extra_layers`` (4) EqualLinear d -> d, all with
lr_mul 0.01 and the fused leaky ReLU, then a plain Linear d -> d (8 layers for d = 512:
1024 -> 2048 -> 1024 -> 512 -> 512 x 4 -> 512; the paper says seven).

How anonymization and recovery compose it with CID's codes: `dbaf_jax.models.dbaf.dbaf`
and docs/reference_code.md.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from dbaf_jax.models.stylegan2 import LATENT_GROUPS
from dbaf_jax.nn.equalized import EqualLinear


class ConditionalMLP(nn.Module):
    """The reference's ``cMLP``: (..., 2 * style_dim) -> (..., style_dim)."""

    style_dim: int = 512
    extra_layers: int = 4
    lr_mul: float = 0.01

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        d = self.style_dim
        widths = (4 * d, 2 * d, d) + (d,) * self.extra_layers
        for j, features in enumerate(widths):
            x = EqualLinear(
                features, lr_mul=self.lr_mul, activation=True, name=f"equal_linear_{j}"
            )(x)
        return nn.Dense(d, name="linear")(x)


class KRIA(nn.Module):
    """Identity code + key -> the anonymized (or, applied again, recovered) identity code.

    Call: ``kria.apply(variables, identity_code, key)`` with identity_code
    (B, n_latent, style_dim) and key (B or 1, n_latent, style_dim), n_latent =
    sum(groups); returns (B, n_latent, style_dim).
    """

    GROUP_NAMES = ("coarse", "medium", "fine")

    style_dim: int = 512
    groups: tuple[int, ...] = LATENT_GROUPS
    extra_layers: int = 4
    lr_mul: float = 0.01

    @nn.compact
    def __call__(self, identity_code: jnp.ndarray, key: jnp.ndarray) -> jnp.ndarray:
        if len(self.groups) != len(self.GROUP_NAMES):
            raise ValueError(
                f"groups must be three sizes (coarse, medium, fine), got {self.groups}"
            )
        n_latent = sum(self.groups)
        if identity_code.shape[1:] != (n_latent, self.style_dim):
            raise ValueError(
                f"identity_code must be (B, {n_latent}, {self.style_dim}), got {identity_code.shape}"
            )
        key = jnp.broadcast_to(key, identity_code.shape)
        x = jnp.concatenate([identity_code, key], axis=-1)
        outputs, start = [], 0
        for name, size in zip(self.GROUP_NAMES, self.groups):
            cmlp = ConditionalMLP(
                self.style_dim, self.extra_layers, self.lr_mul, name=f"cmlp_{name}"
            )
            outputs.append(cmlp(x[:, start : start + size]))
            start += size
        return jnp.concatenate(outputs, axis=1)
