"""e4e / pSp checkpoints (`e4e_ffhq_encode_256.pt`) -> DIR/e4e and DIR/e4e_decoder.

    python -m convert.e4e --ckpt e4e_ffhq_encode_256.pt --out models/

The file is pSp's dict: ``state_dict`` with ``encoder.*`` (565 entries for e4e) and
``decoder.*`` (a rosinality StyleGAN2 generator), ``latent_avg`` and ``opts``.

- ``opts['encoder_type']`` picks the encoder class: ``Encoder4Editing`` (e4e) or
  ``GradualStyleEncoder`` (pSp); ``--encoder-type`` overrides it, and a file without
  opts is taken as e4e. pSp's third type, ``SingleStyleCodeEncoder``, is refused.
- ``opts['stylegan_size']`` gives the generator size and so the number of latents;
  without opts it is read from the number of style blocks.
- ``opts['start_from_latent_avg']`` must not be False: the encoders here always add
  ``latent_avg`` (every public e4e/pSp encoder was trained that way).
- ``latent_avg`` becomes the encoder's 'buffers'/latent_avg, (n_latents, 512); a single
  (512,) or (1, 512) average is repeated over the latents, as pSp's forward broadcasts it.
- The decoder is converted by convert.stylegan2 (its fixed noise buffers included: DBAF
  calls it with ``randomize_noise=False``).

Encoder keys: the IR-SE body (convert/irse.py), ``styles.{i}.convs.{2k}`` (conv3x3 with
bias) -> styles_i/conv_k, ``styles.{i}.linear`` (EqualLinear) -> styles_i/linear,
``latlayer1`` -> lateral_middle, ``latlayer2`` -> lateral_fine.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from convert import common
from convert.irse import IGNORED, conv_rules, irse_body_rules
from convert.stylegan2 import generator_variables, infer_generator
from dbaf_jax.models.e4e import Encoder4Editing, GradualStyleEncoder
from dbaf_jax.storage import model_directory
from dbaf_jax.storage.model_directory import save_network

ENCODER_NAME = model_directory.E4E_DIR
DECODER_NAME = model_directory.E4E_DECODER_DIR
ENCODER_TYPES = {"Encoder4Editing": Encoder4Editing, "GradualStyleEncoder": GradualStyleEncoder}
LATENT_AVG_KEY = "latent_avg"


def latent_avg_transform(n_latents: int):
    """latent_avg (n, D), (1, D) or (D,) -> (n_latents, D); other shapes pass through to be reported."""

    def transform(x: np.ndarray) -> np.ndarray:
        if x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1):
            return np.broadcast_to(x.reshape(1, -1), (n_latents, x.shape[-1])).copy()
        return x

    return transform


def encoder_rules(module: GradualStyleEncoder) -> dict:
    """Flax leaf -> common.Rule for the encoder, from the ``encoder.`` keys with the prefix removed."""
    rules = irse_body_rules(("body",), module.num_layers, module.width_scale)
    for i in range(module.n_styles):
        for k in range(int(math.log2(module.style_spatial(i)))):
            rules.update(
                conv_rules((f"styles_{i}", f"conv_{k}"), f"styles.{i}.convs.{2 * k}", bias=True)
            )
        rules[("params", f"styles_{i}", "linear", "kernel")] = common.Rule(
            f"styles.{i}.linear.weight", common.linear_kernel
        )
        rules[("params", f"styles_{i}", "linear", "bias")] = common.Rule(f"styles.{i}.linear.bias")
    rules.update(conv_rules(("lateral_middle",), "latlayer1", bias=True))
    rules.update(conv_rules(("lateral_fine",), "latlayer2", bias=True))
    rules[("buffers", "latent_avg")] = common.Rule(
        LATENT_AVG_KEY, latent_avg_transform(module.n_styles)
    )
    return rules


def encoder_variables(
    state_dict: Mapping[str, np.ndarray], module: GradualStyleEncoder, source: str
) -> dict:
    """The encoder's variables from its state_dict (``encoder.`` removed) plus ``latent_avg``."""
    expected = jax.eval_shape(
        module.init,
        jax.random.key(0),
        jnp.zeros((1, module.input_size, module.input_size, 3), jnp.float32),
    )
    return common.map_state_dict(
        state_dict, encoder_rules(module), expected, source, ignore=IGNORED
    )


def decoder_network(decoder_sd: Mapping[str, np.ndarray], size: int, source: str):
    """(Generator, variables) of pSp's decoder, by convert.stylegan2."""
    decoder = infer_generator(decoder_sd, source, size=size)
    return decoder, generator_variables(decoder_sd, decoder, source)


def read_options(checkpoint: Mapping[str, Any]) -> dict[str, Any]:
    """pSp's ``opts`` (a dict, or an argparse.Namespace in older files) as a dict; {} if absent."""
    opts = checkpoint.get("opts", {})
    return dict(vars(opts)) if isinstance(opts, argparse.Namespace) else dict(opts or {})


def stylegan_size_from_styles(encoder_sd: Mapping[str, np.ndarray], source: str) -> int:
    count = len(
        {m.group(1) for k in encoder_sd if (m := re.fullmatch(r"styles\.(\d+)\.linear\.weight", k))}
    )
    if count < 2 or count % 2:
        raise common.ConversionError(
            f"{source}: cannot tell the generator size: {count} style blocks and no opts"
        )
    return 2 ** ((count + 2) // 2)


def convert_e4e(
    ckpt: str | Path,
    out_dir: str | Path,
    encoder_type: str | None = None,
    width_scale: float = 1.0,
    overwrite: bool = False,
) -> tuple[Path, Path]:
    """Converts a pSp-layout checkpoint; writes ``out_dir/e4e`` and ``out_dir/e4e_decoder``."""
    out_dir = Path(out_dir)
    targets = (out_dir / ENCODER_NAME, out_dir / DECODER_NAME)
    for target in targets:
        common.refuse_existing(target, overwrite)
    source = str(ckpt)
    checkpoint = common.load_torch_checkpoint(ckpt)
    if not isinstance(checkpoint, Mapping) or "state_dict" not in checkpoint:
        raise common.ConversionError(f"{source}: not a pSp/e4e checkpoint (no 'state_dict')")
    opts = read_options(checkpoint)
    encoder_type = encoder_type or opts.get("encoder_type", "Encoder4Editing")
    if encoder_type not in ENCODER_TYPES:
        raise common.ConversionError(
            f"{source}: encoder_type {encoder_type!r} is not supported (one of {sorted(ENCODER_TYPES)})"
        )
    if opts.get("start_from_latent_avg") is False:
        raise common.ConversionError(
            f"{source}: opts.start_from_latent_avg is False; only encoders that add latent_avg are supported"
        )
    if LATENT_AVG_KEY not in checkpoint:
        raise common.ConversionError(f"{source}: no 'latent_avg' entry")

    state_dict = common.to_numpy(checkpoint["state_dict"], f"{source}:state_dict")
    stray = sorted(k for k in state_dict if not k.startswith(("encoder.", "decoder.")))
    if stray:
        raise common.ConversionError(
            f"{source}: state_dict entries outside encoder.* and decoder.*: {', '.join(stray)}"
        )
    encoder_sd = common.sub_dict(state_dict, "encoder.")
    decoder_sd = common.sub_dict(state_dict, "decoder.")
    encoder_sd[LATENT_AVG_KEY] = common.to_numpy(
        {LATENT_AVG_KEY: checkpoint[LATENT_AVG_KEY]}, source
    )[LATENT_AVG_KEY]
    size = int(opts.get("stylegan_size") or stylegan_size_from_styles(encoder_sd, source))

    style_dim = int(encoder_sd[LATENT_AVG_KEY].shape[-1])
    encoder = ENCODER_TYPES[encoder_type](
        stylegan_size=size, style_dim=style_dim, width_scale=width_scale
    )
    # Both halves are checked before anything is written; their complaints are reported together.
    errors, networks = [], []
    try:
        networks.append(
            (targets[0], encoder, encoder_variables(encoder_sd, encoder, f"{source}:encoder"))
        )
    except common.ConversionError as err:
        errors.append(str(err))
    try:
        decoder, decoder_vars = decoder_network(decoder_sd, size, f"{source}:decoder")
        networks.append((targets[1], decoder, decoder_vars))
        if decoder.style_dim != style_dim:
            errors.append(
                f"{source}: latent_avg has width {style_dim}, the decoder's style_dim is {decoder.style_dim}"
            )
    except common.ConversionError as err:
        errors.append(str(err))
    if errors:
        raise common.ConversionError("\n".join(errors))
    for target, module, variables in networks:
        save_network(
            target,
            module,
            variables,
            source=f"{Path(ckpt).name} ({encoder_type})",
            overwrite=overwrite,
        )
    return targets


def main(argv: list[str] | None = None) -> None:
    encoder_type = {
        "choices": sorted(ENCODER_TYPES),
        "help": "default: the file's opts.encoder_type",
    }
    parser = common.converter_parser(
        "python -m convert.e4e",
        __doc__.split("\n\n")[0],
        {"--ckpt": {"required": True, "help": "e4e_ffhq_encode_256.pt or a pSp checkpoint"}},
        {
            "--encoder-type": encoder_type,
            "--width-scale": common.width_scale_option(
                "encoder channel multiplier (1.0 for public files)"
            ),
        },
    )
    args = parser.parse_args(argv)
    for path in convert_e4e(
        args.ckpt, args.out, args.encoder_type, args.width_scale, args.overwrite
    ):
        print(f"wrote {path}")


if __name__ == "__main__":
    common.run(main)
