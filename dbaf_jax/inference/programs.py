"""The jitted anonymize and recover programs of any model family, and batch padding.

Each program is jitted with the model static, so instances of one architecture share
their compiled code. Keys are (L, D), one for the whole batch, or (B, L, D), one per
image; the models take them as (K=1, B or 1, L, D) (`_key_axes`).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dbaf_jax.models import composition


def _key_axes(key: jax.Array) -> jax.Array:
    """One key (L, D) for the whole batch, or one per image (B, L, D) -> the model's (K=1, B or 1, L, D)."""
    return key[None] if key.ndim == 3 else key[None, None]


# Jitted with the model static: instances of one architecture share their compiled code.
@functools.partial(jax.jit, static_argnums=(0, 4))
def anonymize_program(model, variables, images, key, with_latents: bool):
    """Anonymized images (B, s, s, 3) float32 of placed images and a placed key (`FaceAnonymizer.place`,
    `place_key`), and with ``with_latents`` (a `composition.LatentRecovery` model only) the
    latents its recovery reads (anonymized identity code, attribute code, attribute maps)."""
    if not with_latents:
        return model.anonymize_images(variables, images, _key_axes(key))[0].astype(
            jnp.float32
        ), None
    # Latent-space recovery also needs the codes of this anonymization.
    anonymized, (identity, attribute, maps) = model.anonymize_with_latents(
        variables, images, _key_axes(key)
    )
    return anonymized[0].astype(jnp.float32), (identity[0], attribute, maps)


@functools.partial(jax.jit, static_argnums=0)
def key_program(model, variables, z):
    """Key latents z (N, *key_shape) -> keys (N, L, D)."""
    return model.key_from_z(variables, z)


@functools.partial(jax.jit, static_argnums=0)
def recover_image_program(model, variables, anonymized, key):
    return model.recover_images(variables, anonymized, _key_axes(key))[0].astype(jnp.float32)


@functools.partial(jax.jit, static_argnums=0)
def recover_latent_program(
    model: composition.LatentRecovery, variables, anonymized_identity, attribute_code, maps, key
):
    return model.recover_from_latents(
        variables, anonymized_identity, attribute_code, maps, _key_axes(key)
    )[0].astype(jnp.float32)


def latents_dict(latents) -> dict[str, Any]:
    identity, attribute, maps = latents
    named = {"anonymized_identity": identity, "attribute_code": attribute}
    named.update({f"attribute_map_{i}": m for i, m in enumerate(maps)})
    return named


def unpadded(outputs, count: int):
    """``outputs`` (a pytree of batch-first arrays) cut back to ``count`` rows; as is when unpadded."""
    return jax.tree.map(lambda x: x if len(x) == count else x[:count], outputs)


def pad_batch(batch: np.ndarray, size: int) -> np.ndarray:
    """Pads axis 0 to ``size`` with copies of the last entry: every call then has one
    shape and compiles once (images do not interact at inference, so the padding does
    not change the others). Copies, not zeros: an all-zero image is a degenerate input
    (a randomly initialised ArcFace maps it to the zero vector, and iFADIT's identity
    normalisation then gives NaN)."""
    if len(batch) == 0:
        raise ValueError("an empty batch has no entry to pad with")
    return np.concatenate([batch, np.repeat(batch[-1:], size - len(batch), axis=0)])
