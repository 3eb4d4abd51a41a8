"""The train state of iFADIT's phases: plain Adam on the trained networks, no discriminator."""

from __future__ import annotations

from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import optax

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.models.ifadit.ifadit import Variables
from dbaf_jax.train.state import joined, split_trainable


class PhaseState(flax.struct.PyTreeNode):
    """Everything a phase's step changes (no discriminator, plain Adam).

    step: int32 scalar, steps done.
    params: {network: params} of the trained networks (``config.trainable``).
    opt_state: their Adam state.
    model_state: {network: non-param collections} of the trained networks.
    rng: PRNG key data (uint32), for the training keys.
    """

    step: jax.Array
    params: dict
    opt_state: Any
    model_state: dict
    rng: jax.Array

    def variables(self, frozen: Variables, params=None) -> Variables:
        """{network: variables} for the forward pass: the trained networks' parameters
        (or ``params`` in their place) and model state, plus the frozen ones."""
        return joined(frozen, self.params if params is None else params, self.model_state)


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
    """Adam with the paper's b1 = 0, b2 = 0.999 (configs/ifadit/phases.py)."""
    if config.optimizer.name != "adam":
        raise ConfigError(
            f"optimizer {config.optimizer.name!r}: iFADIT trains with 'adam' (the paper's)"
        )
    return optax.adam(
        config.optimizer.learning_rate, b1=config.optimizer.b1, b2=config.optimizer.b2
    )


def create_state(
    config: ml_collections.ConfigDict, variables: Variables, rng: jax.Array
) -> tuple[PhaseState, Variables, optax.GradientTransformation]:
    """(phase state, frozen variables, Adam): ``variables`` split by ``config.trainable``."""
    params, model_state, frozen = split_trainable(config, variables)
    optimizer = make_optimizer(config)
    state = PhaseState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        opt_state=optimizer.init(params),
        model_state=model_state,
        rng=jax.random.key_data(rng),
    )
    return state, frozen, optimizer
