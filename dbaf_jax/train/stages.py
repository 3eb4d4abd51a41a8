"""The stage a config trains: ``config.stage`` -> its `AdversarialStage` (DBAF's stages 1
and 2) or iFADIT phase (``'ifadit1'``, ``'ifadit2'``: `dbaf_jax.train.ifadit`), and the
train state it starts from."""

from __future__ import annotations

import ml_collections

from dbaf_jax.errors import ConfigError
import jax

from dbaf_jax.models.dbaf import Variables
from dbaf_jax.train import ifadit
from dbaf_jax.train import state as state_lib
from dbaf_jax.train.adversarial import AdversarialStage
from dbaf_jax.train.networks import IFADITNetworks, Networks
from dbaf_jax.train.stage1 import Stage1
from dbaf_jax.train.stage2 import Stage2
from dbaf_jax.train.state import Optimizers

STAGES = {1: Stage1, 2: Stage2, **ifadit.PHASES}


def build(
    config: ml_collections.ConfigDict, networks: Networks | IFADITNetworks, optimizers: Optimizers
) -> AdversarialStage | ifadit.Phase:
    if config.stage not in STAGES:
        raise ConfigError(f"config.stage {config.stage!r}: expected one of {[str(s) for s in STAGES]}")
    return STAGES[config.stage].from_config(config, networks, optimizers)


def name(config: ml_collections.ConfigDict) -> str:
    """What logs call the run's stage: "stage 1", "stage 2", or an iFADIT phase's name."""
    return config.stage if isinstance(config.stage, str) else f"stage {config.stage}"


def create_state(
    config: ml_collections.ConfigDict, variables: Variables, rng: jax.Array
) -> tuple[state_lib.TrainState, Variables, Optimizers]:
    """(train state, frozen variables, optimizers): iFADIT's phases train with Adam and no
    discriminator (`ifadit.create_state`), DBAF's stages with Ranger (`state.create`)."""
    if config.stage in ifadit.PHASES:
        return ifadit.create_state(config, variables, rng)
    return state_lib.create(config, variables, rng)
