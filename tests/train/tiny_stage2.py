"""The tiny stage-2 networks' random variables, drawn once per test process.

tests/train/test_initialization.py and test_step_precision.py both start from them, and
their init program compiles for about 45 s on 2 cores; kept as host arrays, they outlive
the compiled programs each test file drops (tests/conftest.py), so a worker that runs both
files draws them once."""

import functools

import jax

from configs.dbaf import stage2
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train import stages

CONFIG = stage2.get_config("tiny")
SIZE = CONFIG.model.size  # its image side


@functools.cache
def _drawn() -> dict:
    networks = stages.build_networks(CONFIG)
    return jax.device_get(networks_lib.init_variables(networks, jax.random.PRNGKey(0), SIZE))


def random_variables() -> dict:
    """``configs/dbaf/stage2.py:tiny``'s variables from ``PRNGKey(0)``, float32 whatever the
    compute dtype, as host arrays; a new tree each call (its arrays shared, read-only)."""
    return jax.tree.map(lambda leaf: leaf, _drawn())
