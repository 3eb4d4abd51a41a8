"""Mesh and sharding rules on 8 forced host devices (tests/conftest.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from dbaf_jax import sharding


def test_mesh_shapes():
    assert len(jax.devices()) == 8
    mesh = sharding.make_mesh()
    assert mesh.axis_names == ("data", "fsdp") and dict(mesh.shape) == {"data": 8, "fsdp": 1}
    assert dict(sharding.make_mesh(fsdp=4).shape) == {"data": 2, "fsdp": 4}
    assert dict(sharding.make_mesh(data=-1, fsdp=2).shape) == {"data": 4, "fsdp": 2}
    with pytest.raises(ValueError, match="does not divide"):
        sharding.make_mesh(fsdp=3)
    with pytest.raises(ValueError, match="!= 8 devices"):
        sharding.make_mesh(data=2, fsdp=2)


def test_batch_and_replicated_specs():
    mesh = sharding.make_mesh(data=2, fsdp=4)
    assert sharding.batch_sharding(mesh).spec == P(("data", "fsdp"))
    assert sharding.replicated(mesh).spec == P()


@pytest.mark.parametrize(
    "shape, fsdp, min_size, expected",
    [
        ((512, 512), 4, 1, P(None, "fsdp")),  # tie: the later axis
        ((3, 3, 64, 128), 4, 1, P(None, None, None, "fsdp")),
        ((1024, 3), 4, 1, P("fsdp")),
        ((5, 7), 4, 1, P()),  # no divisible axis
        ((512, 512), 4, 2**20, P()),  # small
        ((512, 512), 1, 1, P()),  # no fsdp
        ((), 4, 0, P()),
    ],
)
def test_param_spec(shape, fsdp, min_size, expected):
    assert sharding.param_spec(shape, fsdp, min_size) == expected


def test_param_sharding_tree():
    mesh = sharding.make_mesh(data=2, fsdp=4)
    tree = {"dense": {"kernel": jax.ShapeDtypeStruct((64, 32), jnp.float32), "bias": jnp.zeros(32)}}
    specs = sharding.param_sharding(mesh, tree, min_size=1024)
    assert specs["dense"]["kernel"].spec == P("fsdp") and specs["dense"]["bias"].spec == P()


def mlp_loss(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"]) ** 2)


def test_sharded_computation_equals_unsharded():
    rng = np.random.default_rng(0)
    params = {
        "w1": rng.normal(size=(16, 64)).astype(np.float32),
        "b1": rng.normal(size=(64,)).astype(np.float32),
        "w2": rng.normal(size=(64, 8)).astype(np.float32),
    }
    batch = rng.normal(size=(16, 16)).astype(np.float32)
    expected_loss, expected_grads = jax.jit(jax.value_and_grad(mlp_loss))(params, batch)

    mesh = sharding.make_mesh(data=2, fsdp=4)
    param_shardings = sharding.param_sharding(mesh, params, min_size=256)
    assert param_shardings["w1"].spec == P(None, "fsdp") and param_shardings["b1"].spec == P()
    sharded_params = jax.device_put(params, param_shardings)
    sharded_batch = sharding.put_batch(mesh, batch)
    assert sharded_batch.shape == batch.shape and sharded_batch.sharding.spec == P(("data", "fsdp"))
    assert sharded_params["w1"].addressable_shards[0].data.shape == (16, 16)

    step = jax.jit(
        jax.value_and_grad(mlp_loss),
        in_shardings=(param_shardings, sharding.batch_sharding(mesh)),
        out_shardings=(sharding.replicated(mesh), param_shardings),
    )
    loss, grads = step(sharded_params, sharded_batch)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-6)
    for name in params:
        assert grads[name].sharding == param_shardings[name]
        np.testing.assert_allclose(grads[name], expected_grads[name], rtol=1e-5, atol=1e-6)


def test_put_batch_pytree():
    mesh = sharding.make_mesh()
    batch = {"images": np.ones((8, 4, 4, 3), np.float32), "labels": np.arange(8)}
    placed = sharding.put_batch(mesh, batch)
    assert placed["images"].shape == (8, 4, 4, 3)
    assert len(placed["labels"].addressable_shards) == 8
    np.testing.assert_array_equal(placed["labels"], np.arange(8))
