"""The FID Inception (`pt_inception-2015-12-05-6726825d.pth`, pytorch-fid's weights) -> DIR/inception_fid.

    python -m convert.inception --ckpt pt_inception-2015-12-05-6726825d.pth --out models/

The file is a plain state_dict in torchvision's Inception v3 names. Per `BasicConv2d`:
`<block>.<unit>.conv.weight` -> `<block>/<unit>/conv/kernel` and `<block>.<unit>.bn.*`
-> `<block>/<unit>/bn` (the Flax names are the checkpoint's). The classifier `fc.*`
(1008 classes) is not converted: the FID features are the pool before it.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

from convert import common
from convert.irse import batch_norm_rules, conv_rules
from dbaf_jax.models.inception import INPUT_SIZE, FIDInceptionV3
from dbaf_jax.storage import model_directory
from dbaf_jax.storage.model_directory import save_network

NETWORK_NAME = model_directory.INCEPTION_FID_DIR
IGNORED = ("*num_batches_tracked", "fc.weight", "fc.bias")

# The BasicConv2d units of each block type, in the checkpoint's names.
STEM = ("Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "Conv2d_3b_1x1", "Conv2d_4a_3x3")
INCEPTION_A = (
    "branch1x1",
    "branch5x5_1",
    "branch5x5_2",
    "branch3x3dbl_1",
    "branch3x3dbl_2",
    "branch3x3dbl_3",
    "branch_pool",
)
INCEPTION_B = ("branch3x3", "branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3")
INCEPTION_C = (
    "branch1x1",
    "branch7x7_1",
    "branch7x7_2",
    "branch7x7_3",
    "branch7x7dbl_1",
    "branch7x7dbl_2",
    "branch7x7dbl_3",
    "branch7x7dbl_4",
    "branch7x7dbl_5",
    "branch_pool",
)
INCEPTION_D = (
    "branch3x3_1",
    "branch3x3_2",
    "branch7x7x3_1",
    "branch7x7x3_2",
    "branch7x7x3_3",
    "branch7x7x3_4",
)
INCEPTION_E = (
    "branch1x1",
    "branch3x3_1",
    "branch3x3_2a",
    "branch3x3_2b",
    "branch3x3dbl_1",
    "branch3x3dbl_2",
    "branch3x3dbl_3a",
    "branch3x3dbl_3b",
    "branch_pool",
)
BLOCKS = {
    "Mixed_5b": INCEPTION_A,
    "Mixed_5c": INCEPTION_A,
    "Mixed_5d": INCEPTION_A,
    "Mixed_6a": INCEPTION_B,
    "Mixed_6b": INCEPTION_C,
    "Mixed_6c": INCEPTION_C,
    "Mixed_6d": INCEPTION_C,
    "Mixed_6e": INCEPTION_C,
    "Mixed_7a": INCEPTION_D,
    "Mixed_7b": INCEPTION_E,
    "Mixed_7c": INCEPTION_E,
}


def basic_conv_rules(flax_path: tuple[str, ...], torch_prefix: str) -> dict:
    """A `BasicConv2d` (`.conv` without bias, `.bn`) -> dbaf_jax.nn.basic_conv.BasicConv."""
    rules = conv_rules((*flax_path, "conv"), f"{torch_prefix}.conv")
    rules.update(batch_norm_rules((*flax_path, "bn"), f"{torch_prefix}.bn"))
    return rules


def inception_rules() -> dict:
    rules = {}
    for name in STEM:
        rules.update(basic_conv_rules((name,), name))
    for block, units in BLOCKS.items():
        for unit in units:
            rules.update(basic_conv_rules((block, unit), f"{block}.{unit}"))
    return rules


def inception_variables(state_dict: dict, source: str) -> dict:
    """The Flax variables of `FIDInceptionV3` from the FID Inception state_dict (numpy arrays)."""
    dummy = jnp.zeros((1, INPUT_SIZE, INPUT_SIZE, 3), jnp.float32)
    expected = jax.eval_shape(FIDInceptionV3().init, jax.random.key(0), dummy)
    return common.map_state_dict(state_dict, inception_rules(), expected, source, ignore=IGNORED)


def convert_inception(ckpt: str | Path, out_dir: str | Path, overwrite: bool = False) -> Path:
    """Converts ``ckpt`` and writes ``out_dir/inception_fid``; returns that path."""
    target = common.refuse_existing(Path(out_dir) / NETWORK_NAME, overwrite)
    variables = inception_variables(
        common.to_numpy(common.load_torch_checkpoint(ckpt), str(ckpt)), str(ckpt)
    )
    return save_network(target, FIDInceptionV3(), variables, source=str(ckpt), overwrite=overwrite)


def main(argv: list[str] | None = None) -> None:
    parser = common.converter_parser(
        "python -m convert.inception",
        "pytorch-fid's FID Inception (pt_inception-2015-12-05-6726825d.pth) -> DIR/inception_fid.",
        {"--ckpt": {"required": True, "help": "pt_inception-2015-12-05-6726825d.pth"}},
    )
    args = parser.parse_args(argv)
    print(f"wrote {convert_inception(args.ckpt, args.out, args.overwrite)}")


if __name__ == "__main__":
    common.run(main)
