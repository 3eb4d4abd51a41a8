"""convert.stylegan2 refuses files that do not fit, naming the keys, and reads configs from shapes."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from convert import stylegan2 as convert_stylegan2
from convert.common import run
from dbaf_jax.model_directory import load_network
from tests.parity import randomize_
from tests.torch_reference import stylegan2 as ref

REPO = Path(__file__).resolve().parents[1]


def small_generator(size=32, channel_multiplier=2, width_scale=1 / 16, seed=0):
    return ref.reset_fixed_kernels_(randomize_(ref.Generator(size, 16, 2, channel_multiplier, width_scale), seed))


@pytest.fixture(scope="module")
def state_dicts():
    d = ref.reset_fixed_kernels_(randomize_(ref.Discriminator(32, width_scale=1 / 16), 1))
    return {"g_ema": small_generator().state_dict(), "d": d.state_dict()}


def convert(tmp_path, checkpoint, *flags):
    """Saves ``checkpoint`` and runs the converter in-process; returns (exit code, stderr text)."""
    ckpt = tmp_path / "ckpt.pt"
    torch.save(checkpoint, ckpt)
    try:
        run(convert_stylegan2.main, ["--ckpt", str(ckpt), "--out", str(tmp_path / "model"), *flags])
    except SystemExit as exit_:
        return exit_.code
    return 0


def edited(state_dicts, part, drop=(), add=None):
    part_dict = {k: v for k, v in state_dicts[part].items() if k not in drop}
    part_dict.update(add or {})
    return {**state_dicts, part: part_dict}


def test_converts_and_infers_config(tmp_path, state_dicts):
    assert convert(tmp_path, state_dicts) == 0
    generator = load_network(tmp_path / "model" / "generator")
    assert (generator.module.size, generator.module.style_dim, generator.module.n_mlp) == (32, 16, 2)
    assert generator.module.width_scale == 1 / 16
    assert load_network(tmp_path / "model" / "discriminator").module.size == 32
    assert not (tmp_path / "model" / "generator_raw").exists()


def test_bare_generator_state_dict_with_multiplier_1(tmp_path):
    """DBAF saves its fine-tuned decoder as a bare state_dict; the multiplier is read from shapes."""
    torch_g = small_generator(size=64, channel_multiplier=1, width_scale=1 / 8)
    assert convert(tmp_path, torch_g.state_dict()) == 0
    module = load_network(tmp_path / "model" / "generator").module
    assert (module.size, module.channel_multiplier, module.width_scale) == (64, 1, 1 / 8)


def test_missing_key(tmp_path, state_dicts, capsys):
    code = convert(tmp_path, edited(state_dicts, "g_ema", drop=["convs.1.conv.weight", "noises.noise_2"]))
    err = capsys.readouterr().err
    assert code == 1
    assert "missing (2): convs.1.conv.weight, noises.noise_2" in err and ":g_ema" in err
    assert not (tmp_path / "model").exists()  # nothing written when any part is refused


def test_unexpected_key(tmp_path, state_dicts, capsys):
    code = convert(tmp_path, edited(state_dicts, "d", add={"final_linear.2.weight": torch.zeros(1, 1)}))
    assert code == 1
    assert "unexpected (1): final_linear.2.weight" in capsys.readouterr().err


def test_misshaped_key(tmp_path, state_dicts, capsys):
    code = convert(tmp_path, edited(state_dicts, "g_ema", add={"to_rgb1.bias": torch.zeros(1, 4, 1, 1)}))
    err = capsys.readouterr().err
    assert code == 1
    assert "mis-shaped (1): to_rgb1.bias [1, 4, 1, 1]" in err


def test_wrong_size_flag_is_refused(tmp_path, state_dicts, capsys):
    assert convert(tmp_path, state_dicts, "--size", "64") == 1
    err = capsys.readouterr().err
    assert "missing" in err and "convs.6.conv.weight" in err and "noises.noise_8" in err


def test_blur_kernel_values_are_checked(tmp_path, state_dicts, capsys):
    kernel = state_dicts["g_ema"]["to_rgbs.0.upsample.kernel"]
    bad = edited(state_dicts, "g_ema", drop=["convs.2.conv.blur.kernel"], add={"to_rgbs.0.upsample.kernel": kernel / 4})
    assert convert(tmp_path, bad) == 1
    err = capsys.readouterr().err
    assert "missing fixed kernels (1): convs.2.conv.blur.kernel" in err
    assert "differ from the expected blur kernel (1): to_rgbs.0.upsample.kernel" in err


def test_not_a_stylegan2_checkpoint(tmp_path, capsys):
    assert convert(tmp_path, {"state_dict": {"encoder.x": torch.zeros(1)}}) == 1
    assert "no 'g_ema'" in capsys.readouterr().err


def test_existing_output_needs_overwrite(tmp_path, state_dicts, capsys):
    assert convert(tmp_path, state_dicts) == 0
    assert convert(tmp_path, state_dicts) == 1
    assert "--overwrite" in capsys.readouterr().err
    assert convert(tmp_path, state_dicts, "--overwrite") == 0


def test_non_checkpoint_file_cli_exits_1_with_one_line(tmp_path):
    bogus = tmp_path / "notes.pt"
    bogus.write_text("not a checkpoint\n")
    result = subprocess.run(
        [sys.executable, "-m", "convert.stylegan2", "--ckpt", str(bogus), "--out", str(tmp_path / "model")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "notes.pt" in lines[0]
    assert not (tmp_path / "model").exists()
    assert result.stdout == ""
