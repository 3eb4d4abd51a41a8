"""An optional latent-space warm-up of KRIA before stage 2's first step (not in either
paper; off unless ``config.kria_warmup.steps`` > 0, which only the quick start sets).

Stage 2 teaches KRIA to be key-reversible only through images: the recovered image
``G(A + KRIA(KRIA(I, k), k))`` is pulled towards the original. With a pretrained
generator that signal is strong. With a generator trained from scratch for a few dozen
steps (the quick start) it is too weak for KRIA, whose lr_mul 0.01 layers learn
slowly, to become reversible in minutes, and a right password recovers no better than
a wrong one. The warm-up first gives KRIA the latent-space counterpart of stage 2's
objective on the identity codes I (N, n_latent, style_dim) of the training images:

- recovery: ``KRIA(KRIA(I, k), k)`` close to I (mean square);
- anonymization and a wrong key: ``KRIA(I, k)`` and ``KRIA(KRIA(I, k), k')`` at least
  the codes' mean square away from I (hinges, as the clamped identity terms push);

all divided by the codes' mean square, with fresh keys every step and Gaussian noise
on the codes (``noise`` times their RMS), so that the codes of faces it never saw are
covered. Optimiser: LAMB (a per-layer trust ratio), because KRIA's lr_mul 0.01 layers
store weights about 100x larger than its last plain Linear, which no single Adam step
size suits.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import optax

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.models.dbaf.kria import KRIA


class Settings(NamedTuple):
    steps: int  # 0: no warm-up
    learning_rate: float  # LAMB's, decayed to 0 by a cosine over the steps
    noise: float  # Gaussian noise on the codes, relative to their RMS
    images: int  # at most this many training images give the codes

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> "Settings":
        w = config.kria_warmup
        settings = cls(int(w.steps), float(w.learning_rate), float(w.noise), int(w.images))
        if (
            settings.steps < 0
            or settings.images < 1
            or settings.learning_rate <= 0
            or settings.noise < 0
        ):
            raise ConfigError(
                f"kria_warmup {dict(w)}: steps >= 0, images >= 1, learning_rate > 0 and noise >= 0"
            )
        if settings.steps and "kria" not in config.trainable:
            raise ConfigError(
                "kria_warmup.steps > 0 warms up KRIA, which config.trainable does not train"
            )
        return settings


def loss(kria: KRIA, params, codes: jax.Array, keys: jax.Array) -> jax.Array:
    """The warm-up objective for ``codes`` (N, L, D) and ``keys`` (2, N, L, D): the right
    key first, then a wrong one."""
    scale = jnp.mean(codes**2)

    def mean_square(a, b):
        return jnp.mean((a - b) ** 2, axis=(1, 2))

    anonymized = kria.apply({"params": params}, codes, keys[0])
    recovered = kria.apply({"params": params}, anonymized, keys[0])
    wrong = kria.apply({"params": params}, anonymized, keys[1])
    push_away = jax.nn.relu(scale - mean_square(anonymized, codes)) + jax.nn.relu(
        scale - mean_square(wrong, codes)
    )
    return jnp.mean(mean_square(recovered, codes) + push_away) / scale


def fit(
    kria: KRIA,
    params,
    codes: jax.Array,
    sample_keys: Callable[[jax.Array, int], jax.Array],
    settings: Settings,
    rng: jax.Array,
):
    """KRIA's ``params`` after ``settings.steps`` LAMB steps on ``codes`` (N, L, D);
    ``sample_keys(rng, n)`` gives keys (2, n, L, D) as training draws them."""
    tx = optax.lamb(
        optax.cosine_decay_schedule(settings.learning_rate, settings.steps), weight_decay=0.0
    )
    rms = jnp.sqrt(jnp.mean(codes**2))

    def step(i, carry):
        params, opt_state = carry
        key_rng, noise_rng = jax.random.split(jax.random.fold_in(rng, i))
        noisy = codes + settings.noise * rms * jax.random.normal(noise_rng, codes.shape)
        grads = jax.grad(lambda p: loss(kria, p, noisy, sample_keys(key_rng, codes.shape[0])))(
            params
        )
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return jax.lax.fori_loop(0, settings.steps, step, (params, tx.init(params)))[0]
