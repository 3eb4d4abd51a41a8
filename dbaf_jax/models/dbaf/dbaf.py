"""DBAF: how e4e, CID, MAAR, the generator and KRIA compose.

The networks are Flax modules; their variables live outside, in one dict keyed by
network name (`NETWORKS`), so that training can split them into trainable and
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
from typing import Any, NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from dbaf_jax.core import precision, sharding
from dbaf_jax.core.errors import ConfigError
from dbaf_jax.models import composition
from dbaf_jax.models.composition import KEY_GENERATOR, apply_network
from dbaf_jax.models.dbaf.kria import KRIA
from dbaf_jax.models.dbaf.maar import MAAR
from dbaf_jax.models.e4e import Encoder4Editing, EncoderOutput
from dbaf_jax.models.stylegan2 import Generator, noise_resolution

Variables = dict[str, Any]


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


class Anonymized(NamedTuple):
    """K anonymizations of B images (one per key).

    images: (K, B, size, size, 3).
    latents: their W+ codes A + KRIA(I, key), (K, B, n_latent, style_dim).
    identity_code: the anonymized identity codes KRIA(I, key), (K, B, n_latent, style_dim).
    """

    images: jax.Array
    latents: jax.Array
    identity_code: jax.Array


@dataclasses.dataclass(frozen=True)
class DBAF(composition.EncoderDecoder):
    """The composition of DBAF's networks (``maar`` is None in the no-MAAR ablation).

    ``key_generator`` is the frozen base StyleGAN2 whose mapping network turns key
    z into key w (variables under `KEY_GENERATOR`).

    Keys come with a leading axis, ``keys`` (K, B or 1, n_latent, style_dim): K
    anonymizations or recoveries of each image in one call (stage 2 trains with
    K = 2 and 3; a user command passes K = 1). The K outputs share the images'
    encoding and MAAR maps and are decoded together, as one batch of B * K.

    ``compute_dtype`` is how the networks run, not what they are: None (float32) or
    "bfloat16" (`with_compute_dtype`; `dbaf_jax.core.precision`). The key generator always
    computes in float32, so a password gives the same key however the model runs.
    """

    e4e: Encoder4Editing
    cid: nn.Module
    maar: MAAR | None
    decoder: Generator
    kria: KRIA
    key_generator: Generator
    compute_dtype: str | None = None

    def __post_init__(self):
        precision.check_compute_dtype(self.compute_dtype)
        if self.maar is None:
            return
        # MAAR's maps come from e4e's features at input/16, /8 and /4 and each replaces the
        # decoder's noise inputs of its side: a map that fits no noise input would be dropped.
        noise_sides = {noise_resolution(i) for i in range(self.decoder.num_noise)}
        for side in (self.e4e.input_size // 16, self.e4e.input_size // 8, self.e4e.input_size // 4):
            if side not in noise_sides:
                raise ConfigError(
                    f"a MAAR map of {side}x{side} (e4e input {self.e4e.input_size}) fits none of the "
                    f"generator's noise inputs ({sorted(noise_sides)}): use a model size of at least 64"
                )
            if self.decoder.channels(side) != self.maar.channels:
                raise ConfigError(
                    f"MAAR maps have {self.maar.channels} channels, the generator's {side}x{side} layers "
                    f"{self.decoder.channels(side)}"
                )

    def networks(self) -> dict[str, nn.Module]:
        """Network name -> module: the fields of this class are the one table of what a DBAF
        model holds, by the names variable dicts and model directories use (`NETWORKS`;
        the no-MAAR ablation has no ``maar``)."""
        named = {name: getattr(self, name) for name in NETWORKS}
        return {name: module for name, module in named.items() if module is not None}

    def with_compute_dtype(self, dtype: str | None) -> "DBAF":
        """The same model computing in ``dtype`` ("bfloat16"; None or "float32": float32).

        Give it `compute_variables` of the loaded variables, once. Outputs are float32
        either way. A model directory's fingerprint is that of the loaded float32 model:
        the generator's ``dtype`` field and the cast variables enter the hash, so
        fingerprint before converting.
        """
        precision.check_compute_dtype(dtype)
        return dataclasses.replace(
            self, compute_dtype=dtype, decoder=self.decoder.clone(dtype=dtype or "float32")
        )

    def compute_variables(self, variables: Variables) -> Variables:
        """``variables`` ({network: variables}) as this model computes with them: every
        network's params in the compute dtype but the key generator's (float32). Without
        a reduced compute dtype the same arrays, no copy."""
        return {
            name: v if name == KEY_GENERATOR else precision.cast_params(v, self.compute_dtype)
            for name, v in variables.items()
        }

    def apply(self, name: str, variables: Variables, *args, **kwargs) -> Any:
        """Network ``name`` on ``variables[name]``: `apply_network` in the compute dtype."""
        return apply_network(
            self.compute_dtype, getattr(self, name), variables[name], *args, **kwargs
        )

    def for_inference(self) -> "DBAF":
        """The model as users run it: a CID trained with attention across the batch
        processes each image as if alone (the reference's test-time behaviour), so an
        output never depends on its batch-mates."""
        if getattr(self.cid, "attention", None) == "batch":
            return dataclasses.replace(self, cid=self.cid.clone(attention="single"))
        return self

    FAMILY = "dbaf"  # what a DBAF model directory's model.json names

    @property
    def key_shape(self) -> tuple[int, int]:
        """(n_groups, style_dim): the key z vectors, one per latent group (3, 512)."""
        return len(self.kria.groups), self.key_generator.style_dim

    def anonymize_images(
        self, variables: Variables, images: jax.Array, keys: jax.Array
    ) -> jax.Array:
        """Images (B, S, S, 3) -> anonymized (K, B, s, s, 3) for keys (K, B or 1, L, D)."""
        encoding, _ = self.encode(variables, images)
        return self.anonymize(variables, encoding, keys).images

    def recover_images(
        self, variables: Variables, anonymized: jax.Array, keys: jax.Array
    ) -> jax.Array:
        """The paper's recovery from anonymized images (B, S, S, 3) alone -> (K, B, s, s, 3)."""
        return self.recover_image(variables, anonymized, keys)[0]

    def key_from_z(self, variables: Variables, z: jax.Array) -> jax.Array:
        """Key latents z (B, n_groups, style_dim) -> keys (B, n_latent, style_dim)."""
        return composition.latents_to_key(
            self.key_generator, variables[KEY_GENERATOR], z, tuple(self.kria.groups)
        )

    def encode(
        self,
        variables: Variables,
        images: jax.Array,
        train: bool = False,
        rng: jax.Array | None = None,
    ) -> tuple[Encoding, Variables]:
        """Images (B, H, W, 3) -> (Encoding, {network: updated collections}: MAAR's batch
        statistics when training it, else {}).

        ``train`` enables CID's dropout (from ``rng``) and MAAR's batch statistics.
        """
        return self.disentangle(variables, self.apply("e4e", variables, images), train, rng)

    def disentangle(
        self,
        variables: Variables,
        encoded: EncoderOutput,
        train: bool = False,
        rng: jax.Array | None = None,
    ) -> tuple[Encoding, Variables]:
        """e4e's output -> (Encoding, model-state updates); see `encode`."""
        attribute_code, identity_code = self.apply(
            "cid",
            variables,
            encoded.codes,
            deterministic=not train,
            rngs={"dropout": rng} if train else {},
        )
        maps, updates = (), {}
        if self.maar is not None:
            maar_inputs = (encoded.c3, encoded.c2, encoded.c1)
            if train:
                maps, maar_updates = self.apply(
                    "maar", variables, *maar_inputs, train=True, mutable=["batch_stats"]
                )
                updates = {"maar": maar_updates}
            else:
                maps = self.apply("maar", variables, *maar_inputs)
        return Encoding(encoded.codes, attribute_code, identity_code, tuple(maps)), updates

    def synthesize(
        self, variables: Variables, latents: jax.Array, attribute_maps: tuple[jax.Array, ...]
    ) -> jax.Array:
        """W+ latents (B, n_latent, style_dim) and MAAR maps -> images (B, size, size, 3).

        Latents with a leading key axis (K, B, n_latent, style_dim) give (K, B, size,
        size, 3): every key's latents are decoded with the same maps.
        """
        if latents.ndim == 3:
            return self.apply(
                "decoder", variables, latents, noise=self.noise_inputs(attribute_maps)
            )
        # One decoder batch of B * K, image-major, so that an image's K decodings stay on
        # the device that holds the image.
        count = latents.shape[0]
        maps = tuple(jnp.repeat(m, count, axis=0) for m in attribute_maps)
        images = self.synthesize(variables, sharding.merge_into_batch(latents), maps)
        return sharding.split_from_batch(images, count)

    def noise_inputs(self, attribute_maps: tuple[jax.Array, ...]) -> dict[int, jax.Array]:
        """Each map replaces the generator noise inputs of its side (3-4, 5-6, 7-8 at 256 px);
        `__post_init__` guarantees every map has some."""
        by_side = {m.shape[1]: m for m in attribute_maps}
        return {
            i: by_side[noise_resolution(i)]
            for i in range(self.decoder.num_noise)
            if noise_resolution(i) in by_side
        }

    def mix(
        self, variables: Variables, identity: Encoding, attributes: Encoding
    ) -> tuple[jax.Array, jax.Array]:
        """Stage 1: identity of one encoding, attributes of another -> (images, latents)."""
        latents = identity.identity_code + attributes.attribute_code
        return self.synthesize(variables, latents, attributes.attribute_maps), latents

    def transform_identity(
        self, variables: Variables, identity_code: jax.Array, keys: jax.Array
    ) -> jax.Array:
        """KRIA: identity codes (B, L, D) and keys (K, B or 1, L, D) -> (K, B, L, D), as one
        KRIA batch of B * K, image-major (see `synthesize`)."""
        count = keys.shape[0]
        keys = sharding.merge_into_batch(jnp.broadcast_to(keys, (count, *identity_code.shape)))
        transformed = self.apply("kria", variables, jnp.repeat(identity_code, count, axis=0), keys)
        return sharding.split_from_batch(transformed, count)

    def anonymized_codes(
        self, variables: Variables, encoding: Encoding, keys: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """(latents ``A + KRIA(I, key)``, identity codes ``KRIA(I, key)``), each (K, B, L, D)."""
        identity_code = self.transform_identity(variables, encoding.identity_code, keys)
        return encoding.attribute_code + identity_code, identity_code

    def anonymize(self, variables: Variables, encoding: Encoding, keys: jax.Array) -> Anonymized:
        """``A + KRIA(I, key)`` for each of the K keys, decoded with the images' maps."""
        latents, identity_code = self.anonymized_codes(variables, encoding, keys)
        return Anonymized(
            self.synthesize(variables, latents, encoding.attribute_maps), latents, identity_code
        )

    def recovered_latents(
        self,
        variables: Variables,
        encoding: Encoding,
        anonymized_identity: jax.Array,
        keys: jax.Array,
    ) -> jax.Array:
        """The reference's recovered codes ``A + KRIA(anonymized identity (B, L, D), key)``
        with the ORIGINAL images' A -> (K, B, L, D)."""
        return encoding.attribute_code + self.transform_identity(
            variables, anonymized_identity, keys
        )

    def recover_latent(
        self,
        variables: Variables,
        encoding: Encoding,
        anonymized_identity: jax.Array,
        keys: jax.Array,
    ) -> tuple[jax.Array, jax.Array]:
        """The reference's recovery (`recovered_latents`) decoded with the ORIGINAL images'
        maps -> (images (K, B, ...), latents (K, B, L, D))."""
        latents = self.recovered_latents(variables, encoding, anonymized_identity, keys)
        return self.synthesize(variables, latents, encoding.attribute_maps), latents

    def anonymize_with_latents(
        self, variables: Variables, images: jax.Array, keys: jax.Array
    ) -> tuple[jax.Array, composition.Latents]:
        """`composition.LatentRecovery`: images (B, S, S, 3) -> (anonymized (K, B, s, s, 3),
        (``KRIA(I, key)`` (K, B, L, D), A (B, L, D), the images' MAAR maps))."""
        encoding, _ = self.encode(variables, images)
        anonymized = self.anonymize(variables, encoding, keys)
        latents = (anonymized.identity_code, encoding.attribute_code, encoding.attribute_maps)
        return anonymized.images, latents

    def recover_from_latents(
        self,
        variables: Variables,
        anonymized_identity: jax.Array,
        attribute_code: jax.Array,
        attribute_maps: Sequence[jax.Array],
        keys: jax.Array,
    ) -> jax.Array:
        """`composition.LatentRecovery`: the reference's recovery (`recover_latent`) from
        what `anonymize_with_latents` gave for one key -> images (K, B, s, s, 3)."""
        # Only A and the maps are read: the codes latent recovery has no use for stay None.
        encoding = Encoding(None, attribute_code, None, tuple(attribute_maps))  # type: ignore[arg-type]
        return self.recover_latent(variables, encoding, anonymized_identity, keys)[0]

    def recover_image(
        self,
        variables: Variables,
        anonymized_images: jax.Array,
        keys: jax.Array,
        train: bool = False,
        rng: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """The paper's recovery from anonymized images (B, H, W, 3) alone: re-encode them and
        apply ``A' + KRIA(I', key)`` with their own maps -> (images (K, B, ...), latents).

        ``train`` as in `encode`; the re-encoding's MAAR statistics are not kept (one
        update per step comes from encoding the originals)."""
        encoding, _ = self.encode(variables, anonymized_images, train, rng)
        latents = encoding.attribute_code + self.transform_identity(
            variables, encoding.identity_code, keys
        )
        return self.synthesize(variables, latents, encoding.attribute_maps), latents


# The networks of a DBAF model, by name: the fields of `DBAF` but ``compute_dtype``.
NETWORKS = composition.network_names(DBAF)
FAMILY = DBAF.FAMILY
# DBAF has the reference's latent-space recovery; the type checker holds it to the protocol.
LATENT_RECOVERY: type[composition.LatentRecovery] = DBAF
