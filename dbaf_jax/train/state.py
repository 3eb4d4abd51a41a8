"""How a run's variables split into trained and frozen, and join again, for every method.

Networks named in ``config.trainable`` train; the rest (the critics, the key generator,
and whatever the config freezes) are ``frozen``: passed to the step as an argument,
replicated, never differentiated and without optimizer state. A method's train state
(`dbaf_jax.train.method.MethodState`) holds the trained ones: DBAF's
`dbaf_jax.train.dbaf.state.TrainState`, iFADIT's `dbaf_jax.train.ifadit.state.PhaseState`.
"""

from __future__ import annotations

import jax
import ml_collections

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.train.method import MethodState, Variables


def joined(frozen: Variables, params: Variables, model_state: Variables) -> Variables:
    """{network: variables}: the frozen networks' and, for each trained network, its
    ``params`` with its ``model_state`` collections (what `split_trainable` took apart)."""
    return {
        **frozen,
        **{
            name: {"params": trained, **model_state.get(name, {})}
            for name, trained in params.items()
        },
    }


def split_trainable(
    config: ml_collections.ConfigDict, variables: Variables, apart: tuple[str, ...] = ()
) -> tuple[Variables, Variables, Variables]:
    """(params of the networks ``config.trainable`` names, their other collections (model
    state), the frozen networks' variables), leaving out the networks in ``apart`` (which
    the caller trains on their own, e.g. the discriminator)."""
    trainable = set(config.trainable)
    unknown = trainable - set(variables)
    if unknown:
        raise ConfigError(
            f"config.trainable names networks this run does not have: {sorted(unknown)}"
        )
    trained = {n: v["params"] for n, v in variables.items() if n in trainable and n not in apart}
    model_state = {
        n: {c: x for c, x in v.items() if c != "params"}
        for n, v in variables.items()
        if n in trained
    }
    frozen = {n: v for n, v in variables.items() if n not in trained and n not in apart}
    return trained, model_state, frozen


def exported_variables(state: MethodState, frozen: Variables) -> Variables:
    """The variables a model directory stores: the fast weights, as the networks run."""
    return jax.device_get(state.variables(frozen))
