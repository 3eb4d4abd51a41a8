"""DBAF's own stage checkpoints (CID, MAAR, KRIA): their key tables and the
architectures their tensors' shapes give (what `convert.dbaf` reads and checks).

- CID, ``w_disentanglement*.pth`` (``DisentanglementId``) -> `cid_variables`, `infer_cid`
- MAAR, ``attr_block*.pth`` (``AttrBlock``) -> `maar_variables`, `infer_maar`
- KRIA, ``*id_mlp*.pth`` (``AnonymizationNet``) -> `kria_variables`, `infer_kria`

Each ``*_variables`` takes the state_dict as numpy arrays (`convert.common.to_numpy`),
the Flax module it is for, and the file name for messages, and returns the module's
variable tree, refusing the file (ConversionError) on any missing, unexpected or
mis-shaped key.
"""

from __future__ import annotations

import re
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from convert.common import ConversionError, Rule, conv_kernel, linear_kernel, map_state_dict
from dbaf_jax.models.dbaf.cid import CID
from dbaf_jax.models.dbaf.kria import KRIA
from dbaf_jax.models.dbaf.maar import MAAR

Array = np.ndarray

# PyTorch keeps a step counter beside BatchNorm statistics; with a fixed momentum it is unused.
_BATCH_COUNTERS = ("*.num_batches_tracked",)


def _drop_singleton_middle(x: Array) -> Array:
    """The reference's positional embedding (n_latent, 1, dim) -> (n_latent, dim)."""
    return x[:, 0, :] if x.ndim == 3 and x.shape[1] == 1 else x


def _linear(rules: dict, flax_path: tuple[str, ...], torch_prefix: str, bias: bool = True) -> None:
    rules[(*flax_path, "kernel")] = Rule(f"{torch_prefix}.weight", linear_kernel)
    if bias:
        rules[(*flax_path, "bias")] = Rule(f"{torch_prefix}.bias")


def _layer_norm(rules: dict, flax_path: tuple[str, ...], torch_prefix: str) -> None:
    rules[(*flax_path, "scale")] = Rule(f"{torch_prefix}.weight")
    rules[(*flax_path, "bias")] = Rule(f"{torch_prefix}.bias")


def cid_variables(state_dict: Mapping[str, Array], module: CID, source: str) -> dict:
    """``DisentanglementId`` state_dict -> CID variables (the reference's three ViTs)."""
    if module.shared or len(module.groups) != 3:
        raise ConversionError(
            f"{source}: the reference CID has three separate ViTs; build CID with shared=False"
        )
    codes = jnp.zeros((1, module.n_latent, module.style_dim), jnp.float32)
    expected = jax.eval_shape(module.init, jax.random.key(0), codes)
    rules: dict = {("params", "pos_embedding"): Rule("pos_embedding", _drop_singleton_middle)}
    _linear(rules, ("params", "linear_w"), "linear_w")
    for g in range(3):
        for i in range(module.depth):
            flax_block = ("params", f"vit_{g}", f"block_{i}")
            torch_block = f"layers.{g}.transformer.layers.{i}"
            _layer_norm(rules, (*flax_block, "attention_norm"), f"{torch_block}.0.norm")
            _linear(
                rules,
                (*flax_block, "attention", "to_qkv"),
                f"{torch_block}.0.fn.to_qkv",
                bias=False,
            )
            _linear(rules, (*flax_block, "attention", "to_out"), f"{torch_block}.0.fn.to_out.0")
            _layer_norm(rules, (*flax_block, "mlp_norm"), f"{torch_block}.1.norm")
            _linear(rules, (*flax_block, "mlp_in"), f"{torch_block}.1.fn.net.0")
            _linear(rules, (*flax_block, "mlp_out"), f"{torch_block}.1.fn.net.3")
    return map_state_dict(state_dict, rules, expected, source)


def maar_variables(
    state_dict: Mapping[str, Array],
    module: MAAR,
    source: str,
    in_channels: tuple[int, int, int] = (512, 256, 128),
) -> dict:
    """``AttrBlock`` state_dict -> MAAR variables (reference variant).

    ``in_channels`` are the channels of c3, c2, c1 (e4e's 512, 256, 128).
    """
    if module.variant != "reference":
        raise ConversionError(f"{source}: the reference AttrBlock is MAAR's 'reference' variant")
    maps = [jnp.zeros((1, 4, 4, c), jnp.float32) for c in in_channels]
    expected = jax.eval_shape(module.init, jax.random.key(0), *maps)
    rules: dict = {}
    for name in ("c3", "c2", "c1"):
        rules[("params", f"conv_{name}", "kernel")] = Rule(f"conv_{name}.weight", conv_kernel)
        rules[("params", f"conv_{name}", "bias")] = Rule(f"conv_{name}.bias")
        gate = ("params", f"cbam_{name}", "channel_gate")
        _linear(rules, (*gate, "hidden"), f"cbam_{name}.ChannelGate.mlp.1")
        _linear(rules, (*gate, "out"), f"cbam_{name}.ChannelGate.mlp.3")
        spatial = f"cbam_{name}.SpatialGate.spatial"
        conv = ("params", f"cbam_{name}", "spatial_gate", "conv", "kernel")
        rules[conv] = Rule(f"{spatial}.conv.weight", conv_kernel)
        bn = (f"cbam_{name}", "spatial_gate", "bn")
        rules[("params", *bn, "scale")] = Rule(f"{spatial}.bn.weight")
        rules[("params", *bn, "bias")] = Rule(f"{spatial}.bn.bias")
        rules[("batch_stats", *bn, "mean")] = Rule(f"{spatial}.bn.running_mean")
        rules[("batch_stats", *bn, "var")] = Rule(f"{spatial}.bn.running_var")
    return map_state_dict(state_dict, rules, expected, source, ignore=_BATCH_COUNTERS)


def kria_variables(state_dict: Mapping[str, Array], module: KRIA, source: str) -> dict:
    """``AnonymizationNet`` state_dict -> KRIA variables."""
    if len(module.groups) != 3:
        raise ConversionError(
            f"{source}: the reference KRIA has three cMLPs; build KRIA with three groups"
        )
    n_latent = sum(module.groups)
    codes = jnp.zeros((1, n_latent, module.style_dim), jnp.float32)
    expected = jax.eval_shape(module.init, jax.random.key(0), codes, codes)
    rules: dict = {}
    n_equal = 3 + module.extra_layers
    for g, group in enumerate(KRIA.GROUP_NAMES):
        for j in range(n_equal):
            # EqualLinear's stored (unscaled) weight and bias; the scaling stays at run time.
            _linear(
                rules, ("params", f"cmlp_{group}", f"equal_linear_{j}"), f"mapper.{g}.model.{j}"
            )
        _linear(rules, ("params", f"cmlp_{group}", "linear"), f"mapper.{g}.model.{n_equal}")
    return map_state_dict(state_dict, rules, expected, source)


def require_key(state_dict: Mapping[str, Array], key: str, source: str, what: str) -> Array:
    if key not in state_dict:
        raise ConversionError(f"{source}: not a {what} state_dict (no {key!r})")
    return state_dict[key]


def _count(state_dict: Mapping[str, Array], pattern: str) -> int:
    return len({m.group(1) for k in state_dict if (m := re.fullmatch(pattern, k))})


def default_groups(n_latent: int) -> tuple[int, int, int]:
    """The reference's coarse / medium / fine split: 4, 4 and the rest (4/4/6 at 256 px)."""
    if n_latent <= 8:
        raise ConversionError(f"{n_latent} latents leave no fine group; pass --latent-groups")
    return (4, 4, n_latent - 8)


def infer_cid(
    state_dict: Mapping[str, Array], source: str, groups: tuple[int, ...] | None, heads: int
) -> CID:
    """The CID a ``DisentanglementId`` state_dict describes (attention across the batch).

    Shapes give everything but how the attention width splits into heads (``heads``).
    """
    what = "DisentanglementId (CID)"
    style_dim = int(require_key(state_dict, "linear_w.weight", source, what).shape[0])
    n_latent = int(require_key(state_dict, "pos_embedding", source, what).shape[0])
    block = "layers.0.transformer.layers.0"
    inner = int(require_key(state_dict, f"{block}.0.fn.to_qkv.weight", source, what).shape[0]) // 3
    mlp_dim = int(require_key(state_dict, f"{block}.1.fn.net.0.weight", source, what).shape[0])
    depth = _count(state_dict, r"layers\.0\.transformer\.layers\.(\d+)\.0\.norm\.weight")
    groups = tuple(groups) if groups else default_groups(n_latent)
    if sum(groups) != n_latent:
        raise ConversionError(
            f"{source}: latent groups {groups} do not add up to its {n_latent} latents"
        )
    if heads < 1 or inner % heads:
        raise ConversionError(
            f"{source}: attention width {inner} is not a multiple of {heads} heads (--cid-heads)"
        )
    return CID(
        n_latent=n_latent,
        style_dim=style_dim,
        groups=groups,
        depth=depth,
        heads=heads,
        head_dim=inner // heads,
        mlp_dim=mlp_dim,
        attention="batch",
    )


def infer_maar(state_dict: Mapping[str, Array], source: str) -> tuple[MAAR, tuple[int, int, int]]:
    """The MAAR an ``AttrBlock`` state_dict describes, and its input channels (c3, c2, c1)."""
    what = "AttrBlock (MAAR)"
    convs = [
        require_key(state_dict, f"conv_{name}.weight", source, what) for name in ("c3", "c2", "c1")
    ]
    hidden = int(require_key(state_dict, "cbam_c3.ChannelGate.mlp.1.weight", source, what).shape[0])
    channels = int(convs[0].shape[0])
    module = MAAR(channels=channels, reduction=max(1, channels // hidden))
    return module, tuple(int(c.shape[1]) for c in convs)


def infer_kria(state_dict: Mapping[str, Array], source: str, groups: tuple[int, ...]) -> KRIA:
    """The KRIA an ``AnonymizationNet`` state_dict describes (its file does not hold the groups)."""
    first = require_key(state_dict, "mapper.0.model.0.weight", source, "AnonymizationNet (KRIA)")
    layers = _count(state_dict, r"mapper\.0\.model\.(\d+)\.weight")
    return KRIA(
        style_dim=int(first.shape[1]) // 2, groups=tuple(groups), extra_layers=max(0, layers - 4)
    )
