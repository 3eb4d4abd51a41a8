"""iFADIT's networks table and the modules of an iFADIT run (configs/ifadit/phases.py).

The `IFADIT` composition (`dbaf_jax.models.ifadit.ifadit`; its ArcFace and BiSeNet serve the
losses too) plus LPIPS and MTCNN's O-net, the landmark extractor (`IFADITNetworks`).
`IFADIT_NETWORKS` names each with its pretrained sub-directory and initialiser
(`dbaf_jax.train.networks` derives the rest).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import ml_collections

from dbaf_jax.models.arcface import ArcFace
from dbaf_jax.models.composition import KEY_GENERATOR, Variables, apply_network
from dbaf_jax.models.ifadit.icl import IdentityCompensation
from dbaf_jax.models.ifadit.ifadit import IFADIT
from dbaf_jax.models.ifadit.mapper import IdentityAttributeMapper
from dbaf_jax.models.ifadit.sif import SecureIdentityFlow
from dbaf_jax.models.lpips import LPIPS
from dbaf_jax.models.mtcnn import ONET_SIDE, ONet
from dbaf_jax.models.parsers import BiSeNet
from dbaf_jax.storage import model_directory
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train.networks import Examples, NetworkSpec, examples, pretrained_of


@dataclasses.dataclass(frozen=True)
class IFADITNetworks(networks_lib.ComposedNetworks):
    """The modules of an iFADIT run: the composition, LPIPS and the landmark extractor."""

    model: IFADIT
    lpips: LPIPS
    landmarks: ONet

    def with_compute_dtype(self, dtype: str | None) -> "IFADITNetworks":
        return dataclasses.replace(self, model=self.model.with_compute_dtype(dtype))

    def apply(self, name: str, variables: Variables, *args, **kwargs):
        """Network ``name`` on ``variables[name]`` as the step runs it (`IFADIT.apply` for the model's)."""
        if name in self.model.networks():
            return self.model.apply(name, variables, *args, **kwargs)
        return apply_network(
            self.compute_dtype, self.modules()[name], variables[name], *args, **kwargs
        )

    def modules(self) -> dict:
        return {**self.model.networks(), "lpips": self.lpips, "landmarks": self.landmarks}

    @property
    def pretrained(self) -> dict[str, str]:
        return PRETRAINED

    def examples(self, size: int) -> Examples:
        """The zero inputs the networks are initialised on at image side ``size``."""
        decoder = self.model.decoder
        return examples(size, decoder.n_latent, decoder.style_dim, self.model.sif.identity_dim)

    @property
    def table(self) -> tuple[NetworkSpec, ...]:
        return IFADIT_NETWORKS


def build(config: ml_collections.ConfigDict) -> IFADITNetworks:
    """An iFADIT run's modules (configs/ifadit/phases.py)."""
    m = config.model
    decoder = networks_lib.decoder_of(m)
    model = IFADIT(
        e4e=networks_lib.encoder_of(m),
        arcface=ArcFace(width_scale=m.encoder_width_scale, embedding_dim=m.identity_dim),
        mapper=IdentityAttributeMapper(style_dim=m.style_dim, hidden=m.mapper_hidden),
        sif=SecureIdentityFlow(
            identity_dim=m.identity_dim,
            key_dim=m.style_dim,
            blocks=m.sif.blocks,
            hidden=m.sif.hidden,
            depth=m.sif.depth,
            clamp=m.sif.clamp,
        ),
        icl=IdentityCompensation(features=m.identity_dim, hidden=m.icl.hidden, layers=m.icl.layers),
        decoder=decoder,
        key_generator=decoder,
        parser=BiSeNet() if m.parser else None,
    )
    networks = IFADITNetworks(model=model, lpips=LPIPS(net="alex"), landmarks=ONet())
    return networks.with_compute_dtype(config.compute_dtype)


# iFADIT's networks, in the order the seed is split among them. The decoder is frozen
# in both phases (paper 3.2); the model's ArcFace and BiSeNet serve the losses too;
# LPIPS and the landmark extractor serve only the losses, and are not exported.
IFADIT_NETWORKS = (
    NetworkSpec(
        "e4e", model_directory.E4E_DIR, lambda n, k, x: n.model.e4e.init(k["e4e"], x.images)
    ),
    NetworkSpec(
        "arcface",
        model_directory.ARCFACE_DIR,
        lambda n, k, x: n.model.arcface.init(k["arcface"], x.images),
    ),
    NetworkSpec(
        "mapper", None, lambda n, k, x: n.model.mapper.init(k["mapper"], x.identity, x.latents)
    ),
    NetworkSpec(
        "sif",
        None,
        lambda n, k, x: n.model.sif.init(k["sif"], x.identity, jnp.zeros((2, n.model.sif.key_dim))),
    ),
    NetworkSpec("icl", None, lambda n, k, x: n.model.icl.init(k["icl"], x.identity)),
    NetworkSpec(
        "decoder",
        model_directory.GENERATOR_DIR,
        lambda n, k, x: n.model.decoder.init(k["decoder"], x.latents),
    ),
    NetworkSpec(
        KEY_GENERATOR,
        model_directory.GENERATOR_DIR,
        lambda n, k, x: n.model.decoder.init(k["decoder"], x.latents),
        own_key=False,
    ),
    NetworkSpec(
        "parser",
        model_directory.parser_dir("bisenet"),
        lambda n, k, x: n.model.parser.init(k["parser"], x.images),
    ),
    networks_lib.LPIPS_ALEX,
    NetworkSpec(
        "landmarks",
        f"{model_directory.MTCNN_DIR}/onet",
        lambda n, k, x: n.landmarks.init(k["landmarks"], jnp.zeros((2, ONET_SIDE, ONET_SIDE, 3))),
        exported=False,
    ),
)
PRETRAINED = pretrained_of(IFADIT_NETWORKS)
