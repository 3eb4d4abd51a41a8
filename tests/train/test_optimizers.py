"""Ranger against a float64 NumPy re-statement of the reference's update (models/ranger.py)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dbaf_jax.train import optimizers
from tests.parity import assert_parity


def reference_ranger(
    torch_params, grad_fn, steps, lr, weight_decay=0.0, alpha=0.5, k=6, b1=0.95, b2=0.999, eps=1e-5
):
    """Ranger 20.4.11 as the reference runs it, on torch-layout float64 arrays."""
    params = {name: p.astype(np.float64).copy() for name, p in torch_params.items()}
    slow = {name: p.copy() for name, p in params.items()}
    m = {name: np.zeros_like(p) for name, p in params.items()}
    v = {name: np.zeros_like(p) for name, p in params.items()}
    trajectory = []
    for t in range(1, steps + 1):
        grads = grad_fn(params)
        for name, p in params.items():
            g = grads[name].copy()
            if g.ndim > 1:
                g -= g.mean(axis=tuple(range(1, g.ndim)), keepdims=True)
            v[name] = b2 * v[name] + (1 - b2) * g * g
            m[name] = b1 * m[name] + (1 - b1) * g
            b2t = b2**t
            n_max = 2 / (1 - b2) - 1
            n_sma = n_max - 2 * t * b2t / (1 - b2t)
            if n_sma > 5:
                step = math.sqrt(
                    (1 - b2t)
                    * (n_sma - 4)
                    / (n_max - 4)
                    * (n_sma - 2)
                    / n_sma
                    * n_max
                    / (n_max - 2)
                )
                step /= 1 - b1**t
            else:
                step = 1.0 / (1 - b1**t)
            if weight_decay:
                p += -weight_decay * lr * p
            if n_sma > 5:
                p += -step * lr * m[name] / (np.sqrt(v[name]) + eps)
            else:
                p += -step * lr * m[name]
            if t % k == 0:
                slow[name] += alpha * (p - slow[name])
                p[...] = slow[name]
        trajectory.append({name: p.copy() for name, p in params.items()})
    return trajectory


# Flax layout <- torch layout, per parameter.
TO_FLAX = {
    "conv": lambda w: w.transpose(2, 3, 1, 0),  # (O, I, kh, kw) -> (kh, kw, I, O)
    "dense": lambda w: w.T,  # (out, in) -> (in, out)
    "modulated": lambda w: w[0].transpose(2, 3, 1, 0),  # rosinality (1, O, I, k, k) -> (k, k, I, O)
    "to_rgb_bias": lambda b: b.reshape(-1),  # (1, 3, 1, 1) -> (3,)
    "bias": lambda b: b,
}
TORCH_SHAPES = {
    "conv": (8, 4, 3, 3),
    "dense": (6, 5),
    "modulated": (1, 4, 3, 3, 3),
    "to_rgb_bias": (1, 3, 1, 1),
    "bias": (6,),
}


def rosinality_axes(path, shape):
    """Ranger centralises torch tensors with a leading dim of 1 over all their values."""
    if path[-1] in ("modulated", "to_rgb_bias"):
        return tuple(range(len(shape)))
    return optimizers.output_last_axes(path, shape)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_ranger_matches_reference(weight_decay):
    rng = np.random.default_rng(0)
    torch_init = {
        n: 0.01 * rng.normal(size=s) for n, s in TORCH_SHAPES.items()
    }  # small: float32 ulps stay far below the steps
    targets = {n: rng.normal(size=s) for n, s in TORCH_SHAPES.items()}
    curvature = {n: rng.uniform(0.2, 2.0, size=s) for n, s in TORCH_SHAPES.items()}
    steps, lr = 20, 1e-2  # rectification starts at step 6; Lookahead syncs at 6, 12, 18

    def numpy_grads(params):
        return {n: curvature[n] * (params[n] - targets[n]) for n in params}

    expected = reference_ranger(torch_init, numpy_grads, steps, lr, weight_decay)

    def to_flax(tree):
        return {n: jnp.asarray(TO_FLAX[n](np.asarray(x)), jnp.float32) for n, x in tree.items()}

    flax_targets, flax_curvature = to_flax(targets), to_flax(curvature)

    def loss(params):
        return sum(
            0.5 * jnp.sum(flax_curvature[n] * (params[n] - flax_targets[n]) ** 2) for n in params
        )

    tx = optimizers.ranger(lr, weight_decay=weight_decay, centralization_axes=rosinality_axes)
    params, state = tx.init(to_flax(torch_init))

    @jax.jit
    def step(params, state):
        return tx.step(jax.grad(loss)(params.fast), state, params)

    init = to_flax(torch_init)
    for t in range(steps):
        params, state = step(params, state)
        reference = to_flax(expected[t])
        for name in TORCH_SHAPES:
            # Compare the displacement from the start: the parameters themselves would hide it.
            assert_parity(
                params.fast[name] - init[name],
                reference[name] - init[name],
                tol=1e-5,
                name=f"{name} step {t + 1}",
            )
            if (t + 1) % 6 == 0:  # just synchronised: fast weights = slow weights
                slow = tx.leaves(params.slow, params.fast)
                np.testing.assert_allclose(slow[name], params.fast[name], rtol=1e-6, atol=1e-7)


def test_rectification_length_is_accurate():
    b2 = 0.999
    t = np.array([1, 2, 5, 6, 7, 10, 100, 499, 500, 501, 1000, 10000, 100000], np.float64)
    exact = (2 / (1 - b2) - 1) - 2 * t * b2**t / (1 - b2**t)
    computed = np.asarray(
        optimizers._rectification_length(jnp.asarray(t, jnp.float32), b2), np.float64
    )
    np.testing.assert_allclose(computed, exact, rtol=5e-7)


def test_centralization_default_axes():
    """The first step moves each parameter by -lr times its centralised gradient
    (no rectification yet, bias correction cancels (1 - b1)): over every axis but the
    last for a kernel, not at all for a bias."""
    grads = {"kernel": jnp.arange(24.0).reshape(2, 3, 4) ** 2, "bias": jnp.arange(4.0)}
    tx = optimizers.ranger(1.0)
    params, state = tx.init(jax.tree.map(jnp.zeros_like, grads))
    moved, _ = tx.step(grads, state, params)
    expected_kernel = grads["kernel"] - grads["kernel"].mean(axis=(0, 1), keepdims=True)
    np.testing.assert_allclose(moved.fast["kernel"], -expected_kernel, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(moved.fast["bias"], -grads["bias"], rtol=1e-6)


def test_groups_of_one_shape_update_as_their_leaves_alone():
    """Leaves of one shape share one array of state, yet each is centralised and moved
    on its own: the same parameters as a Ranger per leaf, over steps that rectify and
    synchronise; one group per (shape, centralisation)."""
    rng = np.random.default_rng(1)
    shapes = {
        "a": (3, 3, 2, 4),
        "b": (3, 3, 2, 4),
        "c": (4,),
        "d": (4,),
        "e": (),
        "f": (),
        "g": (5, 4),
    }
    init = {n: jnp.asarray(rng.normal(size=s), jnp.float32) for n, s in shapes.items()}
    grads = [
        {n: jnp.asarray(rng.normal(size=s), jnp.float32) for n, s in shapes.items()}
        for _ in range(8)
    ]
    together = optimizers.ranger(1e-2)
    params, state = together.init(init)
    assert len(params.slow) == len(state.mu) == 4  # (3, 3, 2, 4), (4,), (), (5, 4)
    step = jax.jit(together.step)
    for g in grads:
        params, state = step(g, state, params)
    for name in shapes:
        alone = optimizers.ranger(1e-2)
        leaf, leaf_state = alone.init({name: init[name]})
        for g in grads:
            leaf, leaf_state = alone.step({name: g[name]}, leaf_state, leaf)
        np.testing.assert_allclose(
            params.fast[name], leaf.fast[name], rtol=1e-6, atol=1e-7, err_msg=name
        )
        np.testing.assert_allclose(
            together.leaves(state.nu, params.fast)[name],
            alone.leaves(leaf_state.nu, leaf.fast)[name],
            rtol=1e-6,
            err_msg=name,
        )


def params_leaf(tree, path):
    for name in path:
        tree = tree[name]
    return tree


def test_reference_centralization_on_the_project_networks():
    """Leaves whose torch tensor has another layout are found by structure in the real trees."""
    from dbaf_jax.models.dbaf.cid import CID
    from dbaf_jax.models.stylegan2 import Generator

    generator = Generator(size=8, style_dim=16, n_mlp=2, width_scale=1 / 32)
    cid = CID(n_latent=4, style_dim=16, groups=(2, 1, 1), depth=1, heads=2, head_dim=4, mlp_dim=8)
    key = jax.random.key(0)
    params = {
        "decoder": jax.eval_shape(generator.init, key, jnp.zeros((1, generator.n_latent, 16)))[
            "params"
        ],
        "cid": jax.eval_shape(cid.init, key, jnp.zeros((2, 4, 16)))["params"],
    }
    axes = optimizers.reference_centralization(params)
    decided = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        names = tuple(optimizers._key_name(entry) for entry in path)
        decided[names] = axes(names, leaf.shape)
    everything = {
        p
        for p, a in decided.items()
        if a is not None and len(a) == len(params_leaf(params, p).shape)
    }
    modulated = {p for p in decided if p[0] == "decoder" and p[-2:] == ("conv", "kernel")}
    assert len(modulated) == 2 + 3  # conv1, to_rgb1, convs_0, convs_1, to_rgbs_0
    to_rgb_biases = {("decoder", "to_rgb1", "bias"), ("decoder", "to_rgbs_0", "bias")}
    assert everything == modulated | to_rgb_biases | {("decoder", "constant_input")}
    assert decided[("decoder", "conv1", "bias")] is None  # StyledConv bias: torch 1-d activate.bias
    assert decided[("decoder", "conv1", "conv", "modulation", "kernel")] == (
        0,
    )  # EqualLinear (in, out)
    assert decided[("cid", "pos_embedding")] == (1,)  # torch (N, 1, D): per latent
    assert decided[("cid", "linear_w", "kernel")] == (0,)
