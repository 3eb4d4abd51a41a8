"""DBAF's networks table and the modules of a DBAF run, built from its config.

The model proper (e4e, CID, MAAR, decoder, KRIA; see `dbaf_jax.models.dbaf.dbaf`) and the
auxiliary networks: the discriminator, the key generator (the base StyleGAN2 whose
mapping network turns key z into w) and the frozen critics of the losses (ArcFace,
LPIPS, the U-Net face parser). `DBAF_NETWORKS` names each with its pretrained
sub-directory and initialiser (`dbaf_jax.train.networks` derives the rest).
"""

from __future__ import annotations

import dataclasses

import jax
import ml_collections

from dbaf_jax.models.arcface import ArcFace
from dbaf_jax.models.dbaf.cid import CID, LatentMLP
from dbaf_jax.models.dbaf.dbaf import DBAF, KEY_GENERATOR, Variables, apply_network
from dbaf_jax.models.dbaf.kria import KRIA
from dbaf_jax.models.dbaf.maar import MAAR
from dbaf_jax.models.lpips import LPIPS
from dbaf_jax.models.parsers import UNetParser
from dbaf_jax.models.stylegan2 import Discriminator
from dbaf_jax.storage import model_directory
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train.dbaf.state import DISCRIMINATOR
from dbaf_jax.train.networks import Examples, NetworkSpec, examples, pretrained_of


@dataclasses.dataclass(frozen=True)
class Networks(networks_lib.ComposedNetworks):
    """The modules of a run: the DBAF composition and the auxiliary networks."""

    model: DBAF
    discriminator: Discriminator
    arcface: ArcFace
    lpips: LPIPS
    parser: UNetParser

    def with_compute_dtype(self, dtype: str | None) -> "Networks":
        """Every network computing in ``dtype`` (`DBAF.with_compute_dtype`); parameters stay float32."""
        return dataclasses.replace(
            self,
            model=self.model.with_compute_dtype(dtype),
            discriminator=self.discriminator.clone(dtype=dtype or "float32"),
        )

    def apply(self, name: str, variables: Variables, *args, **kwargs):
        """Network ``name`` (`modules`) on ``variables[name]`` as the step runs it (`dbaf.apply_network`)."""
        return apply_network(
            self.compute_dtype, self.modules()[name], variables[name], *args, **kwargs
        )

    def modules(self) -> dict:
        """Network name -> module, for every network of the run."""
        return {
            **self.model.networks(),
            DISCRIMINATOR: self.discriminator,
            "arcface": self.arcface,
            "lpips": self.lpips,
            "parser": self.parser,
        }

    @property
    def pretrained(self) -> dict[str, str]:
        return PRETRAINED

    def examples(self, size: int) -> Examples:
        """The zero inputs the networks are initialised on at image side ``size``."""
        return examples(size, self.model.decoder.n_latent, self.model.decoder.style_dim)

    @property
    def table(self) -> tuple[NetworkSpec, ...]:
        return DBAF_NETWORKS


def build(config: ml_collections.ConfigDict) -> Networks:
    """A DBAF run's modules described by ``config.model`` (widths, variants), computing in
    ``config.compute_dtype`` (configs/dbaf/stage1.py, configs/dbaf/stage2.py)."""
    m = config.model
    decoder = networks_lib.decoder_of(m)
    groups = tuple(m.latent_groups)
    cid: CID | LatentMLP
    if m.cid.kind == "vit":
        cid = CID(
            n_latent=decoder.n_latent,
            style_dim=m.style_dim,
            groups=groups,
            depth=m.cid.depth,
            heads=m.cid.heads,
            head_dim=m.cid.head_dim,
            mlp_dim=m.cid.mlp_dim,
            dropout=m.cid.dropout,
            attention=m.cid.attention,
            shared=m.cid.shared,
            scan=config.cid_scan,
        )
    else:
        cid = LatentMLP(style_dim=m.style_dim)
    maar = MAAR(channels=decoder.channels(16), variant=m.maar.variant) if m.maar.enabled else None
    model = DBAF(
        e4e=networks_lib.encoder_of(m),
        cid=cid,
        maar=maar,
        decoder=decoder,
        kria=KRIA(style_dim=m.style_dim, groups=groups),
        key_generator=decoder,
    )
    networks = Networks(
        model=model,
        discriminator=Discriminator(
            size=m.size, channel_multiplier=m.channel_multiplier, width_scale=m.width_scale
        ),
        arcface=ArcFace(width_scale=m.encoder_width_scale),
        lpips=LPIPS(net="alex"),
        parser=UNetParser(),
    )
    return networks.with_compute_dtype(config.compute_dtype)


def _maar_inputs(features) -> tuple[jax.Array, jax.Array, jax.Array]:
    return features.c3, features.c2, features.c1


def _maar_init(n: Networks, keys: dict, x: Examples) -> Variables:
    """MAAR takes e4e's feature maps: e4e's own start (its key) gives their shapes."""
    maar = n.model.maar
    assert maar is not None  # in the table only when config.model.maar.enabled
    e4e = n.model.e4e.init(keys["e4e"], x.images)
    return dict(maar.init(keys["maar"], *_maar_inputs(n.model.e4e.apply(e4e, x.images))))


# DBAF's networks, in the order the seed is split among them (fixed: it defines every
# network's random start); ArcFace, LPIPS and the parser are the losses' critics, not
# exported. The key generator (the base StyleGAN2, whose mapping turns
# a key's z into w) starts as the decoder does, from the decoder's key.
DBAF_NETWORKS = (
    NetworkSpec(
        "e4e", model_directory.E4E_DIR, lambda n, k, x: n.model.e4e.init(k["e4e"], x.images)
    ),
    NetworkSpec("cid", None, lambda n, k, x: n.model.cid.init(k["cid"], x.latents)),
    NetworkSpec("maar", None, _maar_init),
    NetworkSpec(
        "decoder",
        model_directory.GENERATOR_DIR,
        lambda n, k, x: n.model.decoder.init(k["decoder"], x.latents),
    ),  # the reference fine-tunes g_ema
    NetworkSpec(
        KEY_GENERATOR,
        model_directory.GENERATOR_DIR,
        lambda n, k, x: n.model.decoder.init(k["decoder"], x.latents),
        own_key=False,
    ),
    NetworkSpec("kria", None, lambda n, k, x: n.model.kria.init(k["kria"], x.latents, x.latents)),
    NetworkSpec(
        DISCRIMINATOR,
        model_directory.DISCRIMINATOR_DIR,
        lambda n, k, x: n.discriminator.init(k[DISCRIMINATOR], x.images),
    ),
    NetworkSpec(
        "arcface",
        model_directory.ARCFACE_DIR,
        lambda n, k, x: n.arcface.init(k["arcface"], x.images),
        exported=False,
    ),
    networks_lib.LPIPS_ALEX,
    NetworkSpec(
        "parser",
        model_directory.parser_dir("unet"),
        lambda n, k, x: n.parser.init(k["parser"], x.images),
        exported=False,
    ),
)
PRETRAINED = pretrained_of(DBAF_NETWORKS)
