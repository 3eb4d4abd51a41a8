"""A run's start (`dbaf_jax.train.initialization`): the jitted state is the eager one, bit
for bit, and owns its buffers."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from configs.dbaf import stage2
from dbaf_jax.storage import model_directory
from dbaf_jax.train import initialization, stages
from dbaf_jax.train import networks as networks_lib
from tests.train import tiny_stage2


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
    return tiny_stage2.random_variables()


@pytest.mark.slow  # its variables fixture: the random networks' init program, 46 s on 2 cores
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
    nets = stages.build_networks(config)
    run = initialization.setup(config, nets, tiny_stage2.random_variables(), jax.random.PRNGKey(0))
    pointers = [x.unsafe_buffer_pointer() for x in jax.tree.leaves(run.state)]
    assert len(set(pointers)) == len(pointers)
    frozen = {x.unsafe_buffer_pointer() for x in jax.tree.leaves(run.frozen)}
    assert not frozen & set(pointers)


@pytest.mark.slow
def test_each_stored_network_is_read_once_and_nothing_random_is_drawn(variables, tmp_path):
    """Stage 2 from converted networks (``model_dir``) and a stage-1 export (``init_from``):
    each network comes from the last source that holds it, each stored network is read
    once (the decoder and the key generator share ``generator``; the export's e4e
    replaces the converted one, which is not read), no random program runs when every
    network is loaded, and the variables are those of loading every source in order."""
    config = tiny_config("float32")
    nets = stages.build_networks(config)
    built = networks_lib.modules(nets)
    exported = jax.tree.map(lambda leaf: leaf + 1, variables)  # unlike the converted values
    converted = tmp_path / "converted"
    for name, sub_dir in nets.pretrained.items():
        if not (converted / sub_dir).exists():
            model_directory.save_network(converted / sub_dir, built[name], variables[name])
    export = tmp_path / "stage1" / initialization.MODEL_EXPORT
    for name in ("e4e", "cid", "maar", "kria"):
        model_directory.save_network(export / name, built[name], exported[name])
    config.model_dir, config.init_from = str(converted), str(export.parent)

    with pytest.MonkeyPatch.context() as patch:
        read, drawn = [], []
        load_network = model_directory.load_network
        patch.setattr(model_directory, "load_network", lambda p: read.append(p) or load_network(p))
        patch.setattr(networks_lib, "init_variables", lambda *args: drawn.append(args))
        loaded = initialization.initial_variables(config, nets, jax.random.PRNGKey(0))
    assert not drawn and len(read) == len(set(read))
    assert export / "e4e" in read and converted / "e4e" not in read
    expected = networks_lib.load_pretrained(nets, {}, converted, nets.pretrained)
    expected = networks_lib.load_pretrained(
        nets, expected, export, {n: n for n in ("e4e", "cid", "maar", "kria")}
    )
    assert set(loaded) == set(built)
    assert_trees_equal(loaded, expected)
    run = initialization.setup(config, nets, loaded, jax.random.PRNGKey(1))
    pointers = [x.unsafe_buffer_pointer() for x in jax.tree.leaves(run.state)]
    assert len(set(pointers)) == len(pointers)
    assert not {x.unsafe_buffer_pointer() for x in jax.tree.leaves(run.frozen)} & set(pointers)
