"""What the model families' compositions (`dbaf.DBAF`, `ifadit.IFADIT`) share: an e4e
encoder in front, a StyleGAN2 decoder behind, one network per field (a model
directory holds one sub-directory per field, `dbaf_jax.model_families`), and the
`Anonymizer` protocol inference runs any family through."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from dbaf_jax.models.stylegan2 import LATENT_GROUPS

Variables = dict[str, Any]
Model = TypeVar("Model")


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
