"""Every loss term of both DBAF stages as a pure jnp function, and the stages' weighted sums
(the terms iFADIT uses too, cosine similarity and L1, are in `dbaf_jax.train.losses`).

Terms take already computed network outputs (ArcFace embeddings and maps, parser
logits, LPIPS distances, discriminator logits, latent codes), so they are
independent of the networks. Images and maps are NHWC. Two loss sets exist
(docs/reference_code.md): ``reference`` reproduces the authors' training scripts
exactly; ``paper`` follows the paper's equations. Where they differ:

=================  ====================================  =====================================
term               reference (code)                      paper
=================  ====================================  =====================================
rec                SmoothL1(beta=1), mean                L1, mean
reg                mean(w^2) over all entries            eq. 15/36: sum_{i=1}^{N-1} ||w_i - w_avg||_2
stage-1 id         0.5 x (1 - clamp(cos(X_id, X_mix)))   none (eq. 18)
stage-2 id         `stage2_identity_reference`           `stage2_identity_paper` (eqs. 29-32)
stage-2 adv, D     averaged over the five outputs        summed over S2 (eqs. 37-38)
weights            configs/dbaf/stage*.py ``reference``       configs/dbaf/stage*.py ``paper``
=================  ====================================  =====================================

`FORMS` holds each set's choices. In both, stage 2's rec, lpips and parse terms are
summed over the five outputs and reg is averaged over the five codes.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp

from dbaf_jax.train.losses import cosine_similarity, l1_loss, total

Array = jax.Array

# Parser classes whose logits the parse loss compares (reference ParseLoss.select_list;
# CelebAMask-HQ labels: 2 left brow, 4/5 eyes, 10 nose, 11 mouth, 12 upper lip).
PARSE_CLASSES = (2, 4, 5, 10, 11, 12)
# Stage 2's identity terms combined over the outputs: summed (DBAF eqs. 29-32) or
# averaged over them and their pairs (HFORD eqs. 10-12).
IDENTITY_REDUCTIONS = ("sum", "mean")

# --------------------------------------------------------------------------------------
# Identity terms (ArcFace embeddings (B, 512), as IDLossExtractor computes them)


def identity_loss(emb_a: Array, emb_b: Array, margin: float = 0.0) -> Array:
    """mean(1 - clamp(cos, min=margin)): pulls two identities together."""
    return jnp.mean(1.0 - jnp.maximum(cosine_similarity(emb_a, emb_b), margin))


def reverse_identity_similarity(emb_a: Array, emb_b: Array, margin: float = 0.0) -> Array:
    """mean(clamp(cos, min=margin)): pushes two identities apart, down to cos = margin."""
    return jnp.mean(jnp.maximum(cosine_similarity(emb_a, emb_b), margin))


def contrastive_distance(emb_a: Array, emb_b: Array, margin: float = 0.0) -> Array:
    """(B,) clamp(1 - cos, min=margin): the clamp is on the distance, not on the cosine."""
    return jnp.maximum(1.0 - cosine_similarity(emb_a, emb_b), margin)


def contrastive_loss(
    distances: Array,
    same: bool | Array,
    same_threshold: float = 0.0,
    different_threshold: float = 0.5,
) -> Array:
    """Stage 1's contrastive loss on `contrastive_distance` (X_attr, X_mix).

    Same pair (X_id is X_attr): mean(relu(d - same_threshold)); different pair:
    mean(relu(different_threshold - d)). ``same`` may be traced.
    """
    same_term = jnp.mean(jnp.maximum(distances - same_threshold, 0.0))
    different_term = jnp.mean(jnp.maximum(different_threshold - distances, 0.0))
    return jnp.where(same, same_term, different_term)


def stage2_identity_reference(
    ori: Array,
    ano1: Array,
    ano2: Array,
    rec: Array,
    err1: Array,
    err2: Array,
    margin: float = 0.1,
    reduction: str = "sum",
) -> Array:
    """Stage 2's identity loss as the reference computes it (unweighted; embeddings (B, 512)).

    mean of reverse similarities (ori, ano1), (ori, ano2), (ano1, ano2)
    + mean of reverse similarities (rec, err1), (rec, err2), (err1, err2), (ori, err1), (ori, err2)
    + identity loss (ori, rec); every cosine clamped at ``margin``. Its own averages
    are fixed: ``reduction`` must be "sum" (the configs check it).
    """
    if reduction != "sum":
        raise ValueError(
            f"the reference's identity loss has fixed averages; reduction {reduction!r} is the paper form's"
        )
    rev = lambda a, b: reverse_identity_similarity(a, b, margin)  # noqa: E731
    anonymized = (rev(ori, ano1) + rev(ori, ano2) + rev(ano1, ano2)) / 3
    wrong_key = (
        rev(rec, err1) + rev(rec, err2) + rev(err1, err2) + rev(ori, err1) + rev(ori, err2)
    ) / 5
    return anonymized + wrong_key + identity_loss(ori, rec, margin)


def stage2_identity_paper(
    ori: Array,
    ano1: Array,
    ano2: Array,
    rec: Array,
    err1: Array,
    err2: Array,
    margin: float = 0.0,
    reduction: str = "sum",
) -> Array:
    """The papers' identity loss on S1 = {ano1, ano2, err1, err2} (n = 4) and the
    recovery rec (m = 1), each term batch-averaged (embeddings (B, 512)).

    DBAF's L_id = L_dif + L_rev + L_div (eqs. 29-32), ``reduction="sum"``: L_dif =
    sum_{x in S1} max(margin, cos(ori, x)); L_rev = 1 - cos(ori, rec); L_div = sum over
    the 6 unordered pairs x != y of S1 of max(margin, cos(x, y)).
    HFORD's L_id = L_dif + L_anony + L_rev (eqs. 10-13), ``reduction="mean"``: the
    same terms normalised, 1/(n(n-1)) over the 12 ordered pairs (the mean over the 6
    unordered ones, the cosine being symmetric) and 1/n over S1.
    """
    if reduction not in IDENTITY_REDUCTIONS:
        raise ValueError(f"identity reduction {reduction!r}: expected one of {IDENTITY_REDUCTIONS}")
    s1 = (ano1, ano2, err1, err2)
    pairs = list(itertools.combinations(s1, 2))
    difference = total(reverse_identity_similarity(ori, x, margin) for x in s1)
    recovery = jnp.mean(1.0 - cosine_similarity(ori, rec))
    diversity = total(reverse_identity_similarity(x, y, margin) for x, y in pairs)
    if reduction == "mean":
        difference, diversity = difference / len(s1), diversity / len(pairs)
    return difference + recovery + diversity


# --------------------------------------------------------------------------------------
# Image terms


def smooth_l1_loss(a: Array, b: Array, beta: float = 1.0) -> Array:
    """torch.nn.SmoothL1Loss() (beta 1, mean): 0.5 d^2 / beta where |d| < beta, else |d| - beta / 2."""
    d = jnp.abs(a - b)
    return jnp.mean(jnp.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta))


def lpips_batch_mean(distances: Array) -> Array:
    """The reference's LPIPS loss: per-pair distances (B,) summed and divided by B."""
    return jnp.mean(distances)


def parse_loss(logits_a: Array, logits_b: Array, classes: Sequence[int] = PARSE_CLASSES) -> Array:
    """MSE between two images' parser logits (B, H, W, 19) with all but ``classes`` zeroed.

    The reference multiplies the logits by a 0/1 class mask and takes the mean over
    all 19 channels, so the sum over the kept classes is divided by B*H*W*19.
    """
    index = jnp.asarray(classes)
    d = jnp.take(logits_a, index, axis=-1) - jnp.take(logits_b, index, axis=-1)
    return jnp.sum(d * d) / logits_a.size


# --------------------------------------------------------------------------------------
# Latent regularisers (codes (B, N, 512))


def latent_square_mean(w: Array) -> Array:
    """The reference's regulariser: mean(w^2) over all entries."""
    return jnp.mean(w * w)


def latent_distance_to_average(w: Array, w_avg: Array) -> Array:
    """The paper's regulariser (eqs. 15, 36): sum_{i=1}^{N-1} ||w_i - w_avg||_2, batch mean.

    Indices as in e4e, from which the term comes: latents are w_0 .. w_{N-1} and the
    sum skips w_0. ``w_avg`` is (512,) or per latent (N, 512) (e4e's latent_avg).
    """
    distances = jnp.linalg.norm(w - w_avg, axis=-1)
    return jnp.mean(jnp.sum(distances[:, 1:], axis=-1))


# --------------------------------------------------------------------------------------
# Adversarial terms (logits of the StyleGAN2 discriminator)


def generator_nonsaturating_loss(fake_logits: Array) -> Array:
    """mean softplus(-D(fake))."""
    return jnp.mean(jax.nn.softplus(-fake_logits))


def discriminator_logistic_loss(real_logits: Array, fake_logits: Array) -> Array:
    """mean softplus(-D(real)) + mean softplus(D(fake))."""
    return jnp.mean(jax.nn.softplus(-real_logits)) + jnp.mean(jax.nn.softplus(fake_logits))


def r1_penalty(
    d_apply: Callable[[Array], Array], images: Array, gamma: float = 10.0
) -> tuple[Array, Array]:
    """(gamma / 2 * E_batch ||dD(x)/dx||^2, D(x)) for real images (B, H, W, C).

    As the reference: the gradient of sum D(x) with respect to the images, squared
    and summed per image, averaged over the batch, times gamma / 2, on every D step
    (no lazy-regularisation interval factor). ``d_apply`` closes over the
    discriminator's variables, so the penalty is differentiable with respect to
    them. The logits are returned for the logistic loss, as the reference reuses them.
    """
    logits, vjp = jax.vjp(d_apply, images)
    (grad,) = vjp(jnp.ones_like(logits))
    per_image = jnp.sum(jnp.square(grad).reshape(grad.shape[0], -1), axis=1)
    return gamma / 2 * jnp.mean(per_image), logits


# --------------------------------------------------------------------------------------
# Stage 1 pairing


def pair_attribute_images(
    images: Array, index_in_epoch: int | Array, cycle: int = 3
) -> tuple[Array, Array]:
    """(attribute images, same) for stage 1, as the reference pairs them.

    Every ``cycle``-th step of an epoch (index 0, 3, 6, ...) each image is its own
    attribute image; otherwise the attribute images are the batch rolled by one
    (image b is paired with image b-1, image 0 with the last).
    """
    same = jnp.asarray(index_in_epoch) % cycle == 0
    return jnp.where(same, images, jnp.roll(images, 1, axis=0)), same


# --------------------------------------------------------------------------------------
# Weighted sums

STAGE1_TERMS = ("id", "rec", "lpips", "reg", "parse", "contrastive", "adv")
STAGE2_TERMS = ("id", "rec", "lpips", "reg", "parse", "adv")


def reduce_outputs(values: Array, reduction: str) -> Array:
    """Sum or mean of one term's values (K,) over stage 2's outputs."""
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction {reduction!r}: expected 'sum' or 'mean'")
    return jnp.sum(values) if reduction == "sum" else jnp.mean(values)


@dataclasses.dataclass(frozen=True)
class LossForm:
    """What one loss set computes where the reference code and the paper differ.

    reconstruction: (images, images) -> scalar.
    regulariser: (latents (B, N, D), e4e's latent_avg (N, D)) -> scalar.
    stage2_identity: stage 2's identity term on the six embedding batches.
    output_reductions: how a term is combined over a step's outputs (stage 2's five
      images or codes; stage 1 has one).
    """

    reconstruction: Callable[[Array, Array], Array]
    regulariser: Callable[[Array, Array], Array]
    stage2_identity: Callable[..., Array]
    output_reductions: Mapping[str, str]

    def with_adversarial_reduction(self, reduction: str) -> "LossForm":
        """This form with the adversarial terms (G's and D's logistic) combined over the
        outputs by ``reduction`` ("sum" or "mean"); "" keeps the form's own."""
        if not reduction:
            return self
        if reduction not in ("sum", "mean"):
            raise ValueError(f"adversarial reduction {reduction!r}: expected 'sum', 'mean' or ''")
        return dataclasses.replace(
            self,
            output_reductions={**self.output_reductions, "adv": reduction, "d_logistic": reduction},
        )

    def reduce_terms(self, per_output: Mapping[str, Array]) -> dict[str, Array]:
        """Each term's values (K,) over the outputs reduced as this form prescribes."""
        unknown = sorted(set(per_output) - set(self.output_reductions))
        if unknown:
            raise KeyError(f"no output reduction for {unknown}")
        return {
            name: reduce_outputs(values, self.output_reductions[name])
            for name, values in per_output.items()
        }


FORMS = {
    "reference": LossForm(
        reconstruction=smooth_l1_loss,
        regulariser=lambda w, latent_avg: latent_square_mean(w),
        stage2_identity=stage2_identity_reference,
        output_reductions={
            "rec": "sum",
            "lpips": "sum",
            "parse": "sum",
            "reg": "mean",
            "adv": "mean",
            "d_logistic": "mean",
        },
    ),
    "paper": LossForm(
        reconstruction=l1_loss,
        regulariser=latent_distance_to_average,  # w_avg: e4e's latent_avg
        stage2_identity=stage2_identity_paper,
        output_reductions={
            "rec": "sum",
            "lpips": "sum",
            "parse": "sum",
            "reg": "mean",
            "adv": "sum",
            "d_logistic": "sum",
        },
    ),
}


def weighted_total(
    terms: Mapping[str, Array], weights: Mapping[str, float], allowed: Sequence[str]
) -> tuple[Array, dict[str, Array]]:
    """(total, weighted terms) of a generator-side loss.

    ``terms`` holds unweighted values named as in ``allowed`` (`STAGE1_TERMS` or
    `STAGE2_TERMS`); ``weights`` comes from the config's ``loss`` fields. A term with
    weight 0 may be left out; every computed term needs a weight.
    """
    unknown = sorted((set(terms) | set(weights)) - set(allowed))
    if unknown:
        raise KeyError(f"unknown loss terms {unknown}; expected some of {list(allowed)}")
    unweighted = sorted(set(terms) - set(weights))
    missing = sorted(name for name, weight in weights.items() if weight and name not in terms)
    if unweighted or missing:
        raise KeyError(
            f"terms without a weight {unweighted}, weighted terms not computed {missing}"
        )
    weighted = {name: weights[name] * value for name, value in terms.items()}
    return total(weighted.values()), weighted


def discriminator_loss(
    logistic_terms: Array, r1: Array, reduction: str = "mean"
) -> tuple[Array, dict[str, Array]]:
    """(total, terms) of a discriminator step: the logistic losses (K,) combined by ``reduction`` + R1.

    Stage 1 has one logistic term; stage 2 one per output, averaged in the
    reference and summed in the paper (`LossForm.output_reductions['d_logistic']`).
    ``r1`` is `r1_penalty`'s value (already times gamma / 2).
    """
    logistic = reduce_outputs(logistic_terms, reduction)
    return logistic + r1, {"d_logistic": logistic, "r1": r1}
