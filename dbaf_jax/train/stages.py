"""The stage a config trains: ``config.stage`` -> its `AdversarialStage`."""

from __future__ import annotations

import ml_collections

from dbaf_jax.errors import ConfigError
from dbaf_jax.train.adversarial import AdversarialStage
from dbaf_jax.train.networks import Networks
from dbaf_jax.train.stage1 import Stage1
from dbaf_jax.train.stage2 import Stage2
from dbaf_jax.train.state import Optimizers

STAGES = {1: Stage1, 2: Stage2}


def build(config: ml_collections.ConfigDict, networks: Networks, optimizers: Optimizers) -> AdversarialStage:
    if config.stage not in STAGES:
        raise ConfigError(f"config.stage {config.stage!r}: expected one of {sorted(STAGES)}")
    return STAGES[config.stage].from_config(config, networks, optimizers)
