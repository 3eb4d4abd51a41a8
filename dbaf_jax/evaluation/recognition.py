"""Identity distances between face embeddings and the recognition rates built on them.

The DBAF paper counts a face as recognised when the distance between its embedding
and the original's is within the recogniser's threshold tau (FaceNet 1.1, ArcFace
0.8, after the FaceNet paper) but does not say which distance it thresholds. So every
form is computed and reported, each against the same tau:

- ``l2``: Euclidean distance ||a - b||;
- ``squared_l2``: ||a - b||^2 (the FaceNet paper trains and compares on it);
- ``cosine``: 1 - cos(a, b).

Embeddings are L2-normalised first (the FaceNet and ArcFace embeddings are unit vectors
already; normalising makes the L2 forms comparable to the thresholds whatever the
caller passes), so l2 is in [0, 2], squared_l2 = 2 * cosine is in [0, 4]. dlib's
descriptors are the exception (`RAW_L2`): dlib documents its 0.6 threshold on the
Euclidean distance of its raw descriptors (norms near 1.3), so their l2 and squared_l2
are taken unnormalised.

Rates (fractions in [0, 1]):
- de-identification rate: the fraction of anonymized images recognised as their
  ORIGINAL (distance <= tau); lower is better anonymization;
- recovery rate: the same fraction for images recovered with the correct key; higher
  is better.
Both are `recognition_rate` of (originals, others).
"""

from __future__ import annotations

from typing import Mapping

import jax.numpy as jnp

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.evaluation import dlib_recognition

DISTANCE_FORMS = ("l2", "squared_l2", "cosine")
# The paper's thresholds (Table I), by recogniser; a config may override them.
THRESHOLDS = {"facenet": 1.1, "arcface": 0.8, "dlib": dlib_recognition.THRESHOLD}
# Recognisers whose threshold applies to the Euclidean distance of unnormalised embeddings.
RAW_L2 = ("dlib",)
NORM_EPS = 1e-12


def normalize(embeddings: jnp.ndarray) -> jnp.ndarray:
    """Embeddings (..., D) scaled to unit L2 norm along the last axis, float32."""
    embeddings = jnp.asarray(embeddings, jnp.float32)
    return embeddings / jnp.maximum(jnp.linalg.norm(embeddings, axis=-1, keepdims=True), NORM_EPS)


def distances(
    embeddings0: jnp.ndarray, embeddings1: jnp.ndarray, unit: bool = True
) -> dict[str, jnp.ndarray]:
    """Every distance form between row pairs: (B, D) x2 -> {form: (B,)}; ``unit=False``
    takes l2 and squared_l2 on the embeddings as given (`RAW_L2`)."""
    cosine_similarity = jnp.sum(normalize(embeddings0) * normalize(embeddings1), axis=-1)
    if unit:
        # ||a - b||^2 = 2 - 2 cos for unit vectors; clipped at 0 against rounding.
        squared_l2 = jnp.maximum(2.0 - 2.0 * cosine_similarity, 0.0)
    else:
        difference = jnp.asarray(embeddings0, jnp.float32) - jnp.asarray(embeddings1, jnp.float32)
        squared_l2 = jnp.sum(difference * difference, axis=-1)
    return {"l2": jnp.sqrt(squared_l2), "squared_l2": squared_l2, "cosine": 1.0 - cosine_similarity}


def distance(embeddings0: jnp.ndarray, embeddings1: jnp.ndarray, form: str) -> jnp.ndarray:
    """One distance form (see `DISTANCE_FORMS`) between row pairs: (B, D) x2 -> (B,)."""
    if form not in DISTANCE_FORMS:
        raise ConfigError(
            f"unknown distance form {form!r}; expected one of {', '.join(DISTANCE_FORMS)}"
        )
    return distances(embeddings0, embeddings1)[form]


def threshold(recogniser: str, overrides: Mapping[str, float] | None = None) -> float:
    """tau for ``recogniser``: ``overrides[recogniser]`` if given, else the paper's (`THRESHOLDS`)."""
    table = {**THRESHOLDS, **(overrides or {})}
    if recogniser not in table:
        raise ConfigError(
            f"no threshold for recogniser {recogniser!r}; known: {', '.join(sorted(table))}"
        )
    return float(table[recogniser])


def recognised(distance_values: jnp.ndarray, tau: float) -> jnp.ndarray:
    """Whether each pair counts as the same identity: distance <= tau, (B,) bool."""
    return distance_values <= tau


def recognition_rate(originals: jnp.ndarray, others: jnp.ndarray, tau: float, form: str) -> float:
    """Fraction of rows of ``others`` (B, D) recognised as the same row of ``originals`` (B, D)."""
    return float(jnp.mean(recognised(distance(originals, others, form), tau)))


def recognition_report(
    originals: jnp.ndarray, others: jnp.ndarray, tau: float, unit: bool = True
) -> dict[str, dict[str, float]]:
    """For every form: the mean distance and the rate within ``tau``; embeddings (B, D) x2
    (``unit``: see `distances`).

    Returns ``{form: {"mean_distance": ..., "rate": ...}}`` for the forms of `DISTANCE_FORMS`.
    """
    return {
        form: {
            "mean_distance": float(jnp.mean(values)),
            "rate": float(jnp.mean(recognised(values, tau))),
        }
        for form, values in distances(originals, others, unit).items()
    }
