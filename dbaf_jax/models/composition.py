"""What the model families' compositions (`dbaf.DBAF`, `ifadit.IFADIT`, each in its
own folder with the networks only it uses) share: an e4e encoder in front, a StyleGAN2
decoder behind, one network per field (a model directory holds one sub-directory per
field, `dbaf_jax.storage.model_families`), the key generator's name and how a step runs a
network (`apply_network`); the `Anonymizer` protocol inference runs any family through,
and `LatentRecovery`, the optional capability of a family that recovers from the
latents anonymization saved (DBAF's, the reference's recovery). Code outside a family's
folder asks ``isinstance(model, LatentRecovery)``, never the family's name."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence, TypeVar, runtime_checkable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from dbaf_jax.core import precision, sharding
from dbaf_jax.models.stylegan2 import LATENT_GROUPS

Variables = dict[str, Any]
Model = TypeVar("Model")

# The frozen StyleGAN2 (the base g_ema) whose mapping network turns key z into key w.
KEY_GENERATOR = "key_generator"


class EncoderDecoder:
    """Sizes of a composition with ``e4e`` and ``decoder`` fields."""

    e4e: Any  # declared for the type checker; the dataclass that mixes this in holds the fields
    decoder: Any

    @property
    def input_size(self) -> int:
        return self.e4e.input_size

    @property
    def output_size(self) -> int:
        return self.decoder.size


def network_names(cls: type) -> tuple[str, ...]:
    """The networks of a composition class: its dataclass fields but ``compute_dtype``."""
    return tuple(field.name for field in dataclasses.fields(cls) if field.name != "compute_dtype")


def latents_to_key(
    generator, gen_variables, z: jnp.ndarray, groups: Sequence[int] = LATENT_GROUPS
) -> jnp.ndarray:
    """z (..., len(groups), style_dim) -> key (..., sum(groups), style_dim).

    Each z goes through the generator's mapping network; group g's w fills
    ``groups[g]`` consecutive latents (the reference's ``sample_w``).
    """
    z = jnp.asarray(z)
    if z.shape[-2] != len(groups):
        raise ValueError(f"expected {len(groups)} z vectors (one per group), got shape {z.shape}")
    w = generator.apply(gen_variables, z.reshape(-1, z.shape[-1]), method="map").reshape(z.shape)
    return jnp.repeat(w, np.asarray(groups), axis=-2, total_repeat_length=sum(groups))


def apply_network(
    compute_dtype: str | None, module: nn.Module, variables: Variables, *args, **kwargs
) -> Any:
    """``module.apply(variables, *args, **kwargs)`` as a step runs a network: in
    ``compute_dtype`` (`dbaf_jax.core.precision.apply`) and, under a mesh, with the batch
    axis of its inputs and outputs split over the devices (`sharding.constrain_batch`)
    and its variables gathered whole for the call (fsdp keeps them split between
    calls). Left split, XLA would split activations along the parameters' split axis
    inside the network and move them to and from the batch split. With ``mutable`` the
    updated collections (whole-batch statistics) are not split."""
    variables = sharding.replicate(variables)
    args, kwargs = sharding.constrain_batch((args, kwargs))
    outputs = precision.apply(compute_dtype, module, variables, *args, **kwargs)
    if "mutable" in kwargs:
        outputs, updates = outputs
        return sharding.constrain_batch(outputs), updates
    return sharding.constrain_batch(outputs)


class Anonymizer(Protocol):
    """What inference (`dbaf_jax.inference`) calls on a loaded model of any family.

    Keys are (K, B or 1, L, D): K keys for every image, or one per image; images
    (B, s, s, 3) in [-1, 1]; outputs (K, B, s_out, s_out, 3).
    """

    FAMILY: str

    @property
    def input_size(self) -> int: ...

    @property
    def output_size(self) -> int: ...

    @property
    def key_shape(self) -> tuple[int, int]:
        """The (n, style_dim) standard normals a key is made from (`keys.key_latents`)."""
        ...

    def networks(self) -> dict[str, Any]: ...

    def for_inference(self) -> "Anonymizer": ...

    def with_compute_dtype(self, dtype: str) -> "Anonymizer": ...

    def compute_variables(self, variables: Variables) -> Variables: ...

    def key_from_z(self, variables: Variables, z: jax.Array) -> jax.Array: ...

    def anonymize_images(
        self, variables: Variables, images: jax.Array, keys: jax.Array
    ) -> jax.Array: ...

    def recover_images(
        self, variables: Variables, anonymized: jax.Array, keys: jax.Array
    ) -> jax.Array: ...


# Latents of a latent recovery: (anonymized identity codes, attribute codes, attribute maps).
Latents = tuple[jax.Array, jax.Array, tuple[jax.Array, ...]]


@runtime_checkable
class LatentRecovery(Protocol):
    """An optional capability of a composition: recovery from the latents its
    anonymization saved (the reference's latent-space recovery; `dbaf.DBAF` has it,
    `ifadit.IFADIT` recovers from the image alone). Inference, the evaluation and the
    commands ask ``isinstance(model, LatentRecovery)``.

    Keys are (K, B or 1, L, D) as for `Anonymizer`.
    """

    def anonymize_with_latents(
        self, variables: Variables, images: jax.Array, keys: jax.Array
    ) -> tuple[jax.Array, Latents]:
        """Images (B, S, S, 3) -> (anonymized (K, B, s, s, 3), the latents: anonymized
        identity codes (K, B, L, D), attribute codes (B, L, D), attribute maps)."""
        ...

    def recover_from_latents(
        self,
        variables: Variables,
        anonymized_identity: jax.Array,
        attribute_code: jax.Array,
        attribute_maps: Sequence[jax.Array],
        keys: jax.Array,
    ) -> jax.Array:
        """One key's latents (anonymized identity codes (B, L, D), attribute codes, maps)
        -> recovered images (K, B, s, s, 3)."""
        ...
