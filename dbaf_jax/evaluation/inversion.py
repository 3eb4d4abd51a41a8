"""The learned-inversion attack: a small network trained to undo an anonymizer from examples.

A determined attacker who can anonymize faces of their own (or holds pairs from a leak)
trains a network mapping anonymized faces back to originals, then runs it on faces they
want to re-identify. `train_inverter` fits `Inverter` (three 3x3 convolutions, a few
thousand parameters: a floor on what an attacker builds, not a ceiling) with Adam on an
L1 loss over (anonymized, original) pairs; the evaluation scores its outputs on other
faces with the recognisers (`dbaf_jax.evaluation.protocol`).
"""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

LEARNING_RATE = 3e-3
DEFAULT_STEPS = (
    300  # full-batch Adam steps: a floor on an attacker's effort (evaluate --inversion-steps)
)


class Inverter(nn.Module):
    """(B, H, W, 3) in [-1, 1] -> (B, H, W, 3) in [-1, 1]."""

    width: int = 32

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Conv(self.width, (3, 3))(x))
        h = nn.relu(nn.Conv(self.width, (3, 3))(h))
        return jnp.tanh(nn.Conv(3, (3, 3))(h))


def train_inverter(
    anonymized: np.ndarray, originals: np.ndarray, steps: int = 300, seed: int = 0, width: int = 32
) -> Callable[[np.ndarray], np.ndarray]:
    """Fits `Inverter` on the pairs, full batch, ``steps`` Adam steps; anonymized and
    originals (N, H, W, 3) in [-1, 1]. Returns the trained ``invert(images) -> images``."""
    module = Inverter(width)
    x, y = jnp.asarray(anonymized, jnp.float32), jnp.asarray(originals, jnp.float32)
    params = module.init(jax.random.key(seed), x[:1])
    optimizer = optax.adam(LEARNING_RATE)

    def loss(p):
        return jnp.mean(jnp.abs(module.apply(p, x) - y))

    @jax.jit
    def train(params):
        def step(carry, _):
            p, state = carry
            grads = jax.grad(loss)(p)
            updates, state = optimizer.update(grads, state, p)
            return (optax.apply_updates(p, updates), state), None

        (params, _), _ = jax.lax.scan(step, (params, optimizer.init(params)), None, length=steps)
        return params

    params = train(params)
    apply = jax.jit(module.apply)
    return lambda images: np.asarray(apply(params, jnp.asarray(images, jnp.float32)))
