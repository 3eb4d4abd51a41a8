"""iFADIT's training losses (paper sections 3.5.1 and 3.5.2) as pure jnp functions.

Images are (B, H, W, 3) in [-1, 1]. The networks the losses look through are
arguments (`LossNetworks`), so every function here is pure and the networks stay
whatever the caller trains or freezes:

- ``identity``: E_ID, images -> (B, D) embeddings (ArcFace IR-SE50, unit-norm);
- ``landmarks``: E_LM, images -> (B, ...) landmark coordinates. The paper's E_LM is a
  Wing-loss landmark CNN whose weights we do not have; the stand-in is MTCNN's O-net
  (`dbaf_jax.models.mtcnn.ONet`: five landmarks as fractions of a 48x48 crop, and
  differentiable), which the caller wraps into this function;
- ``parser``: E_FP, images -> (B, h, w, classes) parser outputs;
- ``lpips``: a pair of image batches -> (B,) LPIPS distances.

Reductions the paper leaves open, chosen here (docs/ifadit.md lists them):

- every ||.||_1 is the mean absolute difference over all entries (batch included),
  taken on [-1, 1] pixel values, unit-norm embeddings, or landmark coordinates;
- ||E_FP(X) - E_FP(X_bar)||_2 is the mean squared difference over all entries;
- SSIM is `image_metrics.ssim` (Wang et al., data range 2 for [-1, 1] images, i.e. the
  usual SSIM of the images mapped to [0, 1]);
- "pairs" in the diversity loss are unordered pairs of distinct items; each of its two
  terms is the mean over all such pairs;
- the image loss is summed over the three kinds of generated image (anonymized,
  recovered, wrongly recovered), each kind averaged over its own images.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from dbaf_jax.core import image_metrics
from dbaf_jax.core.errors import ConfigError
from dbaf_jax.train.losses import cosine_similarity, l1_loss, total

Array = jax.Array

# Eq. (12): alpha, beta of the visual quality loss (the paper takes them from Nitzan et al.).
VQ_SSIM_WEIGHT = 0.84
VQ_L1_WEIGHT = 0.16
# Eq. (14): lambda, the weight of L_VQ in phase I.
PHASE1_VQ_WEIGHT = 0.01


class ImageLossWeights(NamedTuple):
    """Eq. (20)'s lambda_1..4: L1, LPIPS, landmark and parser terms."""

    l1: float
    lpips: float
    landmarks: float
    parser: float


# Eq. (21): the correct recovery must match the original in detail; anonymized and
# wrongly recovered faces only in pose (landmarks) and outline (parser).
RECOVERED_IMAGE_WEIGHTS = ImageLossWeights(l1=10.0, lpips=1.0, landmarks=0.1, parser=0.01)
OTHER_IMAGE_WEIGHTS = ImageLossWeights(l1=0.01, lpips=0.1, landmarks=0.1, parser=0.01)


class LossNetworks(NamedTuple):
    """The frozen networks the losses look through (see the module docstring)."""

    identity: Callable[[Array], Array]
    landmarks: Callable[[Array], Array]
    parser: Callable[[Array], Array]
    lpips: Callable[[Array, Array], Array]


def _flatten_leading(images: Array) -> Array:
    """(N, B, ...) -> (N * B, ...)."""
    return images.reshape((-1,) + images.shape[2:])


def _tile(features: Array, copies: int) -> Array:
    """(B, ...) -> (copies * B, ...), the originals matching `_flatten_leading`'s order."""
    return jnp.tile(features, (copies,) + (1,) * (features.ndim - 1))


# --------------------------------------------------------------------------------------
# Phase I


def visual_quality_loss(reconstructed: Array, originals: Array) -> Array:
    """Eq. (12): mean over the batch of alpha (1 - SSIM) + beta ||X~ - X||_1, a scalar.

    reconstructed, originals: (B, H, W, 3) in [-1, 1], H, W >= 11.
    """
    ssim = image_metrics.ssim(reconstructed, originals)
    return VQ_SSIM_WEIGHT * jnp.mean(1.0 - ssim) + VQ_L1_WEIGHT * l1_loss(reconstructed, originals)


def semantic_loss(reconstructed: Array, originals: Array, networks: LossNetworks) -> Array:
    """Eq. (13): ||E_ID(X~) - E_ID(X)||_1 + ||E_LM(X~) - E_LM(X)||_1, a scalar.

    The paper's identity term is an L1 distance of embeddings (not a cosine);
    E_LM is ``networks.landmarks`` (MTCNN's O-net stands in for the paper's network).
    """
    identity = l1_loss(networks.identity(reconstructed), networks.identity(originals))
    landmarks = l1_loss(networks.landmarks(reconstructed), networks.landmarks(originals))
    return identity + landmarks


def phase1_loss(
    reconstructed: Array, originals: Array, networks: LossNetworks
) -> tuple[Array, dict[str, Array]]:
    """Eq. (14): (L_P1 = lambda L_VQ + L_Sem with lambda 0.01, {'vq', 'sem'} unweighted)."""
    terms = {
        "vq": visual_quality_loss(reconstructed, originals),
        "sem": semantic_loss(reconstructed, originals, networks),
    }
    return PHASE1_VQ_WEIGHT * terms["vq"] + terms["sem"], terms


# --------------------------------------------------------------------------------------
# Phase II: identity terms on embeddings (..., D)


def positive_cosine(emb_a: Array, emb_b: Array) -> Array:
    """Eq. (16): theta+ = max(0, cos(a, b)) along the last axis (broadcasting)."""
    return jnp.maximum(cosine_similarity(emb_a, emb_b), 0.0)


def cosine_distance(emb_a: Array, emb_b: Array) -> Array:
    """Eq. (19): theta- = 1 - cos(a, b) along the last axis (broadcasting)."""
    return 1.0 - cosine_similarity(emb_a, emb_b)


def anonymity_loss(anonymized: Array, originals: Array) -> Array:
    """Eq. (15): mean theta+(anonymized, original), a scalar.

    anonymized: (K, B, D) embeddings of each face under K keys; originals: (B, D).
    """
    return jnp.mean(positive_cosine(anonymized, originals))


def _mean_over_distinct_pairs(embeddings: Array) -> Array:
    """Mean theta+ over the unordered pairs i < j of axis -2: (G, M, D) -> scalar, M >= 2."""
    cosines = positive_cosine(embeddings[:, :, None, :], embeddings[:, None, :, :])
    upper = jnp.triu(jnp.ones(cosines.shape[-2:], bool), k=1)
    return jnp.sum(jnp.where(upper, cosines, 0.0)) / (embeddings.shape[0] * jnp.sum(upper))


def diversity_loss(anonymized: Array) -> Array:
    """Eq. (17): inter-identity plus inter-key mean theta+, a scalar.

    anonymized: (K, B, D) embeddings of B faces each anonymized with the same K keys,
    K >= 2, B >= 2. Inter-identity: the mean over keys and over pairs of distinct
    faces; inter-key: the mean over faces and over pairs of distinct keys.
    """
    keys, faces = anonymized.shape[:2]
    if keys < 2 or faces < 2:
        raise ConfigError(
            f"the diversity loss needs >= 2 keys and >= 2 faces per batch, got {keys} keys and {faces} faces"
        )
    return _mean_over_distinct_pairs(anonymized) + _mean_over_distinct_pairs(
        jnp.swapaxes(anonymized, 0, 1)
    )


def deanonymization_loss(recovered: Array, wrongly_recovered: Array, originals: Array) -> Array:
    """Eq. (18): mean theta-(recovered, X) + mean theta+(wrongly recovered, X), a scalar.

    recovered: (R, B, D), wrongly_recovered: (W, B, D) embeddings; originals (B, D).
    The paper gives no margin: theta+ stops pushing at cos = 0.
    """
    return jnp.mean(cosine_distance(recovered, originals)) + jnp.mean(
        positive_cosine(wrongly_recovered, originals)
    )


# --------------------------------------------------------------------------------------
# Phase II: image terms


def image_loss(
    originals: Array, generated: Array, weights: ImageLossWeights, networks: LossNetworks
) -> Array:
    """Eq. (20) for one kind of generated image, a scalar.

    lambda_1 ||X - X_bar||_1 + lambda_2 LPIPS + lambda_3 ||E_LM(X) - E_LM(X_bar)||_1
    + lambda_4 ||E_FP(X) - E_FP(X_bar)||_2 (mean squared), each averaged over images.
    originals: (B, H, W, 3); generated: (N, B, H, W, 3), N versions of each original.
    """
    copies = generated.shape[0]
    generated = _flatten_leading(generated)
    originals_tiled = _tile(originals, copies)
    parser_difference = networks.parser(generated) - _tile(networks.parser(originals), copies)
    return (
        weights.l1 * l1_loss(generated, originals_tiled)
        + weights.lpips * jnp.mean(networks.lpips(originals_tiled, generated))
        + weights.landmarks
        * l1_loss(networks.landmarks(generated), _tile(networks.landmarks(originals), copies))
        + weights.parser * jnp.mean(jnp.square(parser_difference))
    )


def phase2_loss(
    originals: Array,
    anonymized: Array,
    recovered: Array,
    wrongly_recovered: Array,
    networks: LossNetworks,
) -> tuple[Array, dict[str, Array]]:
    """Eq. (22): (L_P2 = L_Anon + L_Div + L_DeAnon + L_Img, the unweighted terms).

    originals: (B, H, W, 3); anonymized: (K, B, H, W, 3), each face under K >= 2 keys;
    recovered: (R, B, H, W, 3) recoveries with the matching key; wrongly_recovered:
    (W, B, H, W, 3) recoveries with another key. L_Img sums eq. (20) over the three
    kinds, with `RECOVERED_IMAGE_WEIGHTS` for the correct recoveries and
    `OTHER_IMAGE_WEIGHTS` for the rest (eq. 21). Terms: 'anon', 'div', 'deanon', 'img'.
    """

    def embed(images: Array) -> Array:
        return networks.identity(_flatten_leading(images)).reshape(images.shape[:2] + (-1,))

    original_emb = networks.identity(originals)
    anonymized_emb = embed(anonymized)
    terms = {
        "anon": anonymity_loss(anonymized_emb, original_emb),
        "div": diversity_loss(anonymized_emb),
        "deanon": deanonymization_loss(embed(recovered), embed(wrongly_recovered), original_emb),
        "img": image_loss(originals, recovered, RECOVERED_IMAGE_WEIGHTS, networks)
        + image_loss(originals, anonymized, OTHER_IMAGE_WEIGHTS, networks)
        + image_loss(originals, wrongly_recovered, OTHER_IMAGE_WEIGHTS, networks),
    }
    return total(terms.values()), terms
