"""ArcFace IR-SE50 (`model_ir_se50.pth`, a plain state_dict of 397 entries) -> DIR/arcface.

    python -m convert.arcface --ckpt model_ir_se50.pth --out models/

Keys: the IR-SE body (`input_layer.*`, `body.*`, mapped by convert/irse.py) and
`output_layer.{0: BatchNorm2d, 3: Linear 25088 -> 512, 4: BatchNorm1d}`. The Linear's
input rows are permuted from PyTorch's NCHW flattening to the NHWC flattening of
dbaf_jax.models.arcface.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from convert import common
from convert.irse import IGNORED, batch_norm_rules, irse_body_rules
from dbaf_jax.models.arcface import INPUT_SIZE, ArcFace
from dbaf_jax.models.irse import unit_specs
from dbaf_jax.storage import model_directory
from dbaf_jax.storage.model_directory import save_network

NETWORK_NAME = model_directory.ARCFACE_DIR


def nchw_flatten_linear_kernel(channels: int, side: int):
    """Linear weight (out, C*side*side) over an NCHW flattening -> Flax kernel (side*side*C, out)
    over an NHWC flattening."""

    def transform(weight: np.ndarray) -> np.ndarray:
        if weight.ndim != 2 or weight.shape[1] != channels * side * side:
            return weight.T  # wrong size: let common.map_state_dict report it as mis-shaped
        out = weight.shape[0]
        return weight.reshape(out, channels, side, side).transpose(2, 3, 1, 0).reshape(-1, out)

    return transform


def arcface_rules(module: ArcFace) -> dict:
    rules = irse_body_rules(("body",), module.num_layers, module.width_scale)
    rules.update(batch_norm_rules(("output_bn2d",), "output_layer.0"))
    channels = unit_specs(module.num_layers, module.width_scale)[-1][1]
    side = INPUT_SIZE // 16  # four stride-2 stages: 112 -> 7
    rules[("params", "output_linear", "kernel")] = common.Rule(
        "output_layer.3.weight", nchw_flatten_linear_kernel(channels, side)
    )
    rules[("params", "output_linear", "bias")] = common.Rule("output_layer.3.bias")
    rules.update(batch_norm_rules(("output_bn1d",), "output_layer.4"))
    return rules


def arcface_variables(state_dict: dict, module: ArcFace, source: str) -> dict:
    """The Flax variables of ``module`` from an IR-SE ArcFace state_dict (numpy arrays)."""
    dummy = jnp.zeros((1, INPUT_SIZE, INPUT_SIZE, 3), jnp.float32)
    expected = jax.eval_shape(module.init, jax.random.key(0), dummy)
    return common.map_state_dict(
        state_dict, arcface_rules(module), expected, source, ignore=IGNORED
    )


def convert_arcface(
    ckpt: str | Path, out_dir: str | Path, width_scale: float = 1.0, overwrite: bool = False
) -> Path:
    """Converts ``ckpt`` and writes ``out_dir/arcface``; returns that path."""
    target = common.refuse_existing(Path(out_dir) / NETWORK_NAME, overwrite)
    checkpoint = common.load_torch_checkpoint(ckpt)
    module = ArcFace(width_scale=width_scale)
    variables = arcface_variables(common.to_numpy(checkpoint, str(ckpt)), module, str(ckpt))
    return save_network(target, module, variables, source=str(ckpt), overwrite=overwrite)


def main(argv: list[str] | None = None) -> None:
    parser = common.converter_parser(
        "python -m convert.arcface",
        __doc__.split("\n\n")[0],
        {"--ckpt": {"required": True, "help": "model_ir_se50.pth"}},
        {
            "--width-scale": common.width_scale_option(
                "channel multiplier (1.0 for the public file)"
            )
        },
    )
    args = parser.parse_args(argv)
    print(f"wrote {convert_arcface(args.ckpt, args.out, args.width_scale, args.overwrite)}")


if __name__ == "__main__":
    common.run(main)
