"""bfloat16 compute (issue 11): every network of the training step computes in
bfloat16 when ``config.compute_dtype`` says so, parameters and optimizer state stay
float32, a bfloat16 step's losses stay close to the float32 step's, and the compute
dtype never enters an exported model's architecture."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs.dbaf import stage2
from dbaf_jax.core import precision
from dbaf_jax.models.dbaf.dbaf import KEY_GENERATOR
from dbaf_jax.models.parsers import BiSeNet
from dbaf_jax.train import initialization, loop, stages
from tests.train import tiny_stage2

SIZE = tiny_stage2.SIZE


def tiny_config(compute_dtype: str):
    config = stage2.get_config("tiny")
    config.compute_dtype = compute_dtype
    config.batch_size = 4
    return config


@pytest.fixture(scope="module")
def start():
    """The tiny stage-2 networks in float32 and bfloat16, one set of float32 variables."""
    networks = {d: stages.build_networks(tiny_config(d)) for d in ("float32", "bfloat16")}
    return networks, tiny_stage2.random_variables()


def equations(jaxpr):
    """Every equation of ``jaxpr`` and of the jaxprs nested in it (jit, vmap, custom rules)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    yield from equations(sub.jaxpr)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    yield from equations(sub)


def product_dtypes(fn, *args) -> set[str]:
    """The operand dtypes of every convolution and matrix product ``fn`` traces to."""
    jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
    return {
        str(v.aval.dtype)
        for eqn in equations(jaxpr)
        if eqn.primitive.name in ("conv_general_dilated", "dot_general")
        for v in eqn.invars
    }


def network_inputs(networks, variables):
    """Network name -> (float32 inputs of one call) for every network a stage-2 step runs."""
    rng = np.random.default_rng(0)
    images = jnp.asarray(rng.uniform(-1, 1, (2, SIZE, SIZE, 3)), jnp.float32)
    model = networks.model
    latents = jnp.asarray(
        rng.normal(size=(2, model.decoder.n_latent, model.decoder.style_dim)), jnp.float32
    )
    encoded = model.e4e.apply(variables["e4e"], images)
    return {
        "e4e": (images,),
        "cid": (latents,),
        "maar": (encoded.c3, encoded.c2, encoded.c1),
        "decoder": (latents,),
        "kria": (latents, latents),
        "discriminator": (images,),
        "arcface": (images,),
        "lpips": (images, images),
        "parser": (images,),
    }


@pytest.mark.slow
def test_every_network_of_the_step_computes_in_bfloat16(start):
    networks, variables = start
    bf16 = networks["bfloat16"]
    cast = bf16.model.compute_variables(variables)
    assert jax.tree.leaves(cast[KEY_GENERATOR]["params"])[0].dtype == jnp.float32  # keys stay exact
    for name, inputs in network_inputs(networks["float32"], variables).items():
        assert product_dtypes(lambda *x: bf16.apply(name, cast, *x), *inputs) == {"bfloat16"}, name
        assert product_dtypes(
            lambda *x: networks["float32"].apply(name, variables, *x), *inputs
        ) == {"float32"}, name
        outputs = jax.eval_shape(lambda *x: bf16.apply(name, cast, *x), *inputs)
        assert {str(leaf.dtype) for leaf in jax.tree.leaves(outputs)} == {"float32"}, name


def test_bisenet_computes_in_bfloat16():
    """The anonymizer's mask parser, through the same `precision.apply`."""
    parser = BiSeNet()
    images = jnp.zeros((1, 64, 64, 3))
    variables = jax.eval_shape(parser.init, jax.random.PRNGKey(0), images)
    variables = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), variables)
    dtypes = product_dtypes(lambda x: precision.apply("bfloat16", parser, variables, x), images)
    assert dtypes == {"bfloat16"}


def test_cast_params_keeps_statistics_and_non_floats():
    variables = {
        "params": {"kernel": jnp.ones((2, 2)), "count": jnp.ones((2,), jnp.int32)},
        "batch_stats": {"mean": jnp.zeros((2,))},
    }
    cast = precision.cast_params(variables, "bfloat16")
    assert (
        cast["params"]["kernel"].dtype == jnp.bfloat16
        and cast["params"]["count"].dtype == jnp.int32
    )
    assert cast["batch_stats"]["mean"].dtype == jnp.float32
    assert precision.cast_params(variables, "float32") is variables
    with pytest.raises(Exception, match="compute_dtype 'float16'"):
        precision.check_compute_dtype("float16")


def one_step(networks, variables, compute_dtype: str):
    """One stage-2 step (1 device) of the tiny config from ``variables`` -> (state, metrics)."""
    config = tiny_config(compute_dtype)
    run = initialization.setup(config, networks, variables, jax.random.PRNGKey(1))
    images = jnp.asarray(
        np.random.default_rng(1).uniform(-1, 1, (config.batch_size, SIZE, SIZE, 3)), jnp.float32
    )
    state, metrics = jax.jit(run.stage.step)(
        run.state, run.frozen, images, jnp.asarray(0, jnp.int32)
    )
    return jax.device_get(state), {k: float(v) for k, v in jax.device_get(metrics).items()}


# bfloat16 keeps 8 significant bits (relative rounding 2^-9 = 2e-3 per operation), and
# every loss here passes through 2-4 networks of tens of layers, some terms (a parse
# cross-entropy, an LPIPS distance) being small differences of larger numbers.
# Measured on the tiny stage-2 step (CPU, batch 4): g_total 9.1e-4, d_total 9.5e-4,
# the worst single term 2.3e-2 (parse), three more between 1.1e-2 and 1.7e-2 (before
# the blur filters became sums of windows: the worst 3.5e-2). The bound is about 4x
# the worst measured term; weights cast wrongly (or not at all where the
# inputs are) give O(1) differences.
LOSS_RTOL = 1e-1


@pytest.mark.long  # compiles both stages' steps in two dtypes: about 5 min on 2 cores
def test_bfloat16_step_losses_stay_close_to_float32(start):
    networks, variables = start
    state32, metrics32 = one_step(networks["float32"], variables, "float32")
    state16, metrics16 = one_step(networks["bfloat16"], variables, "bfloat16")
    assert metrics16.keys() == metrics32.keys()
    errors = {k: abs(metrics16[k] - metrics32[k]) / max(abs(metrics32[k]), 1e-6) for k in metrics32}
    print("relative loss errors, bfloat16 vs float32:", json.dumps(errors, indent=1))
    assert max(errors.values()) < LOSS_RTOL, errors
    # Mixed precision: parameters and optimizer state stay float32, and they moved.
    for leaf in jax.tree.leaves(
        (state16.generator_params, state16.generator_opt_state, state16.discriminator_params)
    ):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert leaf.dtype == jnp.float32
    assert all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(state16.generator_params))


@pytest.mark.slow
def test_a_bfloat16_run_exports_the_float32_architecture(start, tmp_path):
    networks, variables = start
    written = {}
    for dtype, nets in networks.items():
        config = tiny_config(dtype)
        loop.export(
            tmp_path,
            initialization.setup(config, nets, variables, jax.random.PRNGKey(1)).stage,
            variables,
            name=dtype,
        )
        written[dtype] = json.loads((tmp_path / dtype / "model.json").read_text())
    assert written["bfloat16"] == written["float32"]
    decoder = json.loads((tmp_path / "bfloat16" / "decoder" / "network.json").read_text())
    assert decoder["config"]["dtype"] == "float32"
