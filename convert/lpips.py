"""LPIPS (AlexNet or VGG16 trunk + v0.1 linear weights) -> DIR/lpips_alex or DIR/lpips_vgg.

    python -m convert.lpips --net alex --trunk alexnet-owt-7be5be79.pth --out models/
    python -m convert.lpips --net vgg --trunk vgg16-397923af.pth --lin vgg.pth --out models/

--trunk is torchvision's ImageNet state_dict (``features.{j}.weight/bias``; its
``classifier.*`` entries are not needed and are skipped). --lin is the `lpips`
package's ``weights/v0.1/{net}.pth`` (``lin{k}.model.1.weight`` [1, C, 1, 1]); by
default the file shipped inside the installed `lpips` package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp

from convert import common
from dbaf_jax.models.lpips import LPIPS, TAP_CHANNELS
from dbaf_jax.storage import model_directory
from dbaf_jax.storage.model_directory import save_network

# Flax convolution name -> index j of torchvision's `features.{j}`.
TRUNK_CONVS = {
    "alex": {"conv1": 0, "conv2": 3, "conv3": 6, "conv4": 8, "conv5": 10},
    "vgg": {
        "conv1_1": 0, "conv1_2": 2,
        "conv2_1": 5, "conv2_2": 7,
        "conv3_1": 10, "conv3_2": 12, "conv3_3": 14,
        "conv4_1": 17, "conv4_2": 19, "conv4_3": 21,
        "conv5_1": 24, "conv5_2": 26, "conv5_3": 28,
    },
}  # fmt: skip


def network_name(net: str) -> str:
    return model_directory.lpips_dir(net)


def default_lin_path(net: str) -> Path | None:
    """The v0.1 weights inside the installed `lpips` package (found without importing it)."""
    spec = importlib.util.find_spec("lpips")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "weights" / "v0.1" / f"{net}.pth"
    return path if path.is_file() else None


def trunk_rules(net: str) -> dict:
    rules = {}
    for conv, j in TRUNK_CONVS[net].items():
        rules[("params", "trunk", conv, "kernel")] = common.Rule(
            f"features.{j}.weight", common.conv_kernel
        )
        rules[("params", "trunk", conv, "bias")] = common.Rule(f"features.{j}.bias")
    return rules


def linear_rules(net: str) -> dict:
    return {
        ("params", f"linear_{k}"): common.Rule(f"lin{k - 1}.model.1.weight", common.flatten)
        for k in range(1, len(TAP_CHANNELS[net]) + 1)
    }


def convert_lpips(
    net: str,
    lin_path: str | Path,
    trunk_path: str | Path,
    out_dir: str | Path,
    overwrite: bool = False,
) -> Path:
    """Converts the two files and writes ``out_dir/lpips_{net}``; returns that path."""
    if net not in TRUNK_CONVS:
        raise common.ConversionError(f"--net must be one of {sorted(TRUNK_CONVS)}, got {net!r}")
    target = common.refuse_existing(Path(out_dir) / network_name(net), overwrite)
    module = LPIPS(net=net)
    dummy = jnp.zeros((1, 64, 64, 3), jnp.float32)
    expected = jax.eval_shape(module.init, jax.random.key(0), dummy, dummy)["params"]
    expected_trunk = {"params": {"trunk": expected["trunk"]}}
    expected_linear = {"params": {k: v for k, v in expected.items() if k != "trunk"}}

    trunk_sd = common.to_numpy(common.load_torch_checkpoint(trunk_path), str(trunk_path))
    lin_sd = common.to_numpy(common.load_torch_checkpoint(lin_path), str(lin_path))
    # torchvision's full ImageNet model: the classifier head plays no part in LPIPS.
    trunk = common.map_state_dict(
        trunk_sd, trunk_rules(net), expected_trunk, str(trunk_path), ignore=("classifier.*",)
    )
    linear = common.map_state_dict(lin_sd, linear_rules(net), expected_linear, str(lin_path))
    variables = {"params": {**trunk["params"], **linear["params"]}}
    return save_network(
        target,
        module,
        variables,
        source=f"trunk: {trunk_path}; lin: {lin_path}",
        overwrite=overwrite,
    )


def main(argv: list[str] | None = None) -> None:
    inputs = {
        "--net": {"choices": sorted(TRUNK_CONVS), "default": "alex"},
        "--trunk": {"required": True, "help": "torchvision ImageNet state_dict (features.{j}.*)"},
        "--lin": {
            "help": "LPIPS v0.1 linear weights (default: the installed lpips package's file)"
        },
    }
    parser = common.converter_parser("python -m convert.lpips", __doc__.split("\n\n")[0], inputs)
    args = parser.parse_args(argv)
    lin = args.lin or default_lin_path(args.net)
    if lin is None:
        raise common.ConversionError(
            f"the lpips package is not installed: pass --lin (its weights/v0.1/{args.net}.pth)"
        )
    path = convert_lpips(args.net, lin, args.trunk, args.out, overwrite=args.overwrite)
    print(f"wrote {path}")


if __name__ == "__main__":
    common.run(main)
