"""e4e and pSp encoders against PyTorch through `python -m convert.e4e`, the image
reconstructed through the converted encoder and decoder against the PyTorch pSp
pipeline, full-size shapes, and the converter's refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from convert.e4e import main
from dbaf_jax.models.e4e import Encoder4Editing, GradualStyleEncoder
from dbaf_jax.nn.resize import adaptive_avg_pool2d
from dbaf_jax.storage.model_directory import load_network
from tests.conversion import assert_command_refuses_a_non_checkpoint, convert, edited, refusal, save
from tests.parity import assert_parity, nchw, nhwc, randomize_, relative_error
from tests.torch_reference import e4e as torch_e4e
from tests.torch_reference.irse import randomize_irse_
from tests.torch_reference.stylegan2 import Generator as TorchGenerator
from tests.torch_reference.stylegan2 import reset_fixed_kernels_

# Reduced copy: a 64x64 generator has 10 latents (coarse 0-2, middle 3-6, fine 7-9).
SIZE, STYLE_DIM, WIDTH, DECODER_WIDTH = 64, 64, 0.25, 0.125
OPTS = {"encoder_type": "Encoder4Editing", "stylegan_size": SIZE, "start_from_latent_avg": True}


def make_psp(encoder_cls, seed):
    torch.manual_seed(seed)
    encoder = randomize_irse_(encoder_cls(SIZE, STYLE_DIM, WIDTH), seed=seed)
    decoder = TorchGenerator(SIZE, STYLE_DIM, 2, width_scale=DECODER_WIDTH)
    decoder = reset_fixed_kernels_(
        randomize_(decoder, seed=seed + 1)
    ).eval()  # blur kernels stay fixed
    n_latent = 2 * int(np.log2(SIZE)) - 2
    latent_avg = torch.randn(n_latent, STYLE_DIM, generator=torch.Generator().manual_seed(seed + 2))
    return torch_e4e.PSP(encoder, decoder, latent_avg)


def save_checkpoint(path, psp, opts=OPTS, latent_avg=None, **edits):
    """pSp's checkpoint dict; ``edits`` (drop, add) change its state_dict."""
    checkpoint = {
        "state_dict": edited(psp.state_dict(), **edits),
        "latent_avg": psp.latent_avg if latent_avg is None else latent_avg,
    }
    if opts is not None:
        checkpoint["opts"] = opts
    return save(checkpoint, path)


def convert_encoder(ckpt, out):
    """Runs the converter on ``ckpt`` -> (encoder, decoder) loaded from ``out``."""
    encoder = convert(main, ["--ckpt", str(ckpt), "--width-scale", str(WIDTH)], out, "e4e")
    return encoder, load_network(out / "e4e_decoder")


@pytest.fixture(scope="module")
def e4e(tmp_path_factory):
    psp = make_psp(torch_e4e.Encoder4Editing, seed=0)
    tmp = tmp_path_factory.mktemp("e4e")
    return psp, *convert_encoder(
        save_checkpoint(tmp / "e4e_ffhq_encode_256.pt", psp), tmp / "models"
    )


@pytest.fixture(scope="module")
def images():
    return np.tanh(np.random.default_rng(7).standard_normal((2, 256, 256, 3))).astype(np.float32)


def compare_encoder(psp, encoder, images):
    with torch.no_grad():
        codes_t, c3_t, c2_t, c1_t = psp.encoder(nchw(images))
        codes_t = codes_t + psp.latent_avg
    out = jax.jit(encoder.module.apply)(encoder.variables, images)
    errors = {}
    for name, actual, expected in (
        ("codes", out.codes, codes_t.numpy()),
        ("c3", out.c3, nhwc(c3_t)),
        ("c2", out.c2, nhwc(c2_t)),
        ("c1", out.c1, nhwc(c1_t)),
    ):
        assert_parity(actual, expected, name=name)
        errors[name] = relative_error(actual, expected)
    return out, errors


def test_e4e_codes_and_maps_match_torch(e4e, images):
    psp, encoder, _ = e4e
    assert isinstance(encoder.module, Encoder4Editing)
    out, errors = compare_encoder(psp, encoder, images)
    assert out.codes.shape == (2, 10, STYLE_DIM)
    # e4e's structure: latents share w0, so the offsets from it are the style blocks 1.. alone.
    print("e4e relative errors:", {k: f"{v:.2e}" for k, v in errors.items()})


def test_psp_encoder_from_opts(tmp_path, images):
    psp = make_psp(torch_e4e.GradualStyleEncoder, seed=10)
    opts = dict(OPTS, encoder_type="GradualStyleEncoder")
    # A single average latent (1, D) is repeated over the latents, as pSp's forward broadcasts it.
    latent_avg = psp.latent_avg[:1].clone()
    ckpt = save_checkpoint(tmp_path / "psp.pt", psp, opts=opts, latent_avg=latent_avg)
    encoder, _ = convert_encoder(ckpt, tmp_path / "models")
    assert type(encoder.module) is GradualStyleEncoder
    psp.latent_avg = latent_avg
    _, errors = compare_encoder(psp, encoder, images)
    print("pSp relative errors:", {k: f"{v:.2e}" for k, v in errors.items()})


def test_reconstruction_matches_torch_psp_pipeline(e4e, images):
    psp, encoder, decoder = e4e
    with torch.no_grad():
        expected_images, expected_codes = psp(nchw(images))

    @jax.jit
    def reconstruct(encoder_vars, decoder_vars, x):
        codes = encoder.module.apply(encoder_vars, x).codes
        generated = decoder.module.apply(
            decoder_vars, codes
        )  # the stored noise: randomize_noise=False
        return adaptive_avg_pool2d(generated, (256, 256)), codes  # pSp's face_pool

    actual_images, actual_codes = reconstruct(encoder.variables, decoder.variables, images)
    assert actual_images.shape == (2, 256, 256, 3)
    assert_parity(actual_codes, expected_codes.numpy(), name="codes")
    assert_parity(actual_images, nhwc(expected_images), name="image")
    print(
        f"reconstruction relative error: {relative_error(actual_images, nhwc(expected_images)):.2e}"
    )


def test_network_records(e4e):
    _, encoder, decoder = e4e
    assert encoder.info["kind"] == "e4e:Encoder4Editing"
    assert encoder.info["config"] == {
        "input_size": 256,
        "num_layers": 50,
        "style_dim": STYLE_DIM,
        "stylegan_size": SIZE,
        "width_scale": WIDTH,
    }
    assert encoder.variables["buffers"]["latent_avg"].shape == (10, STYLE_DIM)
    assert decoder.info["kind"] == "stylegan2:Generator"
    assert decoder.module.size == SIZE and decoder.module.style_dim == STYLE_DIM


def test_full_size_layout():
    with torch.device("meta"):
        reference = torch_e4e.Encoder4Editing()
    sd = reference.state_dict()
    assert len(sd) == 565
    tracked = [k for k in sd if k.endswith("num_batches_tracked")]
    module = Encoder4Editing()
    variables = jax.eval_shape(module.init, jax.random.key(0), jnp.zeros((1, 256, 256, 3)))
    assert len(jax.tree.leaves(variables["params"])) + len(
        jax.tree.leaves(variables["batch_stats"])
    ) == len(sd) - len(tracked)
    n_weights = sum(v.numel() for k, v in sd.items() if k not in tracked)
    assert (
        sum(x.size for x in jax.tree.leaves({k: variables[k] for k in ("params", "batch_stats")}))
        == n_weights
    )
    assert round(n_weights / 1e6, 1) == 209.5
    out = jax.eval_shape(module.apply, variables, jnp.zeros((2, 256, 256, 3)))
    assert out.codes.shape == (2, 14, 512)
    assert (out.c3.shape, out.c2.shape, out.c1.shape) == (
        (2, 16, 16, 512),
        (2, 32, 32, 256),
        (2, 64, 64, 128),
    )
    assert Encoder4Editing(stylegan_size=1024).n_styles == 18


@pytest.fixture(scope="module")
def psp_reference():
    return make_psp(torch_e4e.Encoder4Editing, seed=0)


def refuse(tmp_path, psp, **kwargs):
    ckpt = save_checkpoint(tmp_path / "bad.pt", psp, **kwargs)
    argv = ["--ckpt", str(ckpt), "--out", str(tmp_path / "models"), "--width-scale", str(WIDTH)]
    return refusal(main, argv, unwritten=tmp_path / "models")


def test_refuses_missing_keys(tmp_path, psp_reference):
    err = refuse(
        tmp_path,
        psp_reference,
        drop=["encoder.styles.8.convs.10.bias", "decoder.convs.3.noise.weight"],
    )
    assert "missing (1): styles.8.convs.10.bias" in err
    assert "missing (1): convs.3.noise.weight" in err


def test_refuses_unexpected_key(tmp_path, psp_reference):
    err = refuse(tmp_path, psp_reference, add={"encoder.styles.10.linear.weight": torch.zeros(2)})
    assert "unexpected (1): styles.10.linear.weight" in err
    err = refuse(tmp_path, psp_reference, add={"discriminator.x": torch.zeros(2)})
    assert "outside encoder.* and decoder.*: discriminator.x" in err


def test_refuses_misshaped_keys(tmp_path, psp_reference):
    err = refuse(
        tmp_path,
        psp_reference,
        add={"encoder.latlayer1.weight": torch.zeros(128, 64, 3, 3)},
        latent_avg=torch.zeros(3, STYLE_DIM),
    )
    assert "mis-shaped (2)" in err
    assert "latlayer1.weight [128, 64, 3, 3]" in err and "latent_avg [3, 64]" in err


def test_refuses_single_style_encoder(tmp_path, psp_reference):
    err = refuse(tmp_path, psp_reference, opts=dict(OPTS, encoder_type="SingleStyleCodeEncoder"))
    assert "SingleStyleCodeEncoder" in err and err.count("\n") == 1


def test_refuses_a_file_that_is_not_a_checkpoint(tmp_path):
    assert_command_refuses_a_non_checkpoint(
        "convert.e4e", tmp_path / "e4e_ffhq_encode_256.pt", tmp_path / "models"
    )
