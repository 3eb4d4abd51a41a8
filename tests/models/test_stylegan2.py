"""StyleGAN2 in Flax against the PyTorch reference (rosinality layout), through the converter.

Reduced copies (size 64, style_dim 64, width 1/8) with random weights are saved as a
rosinality training checkpoint, converted with ``convert.stylegan2``'s command line
and loaded with ``load_network``.
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from convert import stylegan2 as convert_stylegan2
from convert.common import sub_dict, to_numpy
from dbaf_jax.models.stylegan2 import (
    Discriminator,
    Generator,
    ModulatedConv2d,
    noise_resolution,
    truncate,
)
from dbaf_jax.nn.upfirdn import make_kernel, upfirdn2d
from dbaf_jax.storage.model_directory import load_network
from tests.parity import assert_parity, nchw, nhwc, randomize_, relative_error
from tests.torch_reference import stylegan2 as ref

SIZE, STYLE_DIM, N_MLP, WIDTH = 64, 64, 3, 0.125


def random_reference(module, seed):
    """Random parameters and noise buffers; the blur kernels keep their fixed values."""
    return ref.reset_fixed_kernels_(randomize_(module, seed=seed)).eval()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Torch g_ema, g and d with random weights, and their converted Flax networks."""
    torch.manual_seed(0)
    g_ema = random_reference(ref.Generator(SIZE, STYLE_DIM, N_MLP, width_scale=WIDTH), seed=1)
    g = random_reference(ref.Generator(SIZE, STYLE_DIM, N_MLP, width_scale=WIDTH), seed=2)
    d = random_reference(ref.Discriminator(SIZE, width_scale=WIDTH), seed=3)
    with torch.no_grad():
        # One input channel of 65 would barely move the logits; weight the stddev channel
        # up so that the minibatch grouping shows clearly in them.
        d.final_conv[0].weight[:, -1] *= 30.0
    directory = tmp_path_factory.mktemp("stylegan2")
    ckpt = directory / "stylegan2-test.pt"
    torch.save(
        {
            "g_ema": g_ema.state_dict(),
            "g": g.state_dict(),
            "d": d.state_dict(),
            "args": argparse.Namespace(size=SIZE),
        },
        ckpt,
    )
    convert_stylegan2.main(["--ckpt", str(ckpt), "--out", str(directory / "model")])
    return {
        "torch_g_ema": g_ema,
        "torch_g": g,
        "torch_d": d,
        "ckpt": ckpt,
        "generator": load_network(directory / "model" / "generator"),
        "generator_raw": load_network(directory / "model" / "generator_raw"),
        "discriminator": load_network(directory / "model" / "discriminator"),
    }


def w_plus(seed, batch, n_latent=2 * 6 - 2):
    return (
        np.random.default_rng(seed).standard_normal((batch, n_latent, STYLE_DIM)).astype(np.float32)
    )


def run_generator(network, latents, **kwargs):
    image, state = network.module.apply(
        network.variables, jnp.asarray(latents), mutable=["intermediates"], **kwargs
    )
    return np.asarray(image), {k: np.asarray(v[0]) for k, v in state["intermediates"].items()}


def test_converted_generator_config(converted):
    module = converted["generator"].module
    assert (
        module.size,
        module.style_dim,
        module.n_mlp,
        module.channel_multiplier,
        module.width_scale,
    ) == (
        SIZE,
        STYLE_DIM,
        N_MLP,
        2,
        WIDTH,
    )
    assert module.n_latent == 10 and module.num_noise == 9


@pytest.mark.parametrize("which", ["generator", "generator_raw"])
def test_generator_image_and_features_match_torch(converted, which):
    latents = w_plus(0, 2)
    torch_g = converted["torch_g_ema" if which == "generator" else "torch_g"]
    with torch.no_grad():
        expected, expected_features = torch_g(torch.from_numpy(latents), return_features=True)
    image, features = run_generator(converted[which], latents)
    assert image.shape == (2, SIZE, SIZE, 3)
    assert_parity(image, nhwc(expected), name="image")
    assert set(features) == set(expected_features)
    for name, value in expected_features.items():
        assert_parity(features[name], nhwc(value), name=name)


def test_mapping_network_matches_torch(converted):
    z = np.random.default_rng(1).standard_normal((4, STYLE_DIM)).astype(np.float32)
    network = converted["generator"]
    w = network.module.apply(network.variables, jnp.asarray(z), method=Generator.map)
    with torch.no_grad():
        expected = converted["torch_g_ema"].style(torch.from_numpy(z))
    assert_parity(w, expected.numpy(), name="w")
    # map needs the parameters only, not the noise buffers.
    w_params_only = network.module.apply(
        {"params": network.variables["params"]}, jnp.asarray(z), method=Generator.map
    )
    np.testing.assert_array_equal(w_params_only, w)


def test_z_input_with_truncation_matches_torch(converted):
    network, torch_g = converted["generator"], converted["torch_g_ema"]
    rng = np.random.default_rng(2)
    z = rng.standard_normal((2, STYLE_DIM)).astype(np.float32)
    z_many = rng.standard_normal((256, STYLE_DIM)).astype(np.float32)
    psi = 0.7
    gen = network.module
    w = gen.apply(network.variables, jnp.asarray(z), method=Generator.map)
    w_avg = gen.apply(network.variables, jnp.asarray(z_many), method=Generator.map).mean(
        0, keepdims=True
    )
    w_t = truncate(w, w_avg, psi)
    image = gen.apply(network.variables, jnp.repeat(w_t[:, None], gen.n_latent, axis=1))
    with torch.no_grad():
        tw = torch_g.style(torch.from_numpy(z))
        tw_avg = torch_g.style(torch.from_numpy(z_many)).mean(0, keepdim=True)
        tw_t = tw_avg + psi * (tw - tw_avg)
        expected = torch_g(tw_t[:, None].repeat(1, torch_g.n_latent, 1))
    assert_parity(image, nhwc(expected), name="truncated image")
    np.testing.assert_allclose(truncate(w, w_avg, 1.0), w, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(truncate(w, w_avg, 0.0), jnp.broadcast_to(w_avg, w.shape), rtol=1e-6)


def test_feature_maps_replacing_noise_3_to_8_match_torch(converted):
    """DBAF's MAAR path: full-channel maps at noise inputs 3-8 (two per map), buffers elsewhere."""
    network, torch_g = converted["generator"], converted["torch_g_ema"]
    gen = network.module
    rng = np.random.default_rng(3)
    maps = {
        res: rng.standard_normal((2, res, res, gen.channels(res))).astype(np.float32)
        for res in (16, 32, 64)
    }
    noise = {i: maps[noise_resolution(i)] for i in range(3, 9)}
    noise[1] = rng.standard_normal((2, 8, 8, 1)).astype(np.float32)  # a plain noise map too
    latents = w_plus(4, 2)
    image, features = run_generator(
        network, latents, noise={i: jnp.asarray(v) for i, v in noise.items()}
    )
    with torch.no_grad():
        expected, expected_features = torch_g(
            torch.from_numpy(latents),
            noise={i: nchw(v) for i, v in noise.items()},
            return_features=True,
        )
    assert_parity(image, nhwc(expected), name="image")
    for name in ("features_16", "features_32", "features_64"):
        assert_parity(features[name], nhwc(expected_features[name]), name=name)
    plain, _ = run_generator(network, latents)
    assert relative_error(image, plain) > 1e-2  # the maps do reach the image


def test_randomize_noise_draws_from_the_noise_rng(converted):
    network = converted["generator"]
    gen, latents = network.module, jnp.asarray(w_plus(5, 2))
    fixed = gen.apply(network.variables, latents)
    a = gen.apply(
        network.variables, latents, randomize_noise=True, rngs={"noise": jax.random.key(0)}
    )
    b = gen.apply(
        network.variables, latents, randomize_noise=True, rngs={"noise": jax.random.key(0)}
    )
    c = gen.apply(
        network.variables, latents, randomize_noise=True, rngs={"noise": jax.random.key(1)}
    )
    np.testing.assert_array_equal(a, b)
    assert relative_error(a, c) > 1e-3 and relative_error(a, fixed) > 1e-3


def _per_sample_modulated_conv(x, style, kernel, demodulate, upsample):
    """The definition: a weight per sample, W * s_b / sqrt(fan_in), demodulated, then conv."""
    k, _, cin, _ = kernel.shape
    outs = []
    for b in range(x.shape[0]):
        w = kernel / np.sqrt(cin * k * k) * style[b][None, None, :, None]
        if demodulate:
            w = w / np.sqrt((w**2).sum(axis=(0, 1, 2), keepdims=True) + 1e-8)
        w = w.astype(np.float32)
        # PyTorch: conv2d / conv_transpose2d on the sample, weight as (out, in, k, k) / (in, out, k, k).
        xb = nchw(x[b : b + 1])
        if upsample:
            y = torch.nn.functional.conv_transpose2d(
                xb, torch.from_numpy(w.transpose(2, 3, 0, 1).copy()), stride=2
            )
            y = ref.upfirdn2d(y, ref.blur_kernel(4.0), pad=(1, 1))
        else:
            y = torch.nn.functional.conv2d(
                xb, torch.from_numpy(w.transpose(3, 2, 0, 1).copy()), padding=k // 2
            )
        outs.append(nhwc(y)[0])
    return np.stack(outs)


@pytest.mark.parametrize(
    "kernel_size,demodulate,upsample",
    [(3, True, False), (3, True, True), (1, False, False), (3, False, True)],
)
def test_modulated_conv_equals_per_sample_weight_definition(kernel_size, demodulate, upsample):
    layer = ModulatedConv2d(5, kernel_size, demodulate=demodulate, upsample=upsample)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 8, 8, 4)).astype(np.float32)
    style_in = rng.standard_normal((3, 6)).astype(np.float32)
    variables = layer.init(jax.random.key(0), x, style_in)
    y = layer.apply(variables, x, style_in)
    modulation = variables["params"]["modulation"]
    style = style_in @ (np.asarray(modulation["kernel"]) / np.sqrt(6)) + np.asarray(
        modulation["bias"]
    )
    expected = _per_sample_modulated_conv(
        x, style, np.asarray(variables["params"]["kernel"]), demodulate, upsample
    )
    assert y.shape == expected.shape == (3, 16 if upsample else 8, 16 if upsample else 8, 5)
    assert_parity(y, expected)


@pytest.mark.parametrize(
    "up,down,pad",
    [
        (1, 1, (1, 1)),
        (2, 1, (2, 1)),
        (1, 2, (2, 2)),
        (1, 2, (1, 1)),
        (2, 2, (-1, 2)),
        (3, 1, (0, -2)),
    ],
)
def test_upfirdn2d_matches_native_reference(up, down, pad):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 9, 9, 3)).astype(np.float32)
    kernel = rng.standard_normal((4, 3)).astype(np.float32)  # asymmetric: checks the flip
    y = upfirdn2d(jnp.asarray(x), kernel, up=up, down=down, pad=pad)
    expected = ref.upfirdn2d(nchw(x), torch.from_numpy(kernel), up=up, down=down, pad=pad)
    assert_parity(y, nhwc(expected))
    np.testing.assert_allclose(make_kernel(gain=4.0), ref.blur_kernel(4.0).numpy(), rtol=1e-7)


def grouped_images(batch, seed):
    """Even samples nearly equal, odd ones independent: the stddev statistic of the group
    {0, 2, 4, ...} is far from that of {1, 3, 5, ...}, so a wrong grouping changes the logits."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(-1, 1, (batch, SIZE, SIZE, 3))
    images[0::2] = images[0] + 0.01 * rng.standard_normal(images[0::2].shape)
    return images.astype(np.float32)


@pytest.mark.parametrize("batch", [pytest.param(8, marks=pytest.mark.slow), 2])
def test_discriminator_logits_match_torch(converted, batch):
    images = grouped_images(batch, seed=8)
    network = converted["discriminator"]
    logits = np.asarray(network.module.apply(network.variables, jnp.asarray(images)))
    with torch.no_grad():
        expected = converted["torch_d"](nchw(images)).numpy()
    assert logits.shape == (batch, 1)
    assert_parity(logits, expected, name=f"logits at batch {batch}")


@pytest.mark.slow
def test_discriminator_stddev_groups_b_with_b_plus_batch_over_group(converted):
    """At batch 8 samples b and b+2 share a statistic: swapping 0 and 2 leaves logits alone, 0 and 1 does not."""
    network = converted["discriminator"]
    images = grouped_images(8, seed=9)

    def logits(order):
        out = np.asarray(network.module.apply(network.variables, jnp.asarray(images[order])))[:, 0]
        return out[np.argsort(order)]

    reference = logits([0, 1, 2, 3, 4, 5, 6, 7])
    np.testing.assert_allclose(logits([2, 1, 0, 3, 4, 5, 6, 7]), reference, rtol=1e-5, atol=1e-5)
    assert relative_error(logits([1, 0, 2, 3, 4, 5, 6, 7]), reference) > 1e-2


def test_generator_variables_on_a_prefixed_sub_dictionary(converted):
    """The e4e converter's use: pSp stores the generator under 'decoder.'."""
    state = {f"decoder.{k}": v for k, v in converted["torch_g_ema"].state_dict().items()}
    state["encoder.something"] = torch.zeros(1)
    module = Generator(size=SIZE, style_dim=STYLE_DIM, n_mlp=N_MLP, width_scale=WIDTH)
    variables = convert_stylegan2.generator_variables(
        sub_dict(to_numpy(state, "psp.pt"), "decoder."), module, "psp.pt"
    )
    reference = converted["generator"].variables
    jax.tree.map(np.testing.assert_array_equal, variables, jax.tree.map(np.asarray, reference))


def test_full_size_shapes_and_parameter_counts():
    """The 256 FFHQ configuration, shapes only: 14 latents, 13 noise buffers, the file's 30.2M values."""
    gen = Generator()
    assert gen.n_latent == 14 and gen.num_noise == 13
    latents = jax.ShapeDtypeStruct((2, 14, 512), jnp.float32)
    variables = jax.eval_shape(gen.init, jax.random.key(0), latents)
    buffers = variables["buffers"]
    assert sorted(buffers) == sorted(f"noise_{i}" for i in range(13))
    sides = [buffers[f"noise_{i}"].shape[1] for i in range(13)]
    assert sides == [4, 8, 8, 16, 16, 32, 32, 64, 64, 128, 128, 256, 256]
    assert all(buffers[f"noise_{i}"].shape == (1, s, s, 1) for i, s in enumerate(sides))
    n_params = sum(x.size for x in jax.tree.leaves(variables["params"]))
    n_buffers = sum(x.size for x in jax.tree.leaves(buffers))
    assert n_params == 30_034_338  # rosinality G256 parameters ("30.0M")
    fixed_kernels = 12 * 16  # 6 up-conv blurs + 6 ToRGB upsample kernels, checked by the converter
    assert n_params + n_buffers + fixed_kernels == 30_209_266  # every value of g_ema's 135 entries
    assert len(jax.tree.leaves(variables)) + 12 == 135
    image = jax.eval_shape(gen.apply, variables, latents)
    assert image.shape == (2, 256, 256, 3)

    disc = Discriminator()
    d_vars = jax.eval_shape(
        disc.init, jax.random.key(0), jax.ShapeDtypeStruct((8, 256, 256, 3), jnp.float32)
    )
    assert sum(x.size for x in jax.tree.leaves(d_vars)) + 12 * 16 == 28_864_321
    assert len(jax.tree.leaves(d_vars)) + 12 == 50
    assert d_vars["params"]["final_linear_0"]["kernel"].shape == (8192, 512)
    assert d_vars["params"]["final_conv"]["conv"]["kernel"].shape == (3, 3, 513, 512)
    logits = jax.eval_shape(disc.apply, d_vars, jax.ShapeDtypeStruct((8, 256, 256, 3), jnp.float32))
    assert logits.shape == (8, 1)
