"""What every method's training shares, whatever its step: the remat policies, the
frozen critics behind the losses and the agreement measures the evaluations report.

A neutral home, so that a method (`dbaf_jax.train.ifadit`) uses these without
importing another method's step (`dbaf_jax.train.dbaf.adversarial`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from dbaf_jax.core import image_metrics
from dbaf_jax.train import losses

Metrics = dict[str, jax.Array]

# config.remat -> what the generator-side forward keeps for the backward pass.
REMAT_POLICIES = {
    "none": None,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "full": jax.checkpoint_policies.nothing_saveable,
}


class Critics(NamedTuple):
    """The frozen networks behind the losses, bound to their variables."""

    embed: Callable[[jax.Array], jax.Array]  # images (B, H, W, 3) -> (B, 512) ArcFace embeddings
    lpips: Callable[[jax.Array, jax.Array], jax.Array]  # image pairs -> (B,) distances
    parse: Callable[[jax.Array], jax.Array]  # images -> (B, H, W, 19) parser logits


def discriminate_each(d_apply: Callable[[jax.Array], jax.Array], batches: jax.Array) -> jax.Array:
    """D's logits (K, B, 1) for K image batches (K, B, H, W, 3), each batch seen on its own.

    The reference calls D once per output. D's minibatch-stddev layer shares a
    statistic among samples of one call, so one call on the concatenated batches would
    change every logit (and fail unless K * B divides by the stddev group); vmap keeps
    the calls separate and still runs one batched network.
    """
    return jax.vmap(d_apply)(batches)


def discriminate_real_and_fakes(
    d_apply: Callable[[jax.Array], jax.Array], real: jax.Array, fakes: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """D's logits for ``real`` (B, H, W, 3) and ``fakes`` (K, B, H, W, 3), (B, 1) and
    (K, B, 1), each batch a call of its own (`discriminate_each`) but all in one trace
    of D: the step's program holds one copy of D's forward and backward, not two."""
    logits = discriminate_each(d_apply, jnp.concatenate([real[None], fakes]))
    return logits[0], logits[1:]


def agreement(critics: Critics, originals: jax.Array, others: jax.Array, name: str) -> Metrics:
    """How close ``others`` are to ``originals`` (B, H, W, 3): batch means of PSNR (peak 2),
    LPIPS and ArcFace cosine similarity, named ``{name}_psnr``, ``_lpips``, ``_similarity``."""
    return {
        f"{name}_psnr": jnp.mean(image_metrics.psnr(originals, others)),
        f"{name}_lpips": jnp.mean(critics.lpips(originals, others)),
        f"{name}_similarity": jnp.mean(
            losses.cosine_similarity(critics.embed(originals), critics.embed(others))
        ),
    }
