"""DBAF: how e4e, CID, MAAR, the generator and KRIA compose.

The networks are Flax modules; their variables live outside, in one dict keyed by
network name (``NETWORKS``), so that training can split them into trainable and
frozen parts and shard them. Every method here is a pure function of
(variables, inputs).

Reference semantics (docs/reference_code.md), with ``C`` the e4e code, ``A``
CID's attribute code, ``I = C - A`` the identity code, ``M`` MAAR's maps:
- stage-1 mixing:  ``w = I_id + A_attr``, decoded with ``M_attr``;
- anonymization:   ``w_ano = A + KRIA(I, key)``, decoded with ``M``;
- latent recovery: ``w_rec = A + KRIA(KRIA(I, key), key)`` with the ORIGINAL image's
  ``A`` and ``M`` (how the reference trains);
- image recovery:  re-encode the anonymized image and apply ``A' + KRIA(I', key)``
  with its own ``M'`` (the paper's eqs. 21-23; needs nothing but the image and the key).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NamedTuple

import flax.linen as nn
import jax

from dbaf_jax import keys, model_directory
from dbaf_jax.errors import NetworkNotFoundError
from dbaf_jax.models.cid import CID
from dbaf_jax.models.e4e import Encoder4Editing, EncoderOutput
from dbaf_jax.models.kria import KRIA
from dbaf_jax.models.maar import MAAR
from dbaf_jax.models.stylegan2 import Generator, noise_resolution

Variables = dict[str, Any]

# The networks of the model proper, by the names used in variable dicts and model directories.
NETWORKS = ("e4e", "cid", "maar", "decoder", "kria")
# The frozen StyleGAN2 (the base g_ema) whose mapping network turns key z into key w.
KEY_GENERATOR = "key_generator"


class Encoding(NamedTuple):
    """What DBAF extracts from images (B, H, W, 3).

    code: e4e's W+ code C (B, n_latent, style_dim).
    attribute_code: CID's A (B, n_latent, style_dim).
    identity_code: I = C - A (B, n_latent, style_dim).
    attribute_maps: MAAR's maps, coarse to fine ((B, r, r, C) for r = size/16, /8, /4),
      or () when the model has no MAAR.
    """

    code: jax.Array
    attribute_code: jax.Array
    identity_code: jax.Array
    attribute_maps: tuple[jax.Array, ...]


@dataclasses.dataclass(frozen=True)
class DBAF:
    """The composition of DBAF's networks (``maar`` is None in the no-MAAR ablation).

    ``key_generator`` is the frozen base StyleGAN2 whose mapping network turns key
    z into key w (variables under `KEY_GENERATOR`).
    """

    e4e: Encoder4Editing
    cid: nn.Module
    maar: MAAR | None
    decoder: Generator
    kria: KRIA
    key_generator: Generator

    def networks(self) -> dict[str, nn.Module]:
        """Network name -> module: the one table of what a DBAF model holds (variable
        dicts and model directories use these names; the no-MAAR ablation has no ``maar``)."""
        named = {
            "e4e": self.e4e,
            "cid": self.cid,
            "maar": self.maar,
            "decoder": self.decoder,
            "kria": self.kria,
            KEY_GENERATOR: self.key_generator,
        }
        return {name: module for name, module in named.items() if module is not None}

    def for_inference(self) -> "DBAF":
        """The model as users run it: a CID trained with attention across the batch
        processes each image as if alone (the reference's test-time behaviour), so an
        output never depends on its batch-mates."""
        if getattr(self.cid, "attention", None) == "batch":
            return dataclasses.replace(self, cid=self.cid.clone(attention="single"))
        return self

    def key_from_z(self, variables: Variables, z: jax.Array) -> jax.Array:
        """Key latents z (B, n_groups, style_dim) -> keys (B, n_latent, style_dim)."""
        return keys.latents_to_key(self.key_generator, variables[KEY_GENERATOR], z, tuple(self.kria.groups))

    def encode(
        self, variables: Variables, images: jax.Array, train: bool = False, rng: jax.Array | None = None
    ) -> tuple[Encoding, Variables]:
        """Images (B, H, W, 3) -> (Encoding, MAAR's updated batch statistics or {}).

        ``train`` enables CID's dropout (from ``rng``) and MAAR's batch statistics.
        """
        return self.disentangle(variables, self.e4e.apply(variables["e4e"], images), train, rng)

    def disentangle(
        self, variables: Variables, encoded: EncoderOutput, train: bool = False, rng: jax.Array | None = None
    ) -> tuple[Encoding, Variables]:
        """e4e's output -> (Encoding, MAAR's updated batch statistics or {}); see `encode`."""
        attribute_code, identity_code = self.cid.apply(
            variables["cid"], encoded.codes, deterministic=not train, rngs={"dropout": rng} if train else {}
        )
        maps, updates = (), {}
        if self.maar is not None:
            maar_inputs = (encoded.c3, encoded.c2, encoded.c1)
            if train:
                maps, updates = self.maar.apply(variables["maar"], *maar_inputs, train=True, mutable=["batch_stats"])
            else:
                maps = self.maar.apply(variables["maar"], *maar_inputs)
        return Encoding(encoded.codes, attribute_code, identity_code, tuple(maps)), updates

    def synthesize(self, variables: Variables, latents: jax.Array, attribute_maps: tuple[jax.Array, ...]) -> jax.Array:
        """W+ latents (B, n_latent, style_dim) and MAAR maps -> images (B, size, size, 3)."""
        return self.decoder.apply(variables["decoder"], latents, noise=self.noise_inputs(attribute_maps))

    def noise_inputs(self, attribute_maps: tuple[jax.Array, ...]) -> dict[int, jax.Array]:
        """Each map replaces the generator noise inputs of its resolution (3-4, 5-6, 7-8 at 256 px)."""
        by_resolution = {m.shape[1]: m for m in attribute_maps}
        return {
            i: by_resolution[noise_resolution(i)]
            for i in range(self.decoder.num_noise)
            if noise_resolution(i) in by_resolution
        }

    def mix(self, variables: Variables, identity: Encoding, attributes: Encoding) -> tuple[jax.Array, jax.Array]:
        """Stage 1: identity of one encoding, attributes of another -> (images, latents)."""
        latents = identity.identity_code + attributes.attribute_code
        return self.synthesize(variables, latents, attributes.attribute_maps), latents

    def transform_identity(self, variables: Variables, identity_code: jax.Array, key: jax.Array) -> jax.Array:
        """KRIA: identity code (B, L, D) and key (B or 1, L, D) -> transformed identity code."""
        return self.kria.apply(variables["kria"], identity_code, key)

    def anonymize(self, variables: Variables, encoding: Encoding, key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """-> (anonymized images, their latents A + KRIA(I, key), the anonymized identity code)."""
        anonymized_identity = self.transform_identity(variables, encoding.identity_code, key)
        latents = encoding.attribute_code + anonymized_identity
        return self.synthesize(variables, latents, encoding.attribute_maps), latents, anonymized_identity

    def recover_latent(
        self, variables: Variables, encoding: Encoding, anonymized_identity: jax.Array, key: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """The reference's recovery: A + KRIA(anonymized identity, key) with the original A and maps."""
        latents = encoding.attribute_code + self.transform_identity(variables, anonymized_identity, key)
        return self.synthesize(variables, latents, encoding.attribute_maps), latents

    def recover_image(self, variables: Variables, anonymized_images: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The paper's recovery from the anonymized images alone -> (recovered images, latents)."""
        encoding, _ = self.encode(variables, anonymized_images)
        latents = encoding.attribute_code + self.transform_identity(variables, encoding.identity_code, key)
        return self.synthesize(variables, latents, encoding.attribute_maps), latents


def load(directory) -> tuple[DBAF, Variables]:
    """Loads a DBAF model directory (``python -m convert.dbaf`` or a training export).

    Returns the composition and the variables of its networks plus the key generator's.
    A directory without ``maar`` is the no-MAAR ablation. Raises NetworkNotFoundError
    (a ModelDirectoryError) for a missing directory or network.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise NetworkNotFoundError(f"{directory}: no such model directory")
    missing = [n for n in NETWORKS + (KEY_GENERATOR,) if n != "maar" and not (directory / n).is_dir()]
    if missing:
        raise NetworkNotFoundError(f"{directory}: not a DBAF model directory, missing {missing}")
    names = [n for n in NETWORKS + (KEY_GENERATOR,) if (directory / n).is_dir()]
    networks = {name: model_directory.load_network(directory / name) for name in names}
    model = DBAF(
        e4e=networks["e4e"].module,
        cid=networks["cid"].module,
        maar=networks["maar"].module if "maar" in networks else None,
        decoder=networks["decoder"].module,
        kria=networks["kria"].module,
        key_generator=networks[KEY_GENERATOR].module,
    )
    return model, {name: network.variables for name, network in networks.items()}
