"""iFADIT ("Invertible Face Anonymization via Disentangled Identity Transform"): how
its networks compose.

With ``z = ArcFace(X)`` the identity (B, 512), ``a = e4e(X)`` the W+ attribute code,
``M`` the mapper, ``T`` the secure identity flow (SIF), ``C`` the identity
compensation layer (ICL) and ``G`` the generator (the paper's eqs. 1-11):
- reconstruction (phase 1):  ``G(M(z, a))``;
- anonymization:             ``G(M(T(z, k), a))``;
- recovery:                  ``G(M(T^-1(C(ArcFace(X_anon)), k), e4e(X_anon)))``, from the
  anonymized image alone;
- background refinement (inference only, when the model holds a ``parser``): the
  generated face is alpha-blended into the input through BiSeNet's face mask, blurred.

The key is one 512-d vector: one z ~ N(0, I) through the key generator's mapping
network (`composition.latents_to_key` with a single group), so keys are (..., 1, style_dim).
Variables live outside, one dict keyed by network name, as for DBAF
(`dbaf_jax.models.dbaf.dbaf`; what both share: `dbaf_jax.models.composition`); every method is a pure function of (variables, inputs).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import dm_pix
import flax.linen as nn
import jax
import jax.numpy as jnp

from dbaf_jax.core import precision, sharding
from dbaf_jax.core.errors import ConfigError
from dbaf_jax.models import composition
from dbaf_jax.models.arcface import ArcFace
from dbaf_jax.models.composition import KEY_GENERATOR, apply_network
from dbaf_jax.models.e4e import Encoder4Editing
from dbaf_jax.models.ifadit.icl import IdentityCompensation
from dbaf_jax.models.ifadit.mapper import IdentityAttributeMapper
from dbaf_jax.models.ifadit.sif import SecureIdentityFlow
from dbaf_jax.models.parsers import FACE_LABELS, FEATHER, PARSE_SIZE, BiSeNet, bisenet_inputs
from dbaf_jax.models.stylegan2 import Generator

Variables = dict[str, Any]

KEY_GROUPS = (1,)  # one key vector for the whole identity
# Networks that always compute in float32: the key generator (a password gives the same
# key however the model runs) and the flow (its inverse is exact only to the precision
# it computes in).
FLOAT32_NETWORKS = (KEY_GENERATOR, "sif")


class Anonymized(NamedTuple):
    """K anonymizations of B images.

    images: (K, B, size, size, 3), background-refined when ``blend`` was asked.
    generated: the generator's images before refinement, (K, B, size, size, 3).
    identity: the anonymized identities T(z, k), (K, B, identity_dim).
    """

    images: jax.Array
    generated: jax.Array
    identity: jax.Array


@dataclasses.dataclass(frozen=True)
class IFADIT(composition.EncoderDecoder):
    """The composition of iFADIT's networks (``parser`` None: no background refinement).

    Keys come with a leading axis, (K, B or 1, 1, style_dim): K anonymizations or
    recoveries of each image per call, decoded as one batch of B * K (image-major).
    ``compute_dtype`` as in `DBAF`; the key generator and the flow stay float32.
    """

    e4e: Encoder4Editing
    arcface: ArcFace
    mapper: IdentityAttributeMapper
    sif: SecureIdentityFlow
    icl: IdentityCompensation
    decoder: Generator
    key_generator: Generator
    parser: BiSeNet | None = None
    compute_dtype: str | None = None

    FAMILY = "ifadit"  # what an iFADIT model directory's model.json names

    def __post_init__(self):
        precision.check_compute_dtype(self.compute_dtype)
        if (
            self.sif.identity_dim != self.arcface.embedding_dim
            or self.icl.features != self.arcface.embedding_dim
        ):
            raise ConfigError(
                f"the flow ({self.sif.identity_dim}) and the ICL ({self.icl.features}) must take ArcFace's "
                f"{self.arcface.embedding_dim}-d identity"
            )
        if self.sif.key_dim != self.key_generator.style_dim:
            raise ConfigError(
                f"the flow's key_dim {self.sif.key_dim} is not the key generator's {self.key_generator.style_dim}"
            )
        if (
            self.mapper.style_dim != self.decoder.style_dim
            or self.e4e.style_dim != self.decoder.style_dim
        ):
            raise ConfigError("e4e, the mapper and the generator must share one style_dim")
        if self.parser is not None and self.e4e.input_size != self.decoder.size:
            raise ConfigError(
                f"background refinement blends the {self.decoder.size}px output into the {self.e4e.input_size}px input: "
                "they must be the same size"
            )

    # ---- the model-family protocol (`composition.Anonymizer`)

    @property
    def key_shape(self) -> tuple[int, int]:
        """(1, style_dim): one z vector per key."""
        return len(KEY_GROUPS), self.key_generator.style_dim

    def key_from_z(self, variables: Variables, z: jax.Array) -> jax.Array:
        """Key latents z (..., 1, style_dim) -> keys (..., 1, style_dim)."""
        return composition.latents_to_key(
            self.key_generator, variables[KEY_GENERATOR], z, KEY_GROUPS
        )

    def networks(self) -> dict[str, nn.Module]:
        """Network name -> module (`NETWORKS`; no ``parser`` when the model has none)."""
        named = {name: getattr(self, name) for name in NETWORKS}
        return {name: module for name, module in named.items() if module is not None}

    def for_inference(self) -> "IFADIT":
        """iFADIT has no train-only behaviour (no dropout; every BatchNorm uses its running statistics)."""
        return self

    def with_compute_dtype(self, dtype: str | None) -> "IFADIT":
        """The same model computing in ``dtype`` (see `DBAF.with_compute_dtype`)."""
        precision.check_compute_dtype(dtype)
        return dataclasses.replace(
            self, compute_dtype=dtype, decoder=self.decoder.clone(dtype=dtype or "float32")
        )

    def compute_variables(self, variables: Variables) -> Variables:
        """``variables`` with every network's params in the compute dtype but `FLOAT32_NETWORKS`'."""
        return {
            name: v if name in FLOAT32_NETWORKS else precision.cast_params(v, self.compute_dtype)
            for name, v in variables.items()
        }

    def anonymize_images(
        self, variables: Variables, images: jax.Array, keys: jax.Array
    ) -> jax.Array:
        """Images (B, S, S, 3) -> anonymized (K, B, s, s, 3) for keys (K, B or 1, 1, D)."""
        return self.anonymize(variables, images, keys, blend=self.parser is not None).images

    def recover_images(
        self, variables: Variables, anonymized: jax.Array, keys: jax.Array
    ) -> jax.Array:
        """Anonymized images (B, S, S, 3) alone -> recovered (K, B, s, s, 3)."""
        return self.recover(variables, anonymized, keys, blend=self.parser is not None)

    # ---- the pieces

    def apply(self, name: str, variables: Variables, *args, **kwargs) -> Any:
        """Network ``name`` on ``variables[name]``, in the compute dtype unless it is float32-only."""
        dtype = None if name in FLOAT32_NETWORKS else self.compute_dtype
        return apply_network(dtype, getattr(self, name), variables[name], *args, **kwargs)

    def identity(self, variables: Variables, images: jax.Array) -> jax.Array:
        """E_ID: images (B, H, W, 3) -> unit ArcFace identities (B, 512)."""
        return self.apply("arcface", variables, images)

    def attributes(self, variables: Variables, images: jax.Array) -> jax.Array:
        """E_Attr: images (B, H, W, 3) -> W+ attribute codes (B, n_latent, style_dim)."""
        return self.apply("e4e", variables, images).codes

    def synthesize(
        self, variables: Variables, identity: jax.Array, attributes: jax.Array
    ) -> jax.Array:
        """G(M(z, a)): identities (B, Dz) or (K, B, Dz) and codes (B, L, D) -> images
        (B, size, size, 3) or (K, B, size, size, 3), the K identities of an image decoded
        with its one code as one batch of B * K."""
        if identity.ndim == 2:
            return self.apply(
                "decoder", variables, self.apply("mapper", variables, identity, attributes)
            )
        count = identity.shape[0]
        images = self.synthesize(
            variables, sharding.merge_into_batch(identity), jnp.repeat(attributes, count, axis=0)
        )
        return sharding.split_from_batch(images, count)

    def transform_identity(
        self, variables: Variables, identity: jax.Array, keys: jax.Array, inverse: bool = False
    ) -> jax.Array:
        """T (or T^-1 with ``inverse``): identities (B, Dz) and keys (K, B or 1, 1, D) -> (K, B, Dz)."""
        count = keys.shape[0]
        key_vectors = jnp.broadcast_to(keys[:, :, 0], (count, identity.shape[0], keys.shape[-1]))
        method = "inverse" if inverse else None
        transformed = self.apply(
            "sif",
            variables,
            jnp.repeat(identity, count, axis=0),
            sharding.merge_into_batch(key_vectors),
            method=method,
        )
        return sharding.split_from_batch(transformed, count)

    def reconstruct(self, variables: Variables, images: jax.Array) -> jax.Array:
        """Phase 1's reconstruction G(M(E_ID(X), E_Attr(X))) (B, size, size, 3)."""
        return self.synthesize(
            variables, self.identity(variables, images), self.attributes(variables, images)
        )

    def anonymize(
        self, variables: Variables, images: jax.Array, keys: jax.Array, blend: bool = False
    ) -> Anonymized:
        """Eq. 9 for each of the K keys; ``blend`` applies the background refinement (eq. 11)."""
        identity = self.transform_identity(variables, self.identity(variables, images), keys)
        generated = self.synthesize(variables, identity, self.attributes(variables, images))
        refined = self.refine_background(variables, images, generated) if blend else generated
        return Anonymized(refined, generated, identity)

    def recover(
        self, variables: Variables, anonymized: jax.Array, keys: jax.Array, blend: bool = False
    ) -> jax.Array:
        """Eq. 10 from anonymized images (B, H, W, 3) alone -> (K, B, size, size, 3)."""
        read = self.apply("icl", variables, self.identity(variables, anonymized))
        identity = self.transform_identity(variables, read, keys, inverse=True)
        generated = self.synthesize(variables, identity, self.attributes(variables, anonymized))
        return self.refine_background(variables, anonymized, generated) if blend else generated

    def face_mask(self, variables: Variables, images: jax.Array) -> jax.Array:
        """The soft face mask M of eq. 11: images (B, S, S, 3) -> (B, S, S, 1) in [0, 1].

        BiSeNet parses the images at its training resolution (`PARSE_SIZE`); the face
        classes (`FACE_LABELS`, as the photo path's masks) give a binary mask, blurred with
        a Gaussian of ``FEATHER * S`` (the photo path's feathering width).
        """
        if self.parser is None:
            raise ConfigError("this iFADIT model has no parser: background refinement needs one")
        batch, size = images.shape[0], images.shape[1]
        inputs = jax.image.resize(images, (batch, PARSE_SIZE, PARSE_SIZE, 3), "bilinear")
        labels = jnp.argmax(self.apply("parser", variables, bisenet_inputs(inputs)), axis=-1)
        face = jnp.isin(labels, jnp.asarray(FACE_LABELS)).astype(jnp.float32)[..., None]
        face = jax.image.resize(face, (batch, size, size, 1), "linear")
        sigma = FEATHER * size
        return dm_pix.gaussian_blur(face, sigma, kernel_size=2 * int(3 * sigma) + 1)

    def refine_background(
        self, variables: Variables, inputs: jax.Array, generated: jax.Array
    ) -> jax.Array:
        """Eq. 11: ``M * generated + (1 - M) * inputs`` with M from the inputs (B, S, S, 3);
        ``generated`` (K, B, S, S, 3) -> (K, B, S, S, 3)."""
        mask = self.face_mask(variables, inputs)
        return mask * generated + (1.0 - mask) * inputs


# The networks of an iFADIT model, by name: the fields of `IFADIT` but ``compute_dtype``.
NETWORKS = composition.network_names(IFADIT)
FAMILY = IFADIT.FAMILY
