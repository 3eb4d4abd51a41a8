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
from typing import Callable, NamedTuple, Sequence

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
from dbaf_jax.train.state import DISCRIMINATOR

class Examples(NamedTuple):
    """The zero inputs networks are initialised on (batch 2)."""

    images: jax.Array  # (2, size, size, 3)
    latents: jax.Array  # (2, n_latent, style_dim): W+ codes
    identity: jax.Array | None  # (2, identity_dim): iFADIT's identity vectors; None for DBAF


class NetworkSpec(NamedTuple):
    """One row of a method's networks table."""

    name: str  # the network's name in a run (and in its exported model directory)
    pretrained: str | None  # the sub-directory of the converted model directory it starts from, or None
    # (networks, {key owner: key}, examples) -> the network's random variables (float32)
    init: Callable[..., Variables]
    own_key: bool = True  # False: initialised from another row's key (the key generator from the decoder's)


def pretrained_of(table: tuple[NetworkSpec, ...]) -> dict[str, str]:
    """Network name -> pretrained sub-directory, for the rows of ``table`` that have one."""
    return {row.name: row.pretrained for row in table if row.pretrained is not None}


def init_order_of(table: tuple[NetworkSpec, ...]) -> tuple[str, ...]:
    """The rows that draw their own key, in the order the seed is split among them."""
    return tuple(row.name for row in table if row.own_key)


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
            DISCRIMINATOR: self.discriminator,
            "arcface": self.arcface,
            "lpips": self.lpips,
            "parser": self.parser,
        }

    @property
    def pretrained(self) -> dict[str, str]:
        return PRETRAINED

    @property
    def table(self) -> tuple[NetworkSpec, ...]:
        return DBAF_NETWORKS


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

    @property
    def table(self) -> tuple[NetworkSpec, ...]:
        return IFADIT_NETWORKS


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


def _initializer(networks: Networks | IFADITNetworks, size: int, names: tuple[str, ...]) -> Callable[[jax.Array], Variables]:
    """The function that initialises the networks in ``names`` from one seed, as the
    run's networks table (`DBAF_NETWORKS`, `IFADIT_NETWORKS`) says."""
    rows = {row.name: row for row in networks.table}
    order = init_order_of(networks.table)
    model = networks.model

    def init(rng):
        identity = model.sif.identity_dim if isinstance(networks, IFADITNetworks) else None
        examples = Examples(
            images=jnp.zeros((2, size, size, 3)),
            latents=jnp.zeros((2, model.decoder.n_latent, model.decoder.style_dim)),
            identity=None if identity is None else jnp.zeros((2, identity)),
        )
        keys = dict(zip(order, jax.random.split(rng, len(order))))
        return {name: rows[name].init(networks, keys, examples) for name in names}

    return init


def _maar_inputs(features) -> tuple[jax.Array, jax.Array, jax.Array]:
    return features.c3, features.c2, features.c1


def _maar_init(n: Networks, keys: dict, x: Examples) -> Variables:
    """MAAR takes e4e's feature maps: e4e's own start (its key) gives their shapes."""
    e4e = n.model.e4e.init(keys["e4e"], x.images)
    return n.model.maar.init(keys["maar"], *_maar_inputs(n.model.e4e.apply(e4e, x.images)))


# DBAF's networks, in the order the seed is split among them (fixed: it defines every
# network's random start). The key generator (the base StyleGAN2, whose mapping turns
# a key's z into w) starts as the decoder does, from the decoder's key.
DBAF_NETWORKS = (
    NetworkSpec("e4e", model_directory.E4E_DIR, lambda n, k, x: n.model.e4e.init(k["e4e"], x.images)),
    NetworkSpec("cid", None, lambda n, k, x: n.model.cid.init(k["cid"], x.latents)),
    NetworkSpec("maar", None, _maar_init),
    NetworkSpec("decoder", model_directory.GENERATOR_DIR, lambda n, k, x: n.model.decoder.init(k["decoder"], x.latents)),  # the reference fine-tunes g_ema
    NetworkSpec(KEY_GENERATOR, model_directory.GENERATOR_DIR, lambda n, k, x: n.model.decoder.init(k["decoder"], x.latents), own_key=False),
    NetworkSpec("kria", None, lambda n, k, x: n.model.kria.init(k["kria"], x.latents, x.latents)),
    NetworkSpec(DISCRIMINATOR, model_directory.DISCRIMINATOR_DIR, lambda n, k, x: n.discriminator.init(k[DISCRIMINATOR], x.images)),
    NetworkSpec("arcface", model_directory.ARCFACE_DIR, lambda n, k, x: n.arcface.init(k["arcface"], x.images)),
    NetworkSpec("lpips", model_directory.lpips_dir("alex"), lambda n, k, x: n.lpips.init(k["lpips"], x.images, x.images)),
    NetworkSpec("parser", model_directory.parser_dir("unet"), lambda n, k, x: n.parser.init(k["parser"], x.images)),
)
PRETRAINED = pretrained_of(DBAF_NETWORKS)

# iFADIT's networks, in the order the seed is split among them. The decoder is frozen
# in both phases (paper 3.2); the model's ArcFace and BiSeNet serve the losses too.
IFADIT_NETWORKS = (
    NetworkSpec("e4e", model_directory.E4E_DIR, lambda n, k, x: n.model.e4e.init(k["e4e"], x.images)),
    NetworkSpec("arcface", model_directory.ARCFACE_DIR, lambda n, k, x: n.model.arcface.init(k["arcface"], x.images)),
    NetworkSpec("mapper", None, lambda n, k, x: n.model.mapper.init(k["mapper"], x.identity, x.latents)),
    NetworkSpec("sif", None, lambda n, k, x: n.model.sif.init(k["sif"], x.identity, jnp.zeros((2, n.model.sif.key_dim)))),
    NetworkSpec("icl", None, lambda n, k, x: n.model.icl.init(k["icl"], x.identity)),
    NetworkSpec("decoder", model_directory.GENERATOR_DIR, lambda n, k, x: n.model.decoder.init(k["decoder"], x.latents)),
    NetworkSpec(KEY_GENERATOR, model_directory.GENERATOR_DIR, lambda n, k, x: n.model.decoder.init(k["decoder"], x.latents), own_key=False),
    NetworkSpec("parser", model_directory.parser_dir("bisenet"), lambda n, k, x: n.model.parser.init(k["parser"], x.images)),
    NetworkSpec("lpips", model_directory.lpips_dir("alex"), lambda n, k, x: n.lpips.init(k["lpips"], x.images, x.images)),
    NetworkSpec("landmarks", f"{model_directory.MTCNN_DIR}/onet", lambda n, k, x: n.landmarks.init(k["landmarks"], jnp.zeros((2, ONET_SIDE, ONET_SIDE, 3)))),
)
IFADIT_PRETRAINED = pretrained_of(IFADIT_NETWORKS)


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
