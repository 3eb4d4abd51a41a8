"""Face parsers -> DIR/parser_unet (DBAF's parsenet.pth) or DIR/parser_bisenet (79999_iter.pth).

    python -m convert.parser --kind unet --ckpt parsenet.pth --out models/
    python -m convert.parser --kind bisenet --ckpt 79999_iter.pth --out models/

Both files are plain state_dicts: parsenet.pth has 136 entries (DBAF's `unet`,
feature_scale 4), 79999_iter.pth 191 (face-parsing.PyTorch's BiSeNet, 19 classes).
BatchNorm's ``num_batches_tracked`` counters are not needed and are skipped.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

from convert import common
from dbaf_jax.models.parsers import BiSeNet, UNetParser
from dbaf_jax.storage import model_directory
from dbaf_jax.storage.model_directory import save_network

KINDS = ("unet", "bisenet")
IGNORED = ("*num_batches_tracked",)


def transposed_conv_kernel(x):
    """PyTorch ConvTranspose2d weight (Cin, Cout, kh, kw) -> (kh, kw, Cin, Cout)."""
    return x.transpose(2, 3, 0, 1)


def conv_rules(path: tuple, key: str, bias: bool = False) -> dict:
    rules = {("params", *path, "kernel"): common.Rule(f"{key}.weight", common.conv_kernel)}
    if bias:
        rules[("params", *path, "bias")] = common.Rule(f"{key}.bias")
    return rules


def bn_rules(path: tuple, key: str) -> dict:
    return {
        ("params", *path, "scale"): common.Rule(f"{key}.weight"),
        ("params", *path, "bias"): common.Rule(f"{key}.bias"),
        ("batch_stats", *path, "mean"): common.Rule(f"{key}.running_mean"),
        ("batch_stats", *path, "var"): common.Rule(f"{key}.running_var"),
    }


def conv_bn_relu_rules(path: tuple, conv_key: str, bn_key: str, bias: bool = False) -> dict:
    """A Flax ConvBNReLU at ``path`` from a torch conv and BatchNorm."""
    return {**conv_rules((*path, "conv"), conv_key, bias), **bn_rules((*path, "bn"), bn_key)}


def unet_rules() -> dict:
    rules = {}

    def block(path: tuple, key: str) -> None:
        for i in (1, 2):  # torch: conv{i} = Sequential(Conv2d, BatchNorm2d, ReLU)
            rules.update(
                conv_bn_relu_rules(
                    (*path, f"conv{i}"), f"{key}.conv{i}.0", f"{key}.conv{i}.1", bias=True
                )
            )

    for name in ("conv1", "conv2", "conv3", "conv4", "center"):
        block((name,), name)
    for level in (1, 2, 3, 4):
        name = f"up_concat{level}"
        rules[("params", name, "up", "kernel")] = common.Rule(
            f"{name}.up.weight", transposed_conv_kernel
        )
        rules[("params", name, "up", "bias")] = common.Rule(f"{name}.up.bias")
        block((name, "conv"), f"{name}.conv")
    rules.update(conv_rules(("final",), "final", bias=True))
    return rules


def bisenet_rules() -> dict:
    rules = {}
    resnet = ("context_path", "resnet")
    rules.update(conv_bn_relu_rules((*resnet, "stem"), "cp.resnet.conv1", "cp.resnet.bn1"))
    for stage in (1, 2, 3, 4):
        for index in (0, 1):
            path, key = (*resnet, f"layer{stage}_{index}"), f"cp.resnet.layer{stage}.{index}"
            rules.update(conv_bn_relu_rules((*path, "conv1"), f"{key}.conv1", f"{key}.bn1"))
            rules.update(conv_rules((*path, "conv2"), f"{key}.conv2"))
            rules.update(bn_rules((*path, "bn2"), f"{key}.bn2"))
            if stage > 1 and index == 0:
                rules.update(conv_rules((*path, "downsample_conv"), f"{key}.downsample.0"))
                rules.update(bn_rules((*path, "downsample_bn"), f"{key}.downsample.1"))
    for arm in ("arm16", "arm32"):
        path, key = ("context_path", arm), f"cp.{arm}"
        rules.update(conv_bn_relu_rules((*path, "conv"), f"{key}.conv.conv", f"{key}.conv.bn"))
        rules.update(conv_rules((*path, "gate_conv"), f"{key}.conv_atten"))
        rules.update(bn_rules((*path, "gate_bn"), f"{key}.bn_atten"))
    for name in ("conv_head32", "conv_head16", "conv_avg"):
        rules.update(conv_bn_relu_rules(("context_path", name), f"cp.{name}.conv", f"cp.{name}.bn"))
    rules.update(conv_bn_relu_rules(("ffm", "convblk"), "ffm.convblk.conv", "ffm.convblk.bn"))
    rules.update(conv_rules(("ffm", "conv1"), "ffm.conv1"))
    rules.update(conv_rules(("ffm", "conv2"), "ffm.conv2"))
    for head, key in (("head", "conv_out"), ("head16", "conv_out16"), ("head32", "conv_out32")):
        rules.update(conv_bn_relu_rules((head, "conv"), f"{key}.conv.conv", f"{key}.conv.bn"))
        rules.update(conv_rules((head, "classifier"), f"{key}.conv_out"))
    return rules


def network_name(kind: str) -> str:
    return model_directory.parser_dir(kind)


def convert_parser(
    kind: str, ckpt: str | Path, out_dir: str | Path, overwrite: bool = False
) -> Path:
    """Converts ``ckpt`` and writes ``out_dir/parser_{kind}``; returns that path."""
    if kind not in KINDS:
        raise common.ConversionError(f"--kind must be one of {KINDS}, got {kind!r}")
    target = common.refuse_existing(Path(out_dir) / network_name(kind), overwrite)
    state_dict = common.to_numpy(common.load_torch_checkpoint(ckpt), str(ckpt))
    dummy = jnp.zeros((1, 64, 64, 3), jnp.float32)
    if kind == "unet":
        module, rules = UNetParser(), unet_rules()
        expected = jax.eval_shape(module.init, jax.random.key(0), dummy)
    else:
        module, rules = BiSeNet(), bisenet_rules()
        # with_aux creates the two auxiliary heads too, so the whole file converts.
        expected = jax.eval_shape(lambda: module.init(jax.random.key(0), dummy, with_aux=True))
    variables = common.map_state_dict(state_dict, rules, expected, str(ckpt), ignore=IGNORED)
    return save_network(target, module, variables, source=str(ckpt), overwrite=overwrite)


def main(argv: list[str] | None = None) -> None:
    inputs = {
        "--kind": {"choices": KINDS, "required": True},
        "--ckpt": {"required": True, "help": "parsenet.pth (unet) or 79999_iter.pth (bisenet)"},
    }
    parser = common.converter_parser("python -m convert.parser", __doc__.split("\n\n")[0], inputs)
    args = parser.parse_args(argv)
    print(f"wrote {convert_parser(args.kind, args.ckpt, args.out, overwrite=args.overwrite)}")


if __name__ == "__main__":
    common.run(main)
