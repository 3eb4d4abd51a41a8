"""DBAF's stage checkpoints plus the base checkpoints -> one DBAF model directory.

    python -m convert.dbaf --e4e e4e_ffhq_encode_256.pt --stylegan stylegan2-ffhq-256.pt
        --cid best_model_w_disentanglement.pth --maar best_model_attr_block.pth
        --decoder best_model_decoder_finetune.pth --kria best_model_id_mlp.pth
        [--discriminator D.pth] --out DIR [--overwrite]

writes, with `dbaf_jax.storage.model_directory.save_model`:
  DIR/model.json     the networks below with their content hashes (what `dbaf_jax.storage.model_families.load`
                     loads: a model converted without a network never takes one left in DIR)
  DIR/e4e            the encoder of the e4e (pSp-layout) file, with its latent_avg
  DIR/key_generator  ``g_ema`` of the StyleGAN2 file: the frozen network whose mapping
                     turns key z into key w (the reference's test.py keys with the
                     original generator, not the fine-tuned one)
  DIR/decoder        the fine-tuned generator (a plain rosinality Generator state_dict)
  DIR/cid            CID with attention='batch', as the reference trains it;
                     ``DBAF.for_inference()`` runs it image by image ('single')
  DIR/maar           MAAR, the reference variant
  DIR/kria           KRIA (omit --kria for a stage-1 result)
  DIR/discriminator  with --discriminator: a plain Discriminator state_dict, or a
                     rosinality training checkpoint whose ``d`` is taken

Architectures are read from the tensors' shapes; what shapes cannot tell is an option:
the latent groups (``--latent-groups``, default 4,4,rest: the reference's 4/4/6 at
256 px) and CID's number of attention heads (``--cid-heads``, default 14). The
networks must fit together (style_dim, number of latents, MAAR's input channels and
output width against e4e and the decoder); every file and every cross-check is
verified before anything is written, and problems are reported together.

A directory converted without --kria is a stage-1 result: give it to stage 2 as
``init_from`` (with the default ``reference`` variant, whose CID attends across the
batch as the converted one does), together with --discriminator (stage 2 continues the discriminator; when the
stage-1 discriminator is not at hand, pass the StyleGAN2 file to start from its ``d``).
With --kria the directory is what `dbaf_jax.commands.anonymize` and `dbaf_jax.commands.recover` run.

The key mappings and the shapes of DBAF's own stage checkpoints (CID, MAAR, KRIA) are
`convert.dbaf_stages`'s.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from convert import e4e as e4e_convert
from convert.common import (
    ConversionError,
    converter_parser,
    load_torch_checkpoint,
    run,
    sub_dict,
    to_numpy,
)
from convert.dbaf_stages import (
    cid_variables,
    default_groups,
    infer_cid,
    infer_kria,
    infer_maar,
    kria_variables,
    maar_variables,
    require_key,
)
from convert.stylegan2 import (
    discriminator_variables,
    generator_variables,
    infer_discriminator,
    infer_generator,
)
from dbaf_jax.models.dbaf.dbaf import FAMILY, KEY_GENERATOR
from dbaf_jax.models.e4e import MAP_STRIDES, Encoder4Editing
from dbaf_jax.models.irse import stage_ends, unit_specs
from dbaf_jax.storage.model_directory import MODEL_FILE, save_model

Array = np.ndarray

DISCRIMINATOR = "discriminator"
# Networks written only when their file is given.
OPTIONAL_NETWORKS = ("kria", DISCRIMINATOR)
REFERENCE_CID_HEADS = 14
STEM_CHANNELS = 64  # the IR-SE stem's width at width_scale 1


def infer_encoder(
    encoder_sd: Mapping[str, Array], opts: Mapping[str, Any], source: str
) -> Encoder4Editing:
    """The e4e encoder of a pSp file's ``encoder.*`` entries (prefix removed, ``latent_avg``
    added) and its opts; the width is read from the stem."""
    size = int(
        opts.get("stylegan_size") or e4e_convert.stylegan_size_from_styles(encoder_sd, source)
    )
    stem = require_key(encoder_sd, "input_layer.0.weight", source, "e4e encoder")
    latent_avg = require_key(encoder_sd, e4e_convert.LATENT_AVG_KEY, source, "e4e encoder")
    return Encoder4Editing(
        stylegan_size=size,
        style_dim=int(latent_avg.shape[-1]),
        width_scale=int(stem.shape[0]) / STEM_CHANNELS,
    )


def encoder_network(path: str | Path) -> tuple[Encoder4Editing, dict]:
    """The e4e encoder of a pSp-layout file (``encoder.*`` and ``latent_avg``).

    DBAF never runs the file's own decoder (``decoder.*``), so it is not converted.
    """
    source = str(path)
    checkpoint = load_torch_checkpoint(path)
    if not isinstance(checkpoint, Mapping) or "state_dict" not in checkpoint:
        raise ConversionError(f"{source}: not a pSp/e4e checkpoint (no 'state_dict')")
    opts = e4e_convert.read_options(checkpoint)
    encoder_type = opts.get("encoder_type", "Encoder4Editing")
    if encoder_type != "Encoder4Editing":
        raise ConversionError(
            f"{source}: DBAF runs an e4e encoder (Encoder4Editing); this file holds {encoder_type!r}"
        )
    if opts.get("start_from_latent_avg") is False:
        raise ConversionError(
            f"{source}: opts.start_from_latent_avg is False; DBAF's e4e adds latent_avg"
        )
    if e4e_convert.LATENT_AVG_KEY not in checkpoint:
        raise ConversionError(f"{source}: no 'latent_avg' entry")
    state_dict = to_numpy(checkpoint["state_dict"], f"{source}:state_dict")
    stray = sorted(k for k in state_dict if not k.startswith(("encoder.", "decoder.")))
    if stray:
        raise ConversionError(
            f"{source}: state_dict entries outside encoder.* and decoder.*: {', '.join(stray)}"
        )
    encoder_sd = sub_dict(state_dict, "encoder.")
    latent_avg = {e4e_convert.LATENT_AVG_KEY: checkpoint[e4e_convert.LATENT_AVG_KEY]}
    encoder_sd.update(to_numpy(latent_avg, source))
    encoder = infer_encoder(encoder_sd, opts, source)
    return encoder, e4e_convert.encoder_variables(encoder_sd, encoder, f"{source}:encoder")


def base_generator_network(path: str | Path) -> tuple[Any, dict]:
    """``g_ema`` of a rosinality training checkpoint (the key generator)."""
    source = str(path)
    checkpoint = load_torch_checkpoint(path)
    if not isinstance(checkpoint, Mapping) or "g_ema" not in checkpoint:
        raise ConversionError(f"{source}: not a rosinality StyleGAN2 checkpoint (no 'g_ema')")
    source = f"{source}:g_ema"
    state_dict = to_numpy(checkpoint["g_ema"], source)
    module = infer_generator(state_dict, source)
    return module, generator_variables(state_dict, module, source)


def decoder_network(path: str | Path) -> tuple[Any, dict]:
    """The fine-tuned generator: a plain rosinality Generator state_dict."""
    source = str(path)
    state_dict = to_numpy(load_torch_checkpoint(path), source)
    module = infer_generator(state_dict, source)
    return module, generator_variables(state_dict, module, source)


def discriminator_network(path: str | Path) -> tuple[Any, dict]:
    """A plain rosinality Discriminator state_dict, or ``d`` of a rosinality training checkpoint."""
    source = str(path)
    checkpoint = load_torch_checkpoint(path)
    if isinstance(checkpoint, Mapping) and "d" in checkpoint:
        checkpoint, source = checkpoint["d"], f"{source}:d"
    state_dict = to_numpy(checkpoint, source)
    module = infer_discriminator(state_dict, source)
    return module, discriminator_variables(state_dict, module, source)


def encoder_map_channels(encoder) -> tuple[int, int, int]:
    """Channels of e4e's c3, c2, c1 (512, 256, 128 at full width)."""
    specs = unit_specs(encoder.num_layers, encoder.width_scale)
    _, c1_end, c2_end, c3_end = stage_ends(encoder.num_layers)
    return specs[c3_end][1], specs[c2_end][1], specs[c1_end][1]


def compatibility_problems(
    modules: Mapping[str, Any], maar_in_channels: tuple[int, ...] | None
) -> list[str]:
    """What keeps converted networks from working together (empty when they fit)."""
    problems = []
    style_dims = {n: m.style_dim for n, m in modules.items() if hasattr(m, "style_dim")}
    if len(set(style_dims.values())) > 1:
        problems.append(f"style_dim differs: {style_dims}")
    e4e, decoder = modules.get("e4e"), modules.get("decoder")
    n_latents = {
        n: getattr(m, "n_styles", None) or getattr(m, "n_latent", None) or sum(m.groups)
        for n, m in modules.items()
        if n in ("e4e", KEY_GENERATOR, "decoder", "cid", "kria")
    }
    if len(set(n_latents.values())) > 1:
        problems.append(f"number of latents differs: {n_latents}")
    if (
        "cid" in modules
        and "kria" in modules
        and tuple(modules["cid"].groups) != tuple(modules["kria"].groups)
    ):
        problems.append(
            f"latent groups differ: cid {modules['cid'].groups}, kria {modules['kria'].groups}"
        )
    sizes = {
        n: m.size for n, m in modules.items() if n in (KEY_GENERATOR, "decoder", DISCRIMINATOR)
    }
    if len(set(sizes.values())) > 1:
        problems.append(f"image size differs: {sizes}")
    maar = modules.get("maar")
    if maar is not None and e4e is not None:
        if tuple(maar_in_channels) != encoder_map_channels(e4e):
            problems.append(
                f"maar reads {tuple(maar_in_channels)} channels, e4e's c3, c2, c1 have {encoder_map_channels(e4e)}"
            )
        if decoder is not None:
            resolutions = [e4e.input_size // stride for stride in MAP_STRIDES]
            widths = {r: decoder.channels(r) for r in resolutions if 4 <= r <= decoder.size}
            if len(widths) < len(resolutions) or set(widths.values()) != {maar.channels}:
                problems.append(
                    f"maar's {maar.channels}-channel maps at {resolutions} px do not fit the decoder's noise inputs "
                    f"(size {decoder.size}, widths {widths})"
                )
    return problems


def cid_network(
    path: Path, latent_groups: tuple[int, ...] | None, cid_heads: int
) -> tuple[Any, dict]:
    """CID of DBAF's stage-1 file, with the latent groups and heads its shapes cannot tell."""
    source = str(path)
    state_dict = to_numpy(load_torch_checkpoint(path), source)
    module = infer_cid(state_dict, source, latent_groups, cid_heads)
    return module, cid_variables(state_dict, module, source)


def maar_network(path: Path) -> tuple[Any, dict, tuple[int, ...]]:
    """MAAR of DBAF's stage-1 file, and the channels it reads (e4e's c3, c2, c1)."""
    source = str(path)
    state_dict = to_numpy(load_torch_checkpoint(path), source)
    module, in_channels = infer_maar(state_dict, source)
    return module, maar_variables(state_dict, module, source, in_channels), in_channels


def kria_groups(
    latent_groups: tuple[int, ...] | None, networks: Mapping[str, tuple[Any, dict]]
) -> tuple[int, ...]:
    """KRIA's latent groups: those given, else CID's, else the default for the
    decoder's number of latents, else the reference's (4, 4, 6)."""
    if latent_groups:
        return tuple(latent_groups)
    if "cid" in networks:
        return networks["cid"][0].groups
    return default_groups(networks["decoder"][0].n_latent) if "decoder" in networks else (4, 4, 6)


def kria_network(path: Path, groups: tuple[int, ...]) -> tuple[Any, dict]:
    """KRIA of DBAF's stage-2 file."""
    source = str(path)
    state_dict = to_numpy(load_torch_checkpoint(path), source)
    module = infer_kria(state_dict, source, groups)
    return module, kria_variables(state_dict, module, source)


def refuse_outputs(out_dir: Path, files: Mapping[str, Path], overwrite: bool) -> None:
    """ConversionError when ``out_dir`` holds what this conversion writes (unless
    ``overwrite``), or an optional network it would not replace."""
    existing = [str(out_dir / n) for n in (*files, MODEL_FILE) if (out_dir / n).exists()]
    if existing and not overwrite:
        raise ConversionError(
            f"{', '.join(existing)} exist(s) already; pass --overwrite to replace"
        )
    stale = [
        str(out_dir / n) for n in OPTIONAL_NETWORKS if n not in files and (out_dir / n).exists()
    ]
    if stale:
        raise ConversionError(
            f"{', '.join(stale)} come(s) from another conversion and this one would not replace it; "
            "remove it or choose another --out"
        )


def convert_networks(
    files: Mapping[str, Path], latent_groups: tuple[int, ...] | None, cid_heads: int
) -> dict[str, tuple[Any, dict]]:
    """Every file converted and the networks checked against each other; all complaints
    together in one ConversionError."""
    errors: list[str] = []
    networks: dict[str, tuple[Any, dict]] = {}
    maar_in_channels = None

    def attempt(name, convert):
        try:
            networks[name] = convert()
        except ConversionError as err:
            errors.append(str(err))

    def convert_maar():
        nonlocal maar_in_channels
        module, variables, maar_in_channels = maar_network(files["maar"])
        return module, variables

    attempt("e4e", lambda: encoder_network(files["e4e"]))
    attempt(KEY_GENERATOR, lambda: base_generator_network(files[KEY_GENERATOR]))
    attempt("decoder", lambda: decoder_network(files["decoder"]))
    attempt("cid", lambda: cid_network(files["cid"], latent_groups, cid_heads))
    attempt("maar", convert_maar)
    if "kria" in files:
        attempt("kria", lambda: kria_network(files["kria"], kria_groups(latent_groups, networks)))
    if DISCRIMINATOR in files:
        attempt(DISCRIMINATOR, lambda: discriminator_network(files[DISCRIMINATOR]))
    problems = compatibility_problems({n: m for n, (m, _) in networks.items()}, maar_in_channels)
    if problems:
        errors.append("the networks do not fit together:\n  " + "\n  ".join(problems))
    if errors:
        raise ConversionError("\n".join(errors))
    return networks


def convert_dbaf(
    out_dir: str | Path,
    *,
    e4e: str | Path,
    stylegan: str | Path,
    cid: str | Path,
    maar: str | Path,
    decoder: str | Path,
    kria: str | Path | None = None,
    discriminator: str | Path | None = None,
    latent_groups: tuple[int, ...] | None = None,
    cid_heads: int = REFERENCE_CID_HEADS,
    overwrite: bool = False,
) -> list[Path]:
    """Converts DBAF's files into the model directory ``out_dir``; returns the written networks.

    Every file is converted and the networks are checked against each other before
    anything is written; all complaints are reported together in one ConversionError.
    """
    out_dir = Path(out_dir)
    files = {
        "e4e": e4e,
        KEY_GENERATOR: stylegan,
        "decoder": decoder,
        "cid": cid,
        "maar": maar,
        "kria": kria,
        DISCRIMINATOR: discriminator,
    }
    files = {name: Path(f) for name, f in files.items() if f is not None}
    refuse_outputs(out_dir, files, overwrite)
    networks = convert_networks(files, latent_groups, cid_heads)
    sources = {name: files[name].name for name in networks}
    # The authors' stage 2 trains latent recovery (KRIA applied again to the kept codes).
    save_model(out_dir, FAMILY, networks, sources, overwrite=overwrite, recovery="latent")
    return [out_dir / name for name in networks]


def parse_groups(text: str) -> tuple[int, int, int]:
    """'4,4,6' -> (4, 4, 6): three positive sizes (coarse, medium, fine)."""
    try:
        groups = tuple(int(g) for g in text.split(","))
    except ValueError:
        groups = ()
    if len(groups) != 3 or min(groups) < 1:
        raise argparse.ArgumentTypeError(f"expected three positive sizes like 4,4,6, got {text!r}")
    return groups


def main(argv: list[str] | None = None) -> None:
    inputs = {
        "--e4e": {"required": True, "help": "e4e_ffhq_encode_256.pt (pSp layout)"},
        "--stylegan": {
            "required": True,
            "help": "stylegan2-ffhq-256.pt (rosinality; its g_ema makes the keys)",
        },
        "--cid": {
            "required": True,
            "help": "w_disentanglement*.pth (DisentanglementId state_dict)",
        },
        "--maar": {"required": True, "help": "attr_block*.pth (AttrBlock state_dict)"},
        "--decoder": {"required": True, "help": "*decoder*.pth (fine-tuned Generator state_dict)"},
        "--kria": {"help": "*id_mlp*.pth (AnonymizationNet state_dict); omit for a stage-1 result"},
        "--discriminator": {
            "help": "Discriminator state_dict, or a rosinality checkpoint whose d is taken"
        },
    }
    options = {
        "--latent-groups": {
            "type": parse_groups,
            "help": "coarse,medium,fine latent counts (default 4,4,rest)",
        },
        "--cid-heads": {
            "type": int,
            "default": REFERENCE_CID_HEADS,
            "help": "CID attention heads (reference: 14)",
        },
    }
    parser = converter_parser(
        "python -m convert.dbaf",
        __doc__.split("\n\nThe key mappings")[0],
        inputs,
        options,
        out={"help": "the DBAF model directory to write"},
        overwrite={"help": "replace networks already in --out"},
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    args = parser.parse_args(argv)
    written = convert_dbaf(
        args.out,
        e4e=args.e4e,
        stylegan=args.stylegan,
        cid=args.cid,
        maar=args.maar,
        decoder=args.decoder,
        kria=args.kria,
        discriminator=args.discriminator,
        latent_groups=args.latent_groups,
        cid_heads=args.cid_heads,
        overwrite=args.overwrite,
    )
    for path in written:
        print(f"wrote {path}")
    if args.kria is None:
        print(
            f"no --kria: {args.out} is a stage-1 result (stage 2's init_from), not yet usable by dbaf_jax.commands.anonymize"
        )


if __name__ == "__main__":
    run(main)
