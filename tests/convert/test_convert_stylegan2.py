"""convert.stylegan2 refuses files that do not fit, naming the keys, and reads configs from shapes."""

import pytest
import torch

from convert import stylegan2 as convert_stylegan2
from convert.common import run
from dbaf_jax.storage.model_directory import load_network
from tests.conversion import assert_command_refuses_a_non_checkpoint, edited, refusal, save
from tests.parity import randomize_
from tests.torch_reference import stylegan2 as ref


def small_generator(size=32, channel_multiplier=2, width_scale=1 / 16, seed=0):
    return ref.reset_fixed_kernels_(
        randomize_(ref.Generator(size, 16, 2, channel_multiplier, width_scale), seed)
    )


@pytest.fixture(scope="module")
def state_dicts():
    d = ref.reset_fixed_kernels_(randomize_(ref.Discriminator(32, width_scale=1 / 16), 1))
    return {"g_ema": small_generator().state_dict(), "d": d.state_dict()}


def argv(tmp_path, checkpoint, *flags):
    """Saves ``checkpoint``; the converter's arguments for it, writing to tmp_path/model."""
    return [
        "--ckpt",
        str(save(checkpoint, tmp_path / "ckpt.pt")),
        "--out",
        str(tmp_path / "model"),
        *flags,
    ]


def convert(tmp_path, checkpoint, *flags):
    run(convert_stylegan2.main, argv(tmp_path, checkpoint, *flags))


def refuse(tmp_path, checkpoint, *flags):
    """The refusal's stderr; nothing may be written when any part is refused."""
    return refusal(
        convert_stylegan2.main, argv(tmp_path, checkpoint, *flags), unwritten=tmp_path / "model"
    )


def edited_part(state_dicts, part, drop=(), add=None):
    """The checkpoint with one network's state_dict edited (see `edited`)."""
    return {**state_dicts, part: edited(state_dicts[part], drop, add)}


def test_converts_and_infers_config(tmp_path, state_dicts):
    convert(tmp_path, state_dicts)
    generator = load_network(tmp_path / "model" / "generator")
    assert (generator.module.size, generator.module.style_dim, generator.module.n_mlp) == (
        32,
        16,
        2,
    )
    assert generator.module.width_scale == 1 / 16
    assert load_network(tmp_path / "model" / "discriminator").module.size == 32
    assert not (tmp_path / "model" / "generator_raw").exists()


def test_bare_generator_state_dict_with_multiplier_1(tmp_path):
    """DBAF saves its fine-tuned decoder as a bare state_dict; the multiplier is read from shapes."""
    torch_g = small_generator(size=64, channel_multiplier=1, width_scale=1 / 8)
    convert(tmp_path, torch_g.state_dict())
    module = load_network(tmp_path / "model" / "generator").module
    assert (module.size, module.channel_multiplier, module.width_scale) == (64, 1, 1 / 8)


def test_missing_key(tmp_path, state_dicts):
    err = refuse(
        tmp_path, edited_part(state_dicts, "g_ema", drop=["convs.1.conv.weight", "noises.noise_2"])
    )
    assert "missing (2): convs.1.conv.weight, noises.noise_2" in err and ":g_ema" in err


def test_unexpected_key(tmp_path, state_dicts):
    err = refuse(
        tmp_path, edited_part(state_dicts, "d", add={"final_linear.2.weight": torch.zeros(1, 1)})
    )
    assert "unexpected (1): final_linear.2.weight" in err


def test_misshaped_key(tmp_path, state_dicts):
    err = refuse(
        tmp_path, edited_part(state_dicts, "g_ema", add={"to_rgb1.bias": torch.zeros(1, 4, 1, 1)})
    )
    assert "mis-shaped (1): to_rgb1.bias [1, 4, 1, 1]" in err


def test_wrong_size_flag_is_refused(tmp_path, state_dicts):
    err = refuse(tmp_path, state_dicts, "--size", "64")
    assert "missing" in err and "convs.6.conv.weight" in err and "noises.noise_8" in err


def test_blur_kernel_values_are_checked(tmp_path, state_dicts):
    kernel = state_dicts["g_ema"]["to_rgbs.0.upsample.kernel"]
    bad = edited_part(
        state_dicts,
        "g_ema",
        drop=["convs.2.conv.blur.kernel"],
        add={"to_rgbs.0.upsample.kernel": kernel / 4},
    )
    err = refuse(tmp_path, bad)
    assert "missing fixed kernels (1): convs.2.conv.blur.kernel" in err
    assert "differ from the expected blur kernel (1): to_rgbs.0.upsample.kernel" in err


def test_not_a_stylegan2_checkpoint(tmp_path):
    assert "no 'g_ema'" in refuse(tmp_path, {"state_dict": {"encoder.x": torch.zeros(1)}})


def test_existing_output_needs_overwrite(tmp_path, state_dicts):
    convert(tmp_path, state_dicts)
    assert "--overwrite" in refusal(convert_stylegan2.main, argv(tmp_path, state_dicts))
    convert(tmp_path, state_dicts, "--overwrite")


@pytest.mark.slow  # a converter process (torch and JAX imported)
def test_non_checkpoint_file_cli_exits_1_with_one_line(tmp_path):
    assert_command_refuses_a_non_checkpoint(
        "convert.stylegan2", tmp_path / "notes.pt", tmp_path / "model"
    )
