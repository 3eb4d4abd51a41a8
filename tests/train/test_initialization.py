"""A run's start (`dbaf_jax.train.initialization`): the jitted state is the eager one, bit
for bit, and owns its buffers."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from configs.dbaf import stage2
from dbaf_jax.train import initialization, stages
from dbaf_jax.train import networks as networks_lib


def tiny_config(dtype: str):
    config = stage2.get_config("tiny")
    config.compute_dtype = dtype
    return config


def assert_trees_equal(actual, expected) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for (path, a), b in zip(jax.tree.leaves_with_path(actual), jax.tree.leaves(expected)):
        assert a.dtype == b.dtype, jax.tree_util.keystr(path)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), jax.tree_util.keystr(path))


@pytest.fixture(scope="module")
def variables():
    """The tiny networks' random variables (float32 whatever the compute dtype)."""
    nets = stages.build_networks(tiny_config("float32"))
    return networks_lib.init_variables(nets, jax.random.PRNGKey(0), 64)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_jitted_state_equals_the_eager_one(variables, dtype):
    config = tiny_config(dtype)
    nets = stages.build_networks(config)
    rng = jax.random.PRNGKey(1)
    state, frozen, computed, _ = initialization.created_state(config, nets, variables, rng)
    eager_state, eager_frozen, _ = stages.create_state(config, variables, rng)
    assert_trees_equal(state, eager_state)
    assert_trees_equal(frozen, eager_frozen)
    assert_trees_equal(computed, nets.model.compute_variables(eager_frozen))
    if dtype == "bfloat16":
        assert any(x.dtype == jax.numpy.bfloat16 for x in jax.tree.leaves(computed))


def test_the_state_owns_its_buffers():
    """The step donates the state: no buffer of it may be another leaf's or a frozen network's."""
    config = tiny_config("float32")
    _, run = initialization.random_setup(config, jax.random.PRNGKey(0))
    pointers = [x.unsafe_buffer_pointer() for x in jax.tree.leaves(run.state)]
    assert len(set(pointers)) == len(pointers)
    frozen = {x.unsafe_buffer_pointer() for x in jax.tree.leaves(run.frozen)}
    assert not frozen & set(pointers)
