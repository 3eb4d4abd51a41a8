"""What every method's networks table shares: the table's row (`NetworkSpec`), what
derives from a table (the pretrained list, the init order, the exported networks),
random initialisation from one seed and loading pretrained networks from a converted
model directory; and what both methods' tables and networks classes share (the LPIPS
row, the decoder and encoder a config describes, `ComposedNetworks`).

A method's table and its networks class live in its own folder:
`dbaf_jax.train.dbaf.networks` (DBAF_NETWORKS, `Networks`) and
`dbaf_jax.train.ifadit.networks` (IFADIT_NETWORKS, `IFADITNetworks`). A networks
class names its ``table`` and gives the ``examples`` its networks are initialised on.
Pretrained networks come from ``config.model_dir`` (the sub-directories the table
names); without one every network starts at random from the seed, as the ``tiny``
smoke runs do.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from dbaf_jax.core.errors import ModelDirectoryError, NetworkNotFoundError
from dbaf_jax.models.e4e import Encoder4Editing
from dbaf_jax.models.stylegan2 import Generator
from dbaf_jax.storage import model_directory, network_kinds
from dbaf_jax.train.method import Variables


class Examples(NamedTuple):
    """The zero inputs networks are initialised on (batch 2)."""

    images: jax.Array  # (2, size, size, 3)
    latents: jax.Array  # (2, n_latent, style_dim): W+ codes
    identity: jax.Array | None  # (2, identity_dim): iFADIT's identity vectors; None for DBAF


def examples(size: int, n_latent: int, style_dim: int, identity_dim: int | None = None) -> Examples:
    """Zero `Examples` at image side ``size``."""
    return Examples(
        images=jnp.zeros((2, size, size, 3)),
        latents=jnp.zeros((2, n_latent, style_dim)),
        identity=None if identity_dim is None else jnp.zeros((2, identity_dim)),
    )


class NetworkSpec(NamedTuple):
    """One row of a method's networks table."""

    name: str  # the network's name in a run (and in its exported model directory)
    pretrained: (
        str | None
    )  # the sub-directory of the converted model directory it starts from, or None
    # (networks, {key owner: key}, examples) -> the network's random variables (float32)
    init: Callable[..., Variables]
    own_key: bool = (
        True  # False: initialised from another row's key (the key generator from the decoder's)
    )
    exported: bool = (
        True  # written to the model directory a finished run exports (False: a loss's critic)
    )


def pretrained_of(table: tuple[NetworkSpec, ...]) -> dict[str, str]:
    """Network name -> pretrained sub-directory, for the rows of ``table`` that have one."""
    return {row.name: row.pretrained for row in table if row.pretrained is not None}


# The LPIPS (AlexNet) critic of both methods' losses: its row of their tables.
LPIPS_ALEX = NetworkSpec(
    "lpips",
    model_directory.lpips_dir("alex"),
    lambda n, k, x: n.lpips.init(k["lpips"], x.images, x.images),
    exported=False,
)


class ComposedNetworks:
    """The base of a method's networks class, whose ``model`` field is its composition."""

    model: Any

    @property
    def compute_dtype(self) -> str | None:
        """The dtype every network of the step computes in but the key generator's: the
        composition's."""
        return self.model.compute_dtype


def decoder_of(m: ml_collections.ConfigDict) -> Generator:
    """The StyleGAN2 generator a config's ``model`` fields describe: both methods'
    decoder (and key generator)."""
    return Generator(
        size=m.size,
        style_dim=m.style_dim,
        n_mlp=m.n_mlp,
        channel_multiplier=m.channel_multiplier,
        width_scale=m.width_scale,
    )


def encoder_of(m: ml_collections.ConfigDict) -> Encoder4Editing:
    """The e4e encoder a config's ``model`` fields describe (both methods')."""
    return Encoder4Editing(
        stylegan_size=m.size,
        style_dim=m.style_dim,
        width_scale=m.encoder_width_scale,
        input_size=m.size,
    )


def init_order_of(table: tuple[NetworkSpec, ...]) -> tuple[str, ...]:
    """The rows that draw their own key, in the order the seed is split among them."""
    return tuple(row.name for row in table if row.own_key)


def exported_of(networks, leave_out: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The networks of ``networks``' table that a finished run exports, in table order:
    the exported rows the run has (a model without MAAR or a parser has no such row),
    but those in ``leave_out`` (e.g. KRIA, which stage 1 does not train)."""
    built = networks.modules()
    return tuple(
        row.name
        for row in networks.table
        if row.exported and row.name in built and row.name not in leave_out
    )


def modules(networks) -> dict:
    """Network name -> module, for every network of a run."""
    return networks.modules()


def init_variables(
    networks, rng: jax.Array, size: int, names: Sequence[str] | None = None
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
    if isinstance(
        rng, jax.core.Tracer
    ):  # inside the caller's trace (jit, eval_shape): no jit of its own
        return _initializer(networks, size, names)(rng)
    return _jitted_initializer(networks, size, names)(rng)


@functools.lru_cache(maxsize=4)
def _jitted_initializer(
    networks, size: int, names: tuple[str, ...]
) -> Callable[[jax.Array], Variables]:
    """One jitted program per architecture, kept for later runs in the process.

    Traced eagerly, Flax would compile every distinct small op separately; under jit
    the forward passes that only give shapes are dead code.
    """
    # Thousands of threefry draws and no real compute: on the CPU, XLA's default LLVM
    # optimisation triples the compile time of this program and buys nothing.
    options = {"xla_backend_optimization_level": 0} if jax.default_backend() == "cpu" else None
    return jax.jit(_initializer(networks, size, names), compiler_options=options)


def _initializer(networks, size: int, names: tuple[str, ...]) -> Callable[[jax.Array], Variables]:
    """The function that initialises the networks in ``names`` from one seed, as the
    run's networks table says."""
    rows = {row.name: row for row in networks.table}
    order = init_order_of(networks.table)

    def init(rng):
        keys = dict(zip(order, jax.random.split(rng, len(order))))
        example = networks.examples(size)
        return {name: rows[name].init(networks, keys, example) for name in names}

    return init


def load_pretrained(
    networks, variables: Variables, model_dir: str | Path, sub_dirs: dict[str, str]
) -> Variables:
    """Replaces the variables of the networks in ``sub_dirs`` (name -> sub-directory of
    ``model_dir``, e.g. a table's `pretrained_of`) by the ones stored there, each
    sub-directory read once (the decoder and the key generator share ``generator``).

    Raises ModelDirectoryError for a missing directory or network, and for a stored
    network whose architecture differs from the run's (naming the fields), since its
    variables would not fit: e.g. a stage-1 result of another width given to stage 2.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise NetworkNotFoundError(f"{model_dir}: no such model directory")
    built = modules(networks)
    loaded = dict(variables)
    read: dict[Path, model_directory.Network] = {}  # each sub-directory read once
    for name, sub_dir in sub_dirs.items():
        path = model_dir / sub_dir
        if not path.is_dir():
            raise NetworkNotFoundError(f"{model_dir}: no {sub_dir!r} network (needed for {name})")
        if path in read:  # a copy of its arrays: each network owns its buffers, as when read twice
            network = read[path]
            network = dataclasses.replace(
                network, variables=jax.tree.map(np.copy, network.variables)
            )
        else:
            network = read[path] = model_directory.load_network(path)
        expected = network_kinds.module_config(built[name])
        found = network_kinds.module_config(network.module)
        differ = {
            k: (found.get(k), v) for k, v in expected.items() if k != "dtype" and found.get(k) != v
        }
        if differ:
            raise ModelDirectoryError(
                f"{path}: architecture differs from the config (field: file vs config) {differ}"
            )
        loaded[name] = network.variables
    return loaded
