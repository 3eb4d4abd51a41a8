"""FaceNet InceptionResnetV1 (facenet-pytorch's published files) -> DIR/facenet_vggface2 or
DIR/facenet_casia_webface.

    python -m convert.facenet --ckpt 20180402-114759-vggface2.pt --out models/        # facenet_vggface2
    python -m convert.facenet --ckpt 20180408-102900-casia-webface.pt --out models/   # facenet_casia_webface

A published file is a plain state_dict: the embedding network (mapped below) plus the
classifier `logits.{weight,bias}`, which is not converted; its number of identities
(8631 or 10575) names the variant and so the output directory. Per `BasicConv2d`:
`<name>.conv.weight` -> `<name>/conv/kernel`, `<name>.bn.*` -> `<name>/bn`; a
Sequential index becomes a suffix (`repeat_2.3.branch1.1` -> `repeat_2_3/branch1_1`).
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

from convert import common
from convert.inception import basic_conv_rules
from convert.irse import batch_norm_rules, conv_rules
from dbaf_jax.models.facenet import INPUT_SIZE, InceptionResnetV1
from dbaf_jax.storage import model_directory
from dbaf_jax.storage.model_directory import save_network

VARIANTS = {8631: "vggface2", 10575: "casia_webface"}  # logits rows -> variant
IGNORED = ("*num_batches_tracked", "logits.weight", "logits.bias")

# The BasicConv2d units of each block, in the checkpoint's names.
STEM = ("conv2d_1a", "conv2d_2a", "conv2d_2b", "conv2d_3b", "conv2d_4a", "conv2d_4b")
BLOCK35 = ("branch0", "branch1.0", "branch1.1", "branch2.0", "branch2.1", "branch2.2")
BLOCK17_8 = ("branch0", "branch1.0", "branch1.1", "branch1.2")
MIXED_6A = ("branch0", "branch1.0", "branch1.1", "branch1.2")
MIXED_7A = (
    "branch0.0",
    "branch0.1",
    "branch1.0",
    "branch1.1",
    "branch2.0",
    "branch2.1",
    "branch2.2",
)
BLOCKS = (
    [(f"repeat_1.{i}", BLOCK35, True) for i in range(5)]
    + [("mixed_6a", MIXED_6A, False)]
    + [(f"repeat_2.{i}", BLOCK17_8, True) for i in range(10)]
    + [("mixed_7a", MIXED_7A, False)]
    + [(f"repeat_3.{i}", BLOCK17_8, True) for i in range(5)]
    + [("block8", BLOCK17_8, True)]
)  # (torch name, its BasicConv2d units, whether it ends in the residual conv2d)


def flax_name(torch_name: str) -> str:
    return torch_name.replace(".", "_")


def facenet_rules() -> dict:
    rules = {}
    for name in STEM:
        rules.update(basic_conv_rules((name,), name))
    for block, units, has_residual in BLOCKS:
        for unit in units:
            rules.update(basic_conv_rules((flax_name(block), flax_name(unit)), f"{block}.{unit}"))
        if has_residual:
            rules.update(conv_rules((flax_name(block), "conv2d"), f"{block}.conv2d", bias=True))
    rules[("params", "last_linear", "kernel")] = common.Rule(
        "last_linear.weight", common.linear_kernel
    )
    rules.update(batch_norm_rules(("last_bn",), "last_bn"))
    return rules


def variant_of(state_dict: dict, source: str) -> str:
    """'vggface2' or 'casia_webface' from the classifier size; refuses any other file."""
    logits = state_dict.get("logits.weight")
    if logits is None or "logits.bias" not in state_dict:
        raise common.ConversionError(
            f"{source}: no logits.weight/logits.bias, so not one of facenet-pytorch's published files"
        )
    rows = logits.shape[0]
    if rows not in VARIANTS or state_dict["logits.bias"].shape != (rows,):
        known = ", ".join(f"{n} ({v})" for n, v in VARIANTS.items())
        raise common.ConversionError(
            f"{source}: logits.weight {list(logits.shape)} / logits.bias {list(state_dict['logits.bias'].shape)} "
            f"match no published variant (identities: {known})"
        )
    return VARIANTS[rows]


def facenet_variables(state_dict: dict, source: str) -> dict:
    """The Flax variables of `InceptionResnetV1` from a facenet-pytorch state_dict (numpy arrays)."""
    dummy = jnp.zeros((1, INPUT_SIZE, INPUT_SIZE, 3), jnp.float32)
    expected = jax.eval_shape(InceptionResnetV1().init, jax.random.key(0), dummy)
    return common.map_state_dict(state_dict, facenet_rules(), expected, source, ignore=IGNORED)


def convert_facenet(ckpt: str | Path, out_dir: str | Path, overwrite: bool = False) -> Path:
    """Converts ``ckpt`` and writes ``out_dir/facenet_<variant>``; returns that path."""
    state_dict = common.to_numpy(common.load_torch_checkpoint(ckpt), str(ckpt))
    variant = variant_of(state_dict, str(ckpt))
    target = common.refuse_existing(Path(out_dir) / model_directory.facenet_dir(variant), overwrite)
    variables = facenet_variables(state_dict, str(ckpt))
    return save_network(
        target, InceptionResnetV1(), variables, source=str(ckpt), overwrite=overwrite
    )


def main(argv: list[str] | None = None) -> None:
    files = "20180402-114759-vggface2.pt or 20180408-102900-casia-webface.pt"
    parser = common.converter_parser(
        "python -m convert.facenet",
        "FaceNet InceptionResnetV1 -> DIR/facenet_vggface2 (20180402-114759-vggface2.pt) "
        "or DIR/facenet_casia_webface (20180408-102900-casia-webface.pt), told apart by the classifier size.",
        {"--ckpt": {"required": True, "help": files}},
    )
    args = parser.parse_args(argv)
    print(f"wrote {convert_facenet(args.ckpt, args.out, args.overwrite)}")


if __name__ == "__main__":
    common.run(main)
