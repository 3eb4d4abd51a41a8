"""Converts rosinality StyleGAN2 checkpoints (``stylegan2-ffhq-256.pt``) to dbaf_jax networks.

    python -m convert.stylegan2 --ckpt stylegan2-ffhq-256.pt --out DIR [--size 256] [--channel-multiplier 2]

writes ``DIR/generator`` from ``g_ema``, and when the file holds them ``DIR/generator_raw``
from ``g`` and ``DIR/discriminator`` from ``d``. A bare generator or discriminator
state_dict (DBAF saves its fine-tuned decoder and discriminator that way) is converted
to ``DIR/generator`` or ``DIR/discriminator``.

Size, widths, style_dim and n_mlp are read from the tensors' shapes unless given; the
mapping network's lr_mul cannot be read from a file (rosinality's default 0.01).
The fixed blur kernels (``*.blur.kernel``, ``*.upsample.kernel``, ``*.conv2.0.kernel``,
``*.skip.0.kernel``) are not stored in the Flax tree: they are checked to equal the
kernel the model computes, and a file whose kernel differs is refused.

Other converters reuse `generator_variables` / `discriminator_variables` on their own
sub-dictionaries (pSp's ``decoder.*``).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from convert.common import (
    ConversionError,
    Rule,
    conv_kernel,
    flatten,
    linear_kernel,
    load_torch_checkpoint,
    map_state_dict,
    run,
    to_numpy,
)
from dbaf_jax.models.stylegan2 import Discriminator, Generator
from dbaf_jax.nn.upfirdn import make_kernel
from dbaf_jax.storage import model_directory
from dbaf_jax.storage.model_directory import save_network


def modulated_kernel(x: np.ndarray) -> np.ndarray:
    """ModulatedConv2d weight (1, O, I, k, k) -> (k, k, I, O)."""
    return x[0].transpose(2, 3, 1, 0)


def nchw_to_nhwc(x: np.ndarray) -> np.ndarray:
    """(1, C, H, W) constant input or noise buffer -> (1, H, W, C)."""
    return x.transpose(0, 2, 3, 1)


def _equal_linear(prefix: str, torch_prefix: str) -> dict[tuple[str, ...], Rule]:
    return {
        ("params", *prefix.split("/"), "kernel"): Rule(f"{torch_prefix}.weight", linear_kernel),
        ("params", *prefix.split("/"), "bias"): Rule(f"{torch_prefix}.bias"),
    }


def _modulated_conv(prefix: str, torch_prefix: str) -> dict[tuple[str, ...], Rule]:
    return {
        ("params", *prefix.split("/"), "conv", "kernel"): Rule(
            f"{torch_prefix}.conv.weight", modulated_kernel
        ),
        **_equal_linear(f"{prefix}/conv/modulation", f"{torch_prefix}.conv.modulation"),
    }


def _styled_conv(prefix: str, torch_prefix: str) -> dict[tuple[str, ...], Rule]:
    return {
        **_modulated_conv(prefix, torch_prefix),
        ("params", prefix, "noise_weight"): Rule(f"{torch_prefix}.noise.weight", flatten),
        ("params", prefix, "bias"): Rule(f"{torch_prefix}.activate.bias"),
    }


def _to_rgb(prefix: str, torch_prefix: str) -> dict[tuple[str, ...], Rule]:
    return {
        **_modulated_conv(prefix, torch_prefix),
        ("params", prefix, "bias"): Rule(f"{torch_prefix}.bias", flatten),
    }


def generator_rules(module: Generator) -> tuple[dict[tuple[str, ...], Rule], dict[str, np.ndarray]]:
    """Flax leaf -> torch key rules for ``module``, and the fixed kernels the file must hold."""
    rules = {("params", "constant_input"): Rule("input.input", nchw_to_nhwc)}
    for i in range(module.n_mlp):
        rules.update(_equal_linear(f"mapping_{i}", f"style.{i + 1}"))
    rules.update(_styled_conv("conv1", "conv1"))
    rules.update(_to_rgb("to_rgb1", "to_rgb1"))
    upsample_kernel = make_kernel(gain=4.0)
    constants = {}
    for j in range(module.log_size - 2):
        for i in (2 * j, 2 * j + 1):
            rules.update(_styled_conv(f"convs_{i}", f"convs.{i}"))
        rules.update(_to_rgb(f"to_rgbs_{j}", f"to_rgbs.{j}"))
        constants[f"convs.{2 * j}.conv.blur.kernel"] = upsample_kernel
        constants[f"to_rgbs.{j}.upsample.kernel"] = upsample_kernel
    for i in range(module.num_noise):
        rules[("buffers", f"noise_{i}")] = Rule(f"noises.noise_{i}", nchw_to_nhwc)
    return rules, constants


def discriminator_rules(
    module: Discriminator,
) -> tuple[dict[tuple[str, ...], Rule], dict[str, np.ndarray]]:
    """Flax leaf -> torch key rules for ``module``, and the fixed kernels the file must hold."""
    rules = {
        ("params", "from_rgb", "conv", "kernel"): Rule("convs.0.0.weight", conv_kernel),
        ("params", "from_rgb", "bias"): Rule("convs.0.1.bias"),
        ("params", "final_conv", "conv", "kernel"): Rule("final_conv.0.weight", conv_kernel),
        ("params", "final_conv", "bias"): Rule("final_conv.1.bias"),
        **_equal_linear("final_linear_0", "final_linear.0"),
        **_equal_linear("final_linear_1", "final_linear.1"),
    }
    constants = {}
    for i in range(int(np.log2(module.size)) - 2):
        block, torch_block = ("params", f"res_blocks_{i}"), f"convs.{i + 1}"
        rules[(*block, "conv1", "conv", "kernel")] = Rule(
            f"{torch_block}.conv1.0.weight", conv_kernel
        )
        rules[(*block, "conv1", "bias")] = Rule(f"{torch_block}.conv1.1.bias")
        rules[(*block, "conv2", "conv", "kernel")] = Rule(
            f"{torch_block}.conv2.1.weight", conv_kernel
        )
        rules[(*block, "conv2", "bias")] = Rule(f"{torch_block}.conv2.2.bias")
        rules[(*block, "skip", "conv", "kernel")] = Rule(
            f"{torch_block}.skip.1.weight", conv_kernel
        )
        constants[f"{torch_block}.conv2.0.kernel"] = make_kernel()
        constants[f"{torch_block}.skip.0.kernel"] = make_kernel()
    return rules, constants


def _convert(
    state_dict: Mapping[str, np.ndarray],
    rules: dict[tuple[str, ...], Rule],
    constants: dict[str, np.ndarray],
    expected: Mapping[str, Any],
    source: str,
) -> dict[str, Any]:
    """map_state_dict plus the check of the fixed kernels, reported together."""
    problems = []
    absent = sorted(k for k in constants if k not in state_dict)
    if absent:
        problems.append(f"  missing fixed kernels ({len(absent)}): " + ", ".join(absent))
    wrong = sorted(
        k
        for k, kernel in constants.items()
        if k in state_dict
        and (
            np.shape(state_dict[k]) != kernel.shape
            or not np.allclose(state_dict[k], kernel, rtol=1e-6, atol=1e-7)
        )
    )
    if wrong:
        problems.append(
            f"  fixed kernels that differ from the expected blur kernel ({len(wrong)}): "
            + ", ".join(wrong)
        )
    try:
        variables = map_state_dict(state_dict, rules, expected, source, ignore=tuple(constants))
    except ConversionError as err:
        raise ConversionError("\n".join([str(err), *problems])) from None
    if problems:
        raise ConversionError(
            "\n".join([f"{source}: refusing to convert, the layout does not match", *problems])
        )
    return variables


def generator_variables(
    state_dict: Mapping[str, np.ndarray], module: Generator, source: str
) -> dict[str, Any]:
    """The variables of ``module`` (collections 'params', 'buffers') from a rosinality generator state_dict.

    ``state_dict`` maps rosinality's keys (``style.1.weight``, ``convs.0.conv.weight``,
    ``noises.noise_0``...) to numpy arrays; every key must be used and every leaf found.
    """
    expected = jax.eval_shape(
        module.init,
        jax.random.key(0),
        jax.ShapeDtypeStruct((1, module.n_latent, module.style_dim), jnp.float32),
    )
    rules, constants = generator_rules(module)
    return _convert(state_dict, rules, constants, expected, source)


def discriminator_variables(
    state_dict: Mapping[str, np.ndarray], module: Discriminator, source: str
) -> dict[str, Any]:
    """The variables of ``module`` (collection 'params') from a rosinality discriminator state_dict."""
    expected = jax.eval_shape(
        module.init,
        jax.random.key(0),
        jax.ShapeDtypeStruct((1, module.size, module.size, 3), jnp.float32),
    )
    rules, constants = discriminator_rules(module)
    return _convert(state_dict, rules, constants, expected, source)


def _indices(state_dict: Mapping[str, np.ndarray], pattern: str) -> list[int]:
    return sorted({int(m.group(1)) for k in state_dict if (m := re.fullmatch(pattern, k))})


def _require(state_dict: Mapping[str, np.ndarray], key: str, source: str, what: str) -> np.ndarray:
    if key not in state_dict:
        raise ConversionError(
            f"{source}: not a rosinality StyleGAN2 {what} state_dict (no {key!r})"
        )
    return state_dict[key]


def _channel_multiplier(channels: int | None, size: int, width_scale: float) -> int:
    """The multiplier that gives ``channels`` at resolution ``size``; 2 where they do not tell."""
    if channels is None or size < 64:
        return 2
    return max(1, round(channels / ((16384 // size) * width_scale)))


def infer_generator(
    state_dict: Mapping[str, np.ndarray],
    source: str,
    size: int | None = None,
    channel_multiplier: int | None = None,
    lr_mlp: float = 0.01,
) -> Generator:
    """The Generator a rosinality generator state_dict describes; ``size`` etc. override the file."""
    constant = _require(state_dict, "input.input", source, "generator")
    style_dim = int(
        _require(state_dict, "conv1.conv.modulation.weight", source, "generator").shape[1]
    )
    n_mlp = len(_indices(state_dict, r"style\.(\d+)\.weight"))
    if size is None:
        size = 2 ** (len(_indices(state_dict, r"to_rgbs\.(\d+)\.conv\.weight")) + 2)
    width_scale = int(constant.shape[1]) / 512
    if channel_multiplier is None:
        last_conv = state_dict.get(f"convs.{2 * (int(np.log2(size)) - 3)}.conv.weight")
        channels = None if last_conv is None else int(last_conv.shape[1])
        channel_multiplier = _channel_multiplier(channels, size, width_scale)
    return Generator(
        size=size,
        style_dim=style_dim,
        n_mlp=n_mlp,
        channel_multiplier=channel_multiplier,
        width_scale=width_scale,
        lr_mlp=lr_mlp,
    )


def infer_discriminator(
    state_dict: Mapping[str, np.ndarray],
    source: str,
    size: int | None = None,
    channel_multiplier: int | None = None,
) -> Discriminator:
    """The Discriminator a rosinality discriminator state_dict describes; flags override the file."""
    last = _require(state_dict, "final_linear.1.weight", source, "discriminator")
    from_rgb = _require(state_dict, "convs.0.0.weight", source, "discriminator")
    if size is None:
        size = 2 ** (len(_indices(state_dict, r"convs\.(\d+)\.conv1\.0\.weight")) + 2)
    width_scale = int(last.shape[1]) / 512
    if channel_multiplier is None:
        channel_multiplier = _channel_multiplier(int(from_rgb.shape[0]), size, width_scale)
    return Discriminator(size=size, channel_multiplier=channel_multiplier, width_scale=width_scale)


def convert_checkpoint(
    checkpoint: Any,
    source: str,
    size: int | None = None,
    channel_multiplier: int | None = None,
    lr_mlp: float = 0.01,
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """{network name: (module, variables)} for everything the checkpoint holds."""
    if not isinstance(checkpoint, Mapping):
        raise ConversionError(f"{source}: expected a dict, found {type(checkpoint).__name__}")
    if "g_ema" in checkpoint:
        parts = {
            model_directory.GENERATOR_DIR: "g_ema",
            model_directory.GENERATOR_RAW_DIR: "g",
            model_directory.DISCRIMINATOR_DIR: "d",
        }
        parts = {name: key for name, key in parts.items() if key in checkpoint}
        state_dicts = {
            name: (to_numpy(checkpoint[key], f"{source}:{key}"), f"{source}:{key}")
            for name, key in parts.items()
        }
    elif "input.input" in checkpoint:
        state_dicts = {model_directory.GENERATOR_DIR: (to_numpy(checkpoint, source), source)}
    elif "final_linear.0.weight" in checkpoint:
        state_dicts = {"discriminator": (to_numpy(checkpoint, source), source)}
    else:
        raise ConversionError(
            f"{source}: neither a rosinality training checkpoint (no 'g_ema') "
            "nor a generator or discriminator state_dict"
        )
    networks = {}
    for name, (state_dict, part_source) in state_dicts.items():
        if name == "discriminator":
            module = infer_discriminator(state_dict, part_source, size, channel_multiplier)
            networks[name] = (module, discriminator_variables(state_dict, module, part_source))
        else:
            module = infer_generator(state_dict, part_source, size, channel_multiplier, lr_mlp)
            networks[name] = (module, generator_variables(state_dict, module, part_source))
    return networks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ckpt", required=True, help="rosinality checkpoint (.pt) or a bare G/D state_dict"
    )
    parser.add_argument("--out", required=True, help="model directory to write the networks into")
    parser.add_argument(
        "--size", type=int, default=None, help="image size (default: read from the file)"
    )
    parser.add_argument(
        "--channel-multiplier", type=int, default=None, help="default: read from the file, else 2"
    )
    parser.add_argument(
        "--lr-mlp", type=float, default=0.01, help="mapping lr multiplier (default 0.01)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace networks already in --out"
    )
    args = parser.parse_args(argv)

    checkpoint = load_torch_checkpoint(args.ckpt)
    networks = convert_checkpoint(
        checkpoint, str(args.ckpt), args.size, args.channel_multiplier, args.lr_mlp
    )
    out = Path(args.out)
    for name in networks:
        if (out / name).exists() and not args.overwrite:
            raise ConversionError(f"{out / name} exists; pass --overwrite to replace it")
    for name, (module, variables) in networks.items():
        save_network(
            out / name,
            module,
            variables,
            source=f"{Path(args.ckpt).name}",
            overwrite=args.overwrite,
        )
        print(f"wrote {out / name} ({type(module).__name__}, size {module.size})")


if __name__ == "__main__":
    run(main)
