"""The train state of DBAF's stages: Ranger on the generator side and on the discriminator.

The run's variables split into trained and frozen by ``config.trainable``
(`dbaf_jax.train.state.split_trainable`); e4e, the critics and the key generator are
frozen.

Ranger's Lookahead keeps two copies of every trained parameter
(``optax.LookaheadParams``): the networks run on ``fast`` (a tree like the networks'
params); ``slow`` and Ranger's moments are kept one array per group of same-shaped
leaves (`dbaf_jax.train.optimizers.ranger`); checkpoints hold both; exported networks
use ``fast``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import flax
import jax
import jax.numpy as jnp
import ml_collections
import optax

from dbaf_jax.models.dbaf.dbaf import Variables
from dbaf_jax.train import optimizers
from dbaf_jax.train.state import joined, split_trainable

DISCRIMINATOR = "discriminator"


class TrainState(flax.struct.PyTreeNode):
    """Everything a step changes.

    step: int32 scalar, steps done.
    generator_params: LookaheadParams: fast, {network: params} for the trained G-side
      networks; slow, grouped by their Ranger (`optimizers.ranger`).
    generator_opt_state: their Ranger state.
    discriminator_params: LookaheadParams: fast, the discriminator's params; slow, grouped.
    discriminator_opt_state: its Ranger state.
    model_state: {network: non-param collections} of trained networks (MAAR's batch_stats,
      the decoder's noise buffers).
    rng: PRNG key data (uint32), for CID's dropout and the training keys.
    """

    step: jax.Array
    generator_params: optax.LookaheadParams
    generator_opt_state: Any
    discriminator_params: optax.LookaheadParams
    discriminator_opt_state: Any
    model_state: dict
    rng: jax.Array

    def variables(self, frozen: Variables, fast_params=None, model_state=None) -> Variables:
        """{network: variables} for the forward pass: the trained networks' fast weights and
        model state (or ``fast_params`` and ``model_state`` in their place) plus the frozen ones."""
        fast_params = self.generator_params.fast if fast_params is None else fast_params
        model_state = self.model_state if model_state is None else model_state
        return {
            **joined(frozen, fast_params, model_state),
            DISCRIMINATOR: {"params": self.discriminator_params.fast},
        }

    def after_generator_update(
        self, optimizer: optimizers.Optimizer, grads, rng: jax.Array, **fields
    ) -> "TrainState":
        """The next step's state: ``grads`` of the fast generator-side params applied by
        ``optimizer``, the step counted, ``rng`` (a typed key) carried on, and any other
        ``fields`` replaced."""
        params, opt_state = optimizer.step(grads, self.generator_opt_state, self.generator_params)
        return self.replace(
            step=self.step + 1,
            rng=jax.random.key_data(rng),
            generator_params=params,
            generator_opt_state=opt_state,
            **fields,
        )


class Optimizers(NamedTuple):
    """The two Ranger instances: generator side and discriminator."""

    generator: optimizers.Optimizer
    discriminator: optimizers.Optimizer


def make_optimizers(config: ml_collections.ConfigDict, generator_side_params) -> Optimizers:
    """Ranger for both sides with the reference's lr; the generator side centralises its
    gradients over the axes PyTorch's tensors imply (`optimizers.reference_centralization`)."""
    if config.optimizer.name != "ranger":
        raise ValueError(
            f"optimizer {config.optimizer.name!r}: only 'ranger' (the reference's) is implemented"
        )
    lr = config.optimizer.learning_rate
    return Optimizers(
        generator=optimizers.ranger(
            lr, centralization_axes=optimizers.reference_centralization(generator_side_params)
        ),
        discriminator=optimizers.ranger(lr),
    )


def create(
    config: ml_collections.ConfigDict,
    variables: Variables,
    rng: jax.Array,
    optimizers_for: Callable[[ml_collections.ConfigDict, Any], Optimizers] = make_optimizers,
) -> tuple[TrainState, Variables, Optimizers]:
    """Splits ``variables`` by ``config.trainable`` -> (TrainState, frozen variables,
    optimizers ``optimizers_for(config, trained generator-side params)``). A run without
    a discriminator network keeps empty discriminator parameters."""
    generator_side, model_state, frozen = split_trainable(config, variables, apart=(DISCRIMINATOR,))
    txs = optimizers_for(config, generator_side)
    g_params, g_opt_state = txs.generator.init(generator_side)
    d_params, d_opt_state = txs.discriminator.init(
        variables[DISCRIMINATOR]["params"] if DISCRIMINATOR in variables else {}
    )
    state = TrainState(
        step=jnp.zeros((), jnp.int32),
        generator_params=g_params,
        generator_opt_state=g_opt_state,
        discriminator_params=d_params,
        discriminator_opt_state=d_opt_state,
        model_state=model_state,
        rng=jax.random.key_data(rng),
    )
    return state, frozen, txs
