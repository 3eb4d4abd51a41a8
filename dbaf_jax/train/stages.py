"""The registry of training methods: one line per model family, naming its stages (or
phases), how its networks are built and how its train state is made. The loop, the
benchmarks and the tests reach a method only through here (`build_networks`,
`create_state`, `build`); docs/methods.md says how a method plugs in.

Each method's training is a folder: DBAF (`dbaf_jax.train.dbaf`) trains in two
adversarial stages (``config.stage`` 1 and 2) with Ranger and a discriminator; iFADIT
(`dbaf_jax.train.ifadit`) in two phases (``config.stage`` its `PHASE1`, `PHASE2`) with
Adam and no discriminator.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

import jax
import ml_collections

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.train.dbaf import networks as dbaf_networks
from dbaf_jax.train.dbaf import state as dbaf_state
from dbaf_jax.train.dbaf.stage1 import Stage1
from dbaf_jax.train.dbaf.stage2 import Stage2
from dbaf_jax.train.ifadit import networks as ifadit_networks
from dbaf_jax.train.ifadit import phases as ifadit_phases
from dbaf_jax.train.ifadit import state as ifadit_state
from dbaf_jax.train.method import MethodNetworks, MethodState, TrainingStage, Variables


class Method(NamedTuple):
    """What the loop needs of a method's training."""

    stages: Mapping[Any, type[TrainingStage[Any]]]  # config.stage -> its stage class
    build_networks: Callable[
        [ml_collections.ConfigDict], MethodNetworks
    ]  # config -> the networks table
    # (config, variables, rng) -> (train state, frozen variables, the optimizers its stages take)
    create_state: Callable[
        [ml_collections.ConfigDict, Variables, jax.Array], tuple[MethodState, Variables, Any]
    ]


METHODS = {
    "dbaf": Method({1: Stage1, 2: Stage2}, dbaf_networks.build, dbaf_state.create),
    "ifadit": Method(ifadit_phases.PHASES, ifadit_networks.build, ifadit_state.create_state),
}


def method(config: ml_collections.ConfigDict) -> Method:
    """The method whose stages hold ``config.stage``."""
    for candidate in METHODS.values():
        if config.stage in candidate.stages:
            return candidate
    known = [str(s) for m in METHODS.values() for s in m.stages]
    raise ConfigError(f"config.stage {config.stage!r}: expected one of {known}")


def build_networks(config: ml_collections.ConfigDict):
    """The modules of ``config``'s method, described by ``config.model``, computing in
    ``config.compute_dtype``."""
    return method(config).build_networks(config)


def build(config: ml_collections.ConfigDict, networks, optimizers: Any) -> TrainingStage:
    """The stage (or phase) ``config.stage`` trains."""
    return method(config).stages[config.stage].from_config(config, networks, optimizers)


def name(config: ml_collections.ConfigDict) -> str:
    """What logs call the run's stage: "stage 1", "stage 2", or an iFADIT phase's name."""
    return config.stage if isinstance(config.stage, str) else f"stage {config.stage}"


def create_state(
    config: ml_collections.ConfigDict, variables: Variables, rng: jax.Array
) -> tuple[MethodState, Variables, Any]:
    """(train state, frozen variables, optimizers) as ``config``'s method makes them:
    DBAF's stages with Ranger and a discriminator (`dbaf.state.create`), iFADIT's phases
    with Adam and no discriminator (`ifadit.state.create_state`)."""
    return method(config).create_state(config, variables, rng)
