"""Key mapping of the IR-SE body (stem + bottleneck_IR_SE units), shared by the e4e/pSp
and ArcFace converters: one body, one mapping. Not a command by itself.

PyTorch names (see dbaf_jax/models/irse.py) -> Flax names:
  input_layer.{0,1,2}                 -> stem_conv, stem_bn, stem_prelu
  body.{i}.res_layer.{0,1,2,3,4}      -> unit_i/{bn_in, conv_1, prelu, conv_2, bn_out}
  body.{i}.res_layer.5.fc1/fc2        -> unit_i/se/fc_reduce, fc_expand
  body.{i}.shortcut_layer.{0,1}       -> unit_i/shortcut_conv, shortcut_bn
BatchNorm `num_batches_tracked` counters are not needed in inference (see IGNORED).
"""

from __future__ import annotations

from convert.common import Rule, conv_kernel
from dbaf_jax.models.irse import unit_specs

Path_ = tuple[str, ...]
IGNORED = ("*num_batches_tracked",)


def batch_norm_rules(flax_path: Path_, torch_prefix: str) -> dict[Path_, Rule]:
    """PyTorch BatchNorm (weight, bias, running_mean, running_var) -> Flax BatchNorm."""
    return {
        ("params", *flax_path, "scale"): Rule(f"{torch_prefix}.weight"),
        ("params", *flax_path, "bias"): Rule(f"{torch_prefix}.bias"),
        ("batch_stats", *flax_path, "mean"): Rule(f"{torch_prefix}.running_mean"),
        ("batch_stats", *flax_path, "var"): Rule(f"{torch_prefix}.running_var"),
    }


def conv_rules(flax_path: Path_, torch_prefix: str, bias: bool = False) -> dict[Path_, Rule]:
    """PyTorch Conv2d -> Flax Conv (OIHW -> HWIO)."""
    rules = {("params", *flax_path, "kernel"): Rule(f"{torch_prefix}.weight", conv_kernel)}
    if bias:
        rules[("params", *flax_path, "bias")] = Rule(f"{torch_prefix}.bias")
    return rules


def prelu_rules(flax_path: Path_, torch_prefix: str) -> dict[Path_, Rule]:
    return {("params", *flax_path, "slope"): Rule(f"{torch_prefix}.weight")}


def irse_body_rules(
    flax_path: Path_, num_layers: int = 50, width_scale: float = 1.0
) -> dict[Path_, Rule]:
    """Rules for an `IRSEBody` at ``flax_path`` from the top-level `input_layer.*`/`body.*` keys."""
    rules = {}
    rules.update(conv_rules((*flax_path, "stem_conv"), "input_layer.0"))
    rules.update(batch_norm_rules((*flax_path, "stem_bn"), "input_layer.1"))
    rules.update(prelu_rules((*flax_path, "stem_prelu"), "input_layer.2"))
    for i, (in_channels, out_channels, _) in enumerate(unit_specs(num_layers, width_scale)):
        unit, res = (*flax_path, f"unit_{i}"), f"body.{i}.res_layer"
        rules.update(batch_norm_rules((*unit, "bn_in"), f"{res}.0"))
        rules.update(conv_rules((*unit, "conv_1"), f"{res}.1"))
        rules.update(prelu_rules((*unit, "prelu"), f"{res}.2"))
        rules.update(conv_rules((*unit, "conv_2"), f"{res}.3"))
        rules.update(batch_norm_rules((*unit, "bn_out"), f"{res}.4"))
        rules.update(conv_rules((*unit, "se", "fc_reduce"), f"{res}.5.fc1"))
        rules.update(conv_rules((*unit, "se", "fc_expand"), f"{res}.5.fc2"))
        if in_channels != out_channels:
            rules.update(conv_rules((*unit, "shortcut_conv"), f"body.{i}.shortcut_layer.0"))
            rules.update(batch_norm_rules((*unit, "shortcut_bn"), f"body.{i}.shortcut_layer.1"))
    return rules
