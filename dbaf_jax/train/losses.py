"""The loss terms both methods' training uses (DBAF's in `dbaf_jax.train.dbaf.losses`,
iFADIT's in `dbaf_jax.train.ifadit.losses`), as pure jnp functions."""

from __future__ import annotations

from typing import Iterable, cast

import jax
import jax.numpy as jnp

Array = jax.Array


def total(terms: Iterable[Array]) -> Array:
    """Python's ``sum`` of loss terms, from its literal 0 as the losses have always added
    them, typed as the array it is for the one or more terms they pass."""
    return cast(Array, sum(terms))


def cosine_similarity(a: Array, b: Array, eps: float = 1e-8) -> Array:
    """torch.cosine_similarity along the last axis: each vector over max(||x||, eps)."""
    a = a / jnp.maximum(jnp.linalg.norm(a, axis=-1, keepdims=True), eps)
    b = b / jnp.maximum(jnp.linalg.norm(b, axis=-1, keepdims=True), eps)
    return jnp.sum(a * b, axis=-1)


def l1_loss(a: Array, b: Array) -> Array:
    """Mean absolute difference (the paper's L_rec)."""
    return jnp.mean(jnp.abs(a - b))
