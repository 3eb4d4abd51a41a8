"""Every network a training run needs, built from the config and initialised.

DBAF runs: the model proper (e4e, CID, MAAR, decoder, KRIA; see
`dbaf_jax.models.dbaf`) and the auxiliary networks: the discriminator, the key
generator (the base StyleGAN2 whose mapping network turns key z into w) and the
frozen critics of the losses (ArcFace, LPIPS, the U-Net face parser). iFADIT runs
(configs/ifadit.py): the `IFADIT` composition (`dbaf_jax.models.ifadit`;
its ArcFace and BiSeNet serve the losses too) plus LPIPS and MTCNN's O-net, the
landmark extractor (`IFADITNetworks`).

Pretrained networks come from the converted model directory ``config.model_dir``
(sub-directories named as in `PRETRAINED`); without one every network is initialised
at random from the seed, which is what the ``tiny`` smoke runs do.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections

from dbaf_jax import model_directory
from dbaf_jax.errors import ModelDirectoryError, NetworkNotFoundError
from dbaf_jax.faces.detect import ONET_SIDE
from dbaf_jax.models.arcface import ArcFace
from dbaf_jax.models.cid import CID, LatentMLP
from dbaf_jax.models.dbaf import DBAF, KEY_GENERATOR, Variables, apply_network
from dbaf_jax.models.e4e import Encoder4Editing
from dbaf_jax.models.icl import IdentityCompensation
from dbaf_jax.models.ifadit import IFADIT
from dbaf_jax.models.kria import KRIA
from dbaf_jax.models.lpips import LPIPS
from dbaf_jax.models.maar import MAAR
from dbaf_jax.models.mapper import IdentityAttributeMapper
from dbaf_jax.models.mtcnn import ONet
from dbaf_jax.models.parsers import BiSeNet, UNetParser
from dbaf_jax.models.sif import SecureIdentityFlow
from dbaf_jax.models.stylegan2 import Discriminator, Generator

# Network name in a run -> sub-directory of the converted model directory it starts from.
PRETRAINED = {
    "e4e": "e4e",
    "decoder": "generator",  # the reference fine-tunes g_ema
    KEY_GENERATOR: "generator",
    "discriminator": "discriminator",
    "arcface": "arcface",
    "lpips": "lpips_alex",
    "parser": "parser_unet",
}
# The same for an iFADIT run.
IFADIT_PRETRAINED = {
    "e4e": "e4e",
    "arcface": "arcface",
    "decoder": "generator",  # frozen in both phases (paper 3.2)
    KEY_GENERATOR: "generator",
    "parser": "parser_bisenet",
    "lpips": "lpips_alex",
    "landmarks": "mtcnn/onet",
}


@dataclasses.dataclass(frozen=True)
class Networks:
    """The modules of a run: the DBAF composition and the auxiliary networks."""

    model: DBAF
    discriminator: Discriminator
    arcface: ArcFace
    lpips: LPIPS
    parser: UNetParser

    @property
    def compute_dtype(self) -> str | None:
        """The dtype every network of the step computes in but the key generator's."""
        return self.model.compute_dtype

    def with_compute_dtype(self, dtype: str | None) -> "Networks":
        """Every network computing in ``dtype`` (`DBAF.with_compute_dtype`); parameters stay float32."""
        return dataclasses.replace(
            self,
            model=self.model.with_compute_dtype(dtype),
            discriminator=self.discriminator.clone(dtype=dtype or "float32"),
        )

    def apply(self, name: str, variables: Variables, *args, **kwargs):
        """Network ``name`` (`modules`) on ``variables[name]`` as the step runs it (`dbaf.apply_network`)."""
        return apply_network(self.compute_dtype, modules(self)[name], variables[name], *args, **kwargs)

    def modules(self) -> dict:
        """Network name -> module, for every network of the run."""
        return {
            **self.model.networks(),
            "discriminator": self.discriminator,
            "arcface": self.arcface,
            "lpips": self.lpips,
            "parser": self.parser,
        }

    @property
    def pretrained(self) -> dict[str, str]:
        return PRETRAINED


@dataclasses.dataclass(frozen=True)
class IFADITNetworks:
    """The modules of an iFADIT run: the composition, LPIPS and the landmark extractor."""

    model: IFADIT
    lpips: LPIPS
    landmarks: ONet

    @property
    def compute_dtype(self) -> str | None:
        return self.model.compute_dtype

    def with_compute_dtype(self, dtype: str | None) -> "IFADITNetworks":
        return dataclasses.replace(self, model=self.model.with_compute_dtype(dtype))

    def apply(self, name: str, variables: Variables, *args, **kwargs):
        """Network ``name`` on ``variables[name]`` as the step runs it (`IFADIT.apply` for the model's)."""
        if name in self.model.networks():
            return self.model.apply(name, variables, *args, **kwargs)
        return apply_network(self.compute_dtype, self.modules()[name], variables[name], *args, **kwargs)

    def modules(self) -> dict:
        return {**self.model.networks(), "lpips": self.lpips, "landmarks": self.landmarks}

    @property
    def pretrained(self) -> dict[str, str]:
        return IFADIT_PRETRAINED


def build_dbaf(config: ml_collections.ConfigDict) -> Networks:
    """A DBAF run's modules described by ``config.model`` (widths, variants), computing in
    ``config.compute_dtype`` (configs/stage1.py, configs/stage2.py)."""
    m = config.model
    decoder = Generator(
        size=m.size,
        style_dim=m.style_dim,
        n_mlp=m.n_mlp,
        channel_multiplier=m.channel_multiplier,
        width_scale=m.width_scale,
    )
    groups = tuple(m.latent_groups)
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
        )
    else:
        cid = LatentMLP(style_dim=m.style_dim)
    maar = MAAR(channels=decoder.channels(16), variant=m.maar.variant) if m.maar.enabled else None
    model = DBAF(
        e4e=Encoder4Editing(
            stylegan_size=m.size, style_dim=m.style_dim, width_scale=m.encoder_width_scale, input_size=m.size
        ),
        cid=cid,
        maar=maar,
        decoder=decoder,
        kria=KRIA(style_dim=m.style_dim, groups=groups),
        key_generator=decoder,
    )
    networks = Networks(
        model=model,
        discriminator=Discriminator(size=m.size, channel_multiplier=m.channel_multiplier, width_scale=m.width_scale),
        arcface=ArcFace(width_scale=m.encoder_width_scale),
        lpips=LPIPS(net="alex"),
        parser=UNetParser(),
    )
    return networks.with_compute_dtype(config.compute_dtype)


def build_ifadit(config: ml_collections.ConfigDict) -> IFADITNetworks:
    """An iFADIT run's modules (configs/ifadit.py)."""
    m = config.model
    decoder = Generator(
        size=m.size,
        style_dim=m.style_dim,
        n_mlp=m.n_mlp,
        channel_multiplier=m.channel_multiplier,
        width_scale=m.width_scale,
    )
    model = IFADIT(
        e4e=Encoder4Editing(
            stylegan_size=m.size, style_dim=m.style_dim, width_scale=m.encoder_width_scale, input_size=m.size
        ),
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


def modules(networks: Networks | IFADITNetworks) -> dict:
    """Network name -> module, for every network of a run."""
    return networks.modules()


def init_variables(
    networks: Networks, rng: jax.Array, size: int, names: Sequence[str] | None = None
) -> Variables:
    """Random variables (float32) for the networks in ``names`` (default: all), from one seed.

    Each network draws from its own key, so a network's values do not depend on which
    others are initialised (a run skips the ones it loads from files).
    """
    built = modules(networks)
    names = tuple(built) if names is None else tuple(names)
    unknown = set(names) - set(built)
    if unknown:
        raise ValueError(f"no networks named {sorted(unknown)} in this run")
    if isinstance(rng, jax.core.Tracer):  # inside the caller's trace (jit, eval_shape): no jit of its own
        return _initializer(networks, size, names)(rng)
    return _jitted_initializer(networks, size, names)(rng)


@functools.lru_cache(maxsize=4)
def _jitted_initializer(networks: Networks, size: int, names: tuple[str, ...]) -> Callable[[jax.Array], Variables]:
    """One jitted program per architecture, kept for later runs in the process.

    Traced eagerly, Flax would compile every distinct small op separately; under jit
    the forward passes that only give shapes are dead code.
    """
    # Thousands of threefry draws and no real compute: on the CPU, XLA's default LLVM
    # optimisation triples the compile time of this program and buys nothing.
    options = {"xla_backend_optimization_level": 0} if jax.default_backend() == "cpu" else None
    return jax.jit(_initializer(networks, size, names), compiler_options=options)


def _initializer(networks: Networks, size: int, names: tuple[str, ...]) -> Callable[[jax.Array], Variables]:
    """The function that initialises the networks in ``names`` from one seed."""
    if isinstance(networks, IFADITNetworks):
        return _ifadit_initializer(networks, size, names)
    model = networks.model

    def init(rng):
        images = jnp.zeros((2, size, size, 3))
        latents = jnp.zeros((2, model.decoder.n_latent, model.decoder.style_dim))
        rngs = dict(zip(_INIT_ORDER, jax.random.split(rng, len(_INIT_ORDER))))
        e4e = model.e4e.init(rngs["e4e"], images)
        decoder = model.decoder.init(rngs["decoder"], latents)
        initialisers = {
            "e4e": lambda: e4e,
            "cid": lambda: model.cid.init(rngs["cid"], latents),
            "maar": lambda: model.maar.init(rngs["maar"], *_maar_inputs(model.e4e.apply(e4e, images))),
            "decoder": lambda: decoder,
            "kria": lambda: model.kria.init(rngs["kria"], latents, latents),
            "discriminator": lambda: networks.discriminator.init(rngs["discriminator"], images),
            KEY_GENERATOR: lambda: jax.tree.map(jnp.copy, decoder),  # the decoder's start, own buffers
            "arcface": lambda: networks.arcface.init(rngs["arcface"], images),
            "lpips": lambda: networks.lpips.init(rngs["lpips"], images, images),
            "parser": lambda: networks.parser.init(rngs["parser"], images),
        }
        return {name: initialisers[name]() for name in names}

    return init


# The order in which init_variables splits its seed (fixed: it defines every network's key).
_INIT_ORDER = ("e4e", "cid", "maar", "decoder", "kria", "discriminator", "arcface", "lpips", "parser")


def _ifadit_initializer(
    networks: IFADITNetworks, size: int, names: tuple[str, ...]
) -> Callable[[jax.Array], Variables]:
    """`_initializer` for an iFADIT run."""
    model = networks.model

    def init(rng):
        images = jnp.zeros((2, size, size, 3))
        identity = jnp.zeros((2, model.sif.identity_dim))
        latents = jnp.zeros((2, model.decoder.n_latent, model.decoder.style_dim))
        rngs = dict(zip(_IFADIT_INIT_ORDER, jax.random.split(rng, len(_IFADIT_INIT_ORDER))))
        decoder = model.decoder.init(rngs["decoder"], latents)
        initialisers = {
            "e4e": lambda: model.e4e.init(rngs["e4e"], images),
            "arcface": lambda: model.arcface.init(rngs["arcface"], images),
            "mapper": lambda: model.mapper.init(rngs["mapper"], identity, latents),
            "sif": lambda: model.sif.init(rngs["sif"], identity, jnp.zeros((2, model.sif.key_dim))),
            "icl": lambda: model.icl.init(rngs["icl"], identity),
            "decoder": lambda: decoder,
            KEY_GENERATOR: lambda: jax.tree.map(jnp.copy, decoder),
            "parser": lambda: model.parser.init(rngs["parser"], images),
            "lpips": lambda: networks.lpips.init(rngs["lpips"], images, images),
            "landmarks": lambda: networks.landmarks.init(rngs["landmarks"], jnp.zeros((2, ONET_SIDE, ONET_SIDE, 3))),
        }
        return {name: initialisers[name]() for name in names}

    return init


_IFADIT_INIT_ORDER = ("e4e", "arcface", "mapper", "sif", "icl", "decoder", "parser", "lpips", "landmarks")


def _maar_inputs(features) -> tuple[jax.Array, jax.Array, jax.Array]:
    return features.c3, features.c2, features.c1


def load_pretrained(
    networks: Networks, variables: Variables, model_dir: str | Path, sub_dirs: dict[str, str]
) -> Variables:
    """Replaces the variables of the networks in ``sub_dirs`` (name -> sub-directory of
    ``model_dir``, e.g. `PRETRAINED`) by the ones stored there.

    Raises ModelDirectoryError for a missing directory or network, and for a stored
    network whose architecture differs from the run's (naming the fields), since its
    variables would not fit: e.g. a stage-1 result of another width given to stage 2.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise NetworkNotFoundError(f"{model_dir}: no such model directory")
    built = modules(networks)
    loaded = dict(variables)
    for name, sub_dir in sub_dirs.items():
        path = model_dir / sub_dir
        if not path.is_dir():
            raise NetworkNotFoundError(f"{model_dir}: no {sub_dir!r} network (needed for {name})")
        network = model_directory.load_network(path)
        expected = model_directory.module_config(built[name])
        found = model_directory.module_config(network.module)
        differ = {k: (found.get(k), v) for k, v in expected.items() if k != "dtype" and found.get(k) != v}
        if differ:
            raise ModelDirectoryError(f"{path}: architecture differs from the config (field: file vs config) {differ}")
        loaded[name] = network.variables
    return loaded
