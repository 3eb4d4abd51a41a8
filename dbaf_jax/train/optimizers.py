"""Ranger (RAdam + Lookahead + gradient centralisation) as DBAF's reference trains with it.

The reference builds ``Ranger(params, lr=1e-4)`` (models/ranger.py, version 20.4.11)
for both the generator side and the discriminator, so every other setting is that
file's default: betas (0.95, 0.999), eps 1e-5, weight decay 0, Lookahead k=6 and
alpha=0.5, RAdam's rectification threshold N_sma > 5, and gradient centralisation
of every parameter with more than one dimension (its ``use_gc`` flag is stored but
never read, so centralisation is always on). Per parameter and step t:

    g   <- g - mean(g over torch dims 1..)          if g.ndim > 1
    m   <- b1 m + (1 - b1) g ;  v <- b2 v + (1 - b2) g^2
    N_max = 2 / (1 - b2) - 1 ;  N_t = N_max - 2 t b2^t / (1 - b2^t)
    N_t > 5:  p <- p - lr sqrt((1-b2^t) (N_t-4)/(N_max-4) (N_t-2)/N_t N_max/(N_max-2)) / (1-b1^t) * m / (sqrt(v) + eps)
    else:     p <- p - lr / (1 - b1^t) * m
    (weight decay, when non-zero, first: p <- p - lr wd p)
    every k steps: slow <- slow + alpha (p - slow); p <- slow   (slow starts at the initial p)

This differs from ``optax.radam``: optax rectifies when N_t >= threshold (not >),
and adds eps to the bias-corrected sqrt(v_hat) where Ranger adds it to sqrt(v)
(an effective eps of eps / sqrt(1 - b2^t)). So the RAdam part is written here
(`scale_by_ranger_radam`); the Lookahead part is ``optax.lookahead``, whose
synchronisation (after fast steps k, 2k, ...; slow weights initialised to the
initial parameters) is Ranger's.

Train state: ``optax.lookahead`` takes its parameters as
``optax.LookaheadParams(fast=..., slow=...)``. The train state holds that pair as
its params (``optax.LookaheadParams.init_synced(params)`` at the start); the model
runs on and differentiates ``params.fast`` (the weights Ranger's module holds); the
update is ``tx.update(grads_of_fast, opt_state, params)`` followed by
``optax.apply_updates(params, updates)``. Checkpoints store both; exported networks
use ``fast``.

Gradient centralisation follows the PyTorch layout: Ranger averages over every
torch dim but the first. For Flax kernels laid out with the output features last
((in, out) Dense, (kh, kw, in, out) Conv) that is every axis but the last
(`output_last_axes`, the default). Parameters whose torch tensor has a leading
dim of size 1 are centralised over ALL their values: rosinality's modulated-conv
weights (1, out, in, k, k), the constant input (1, C, 4, 4) and ToRGB biases
(1, 3, 1, 1) (which Flax stores as (3,)); CID's positional embedding, torch
(14, 1, 512) and Flax (14, 512), is centralised per latent, over its last axis.
`reference_centralization` derives these from a parameter tree of this project's
networks; pass it as ``centralization_axes`` to reproduce the reference exactly.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import traverse_util

CentralizationAxes = Callable[[tuple[str, ...], tuple[int, ...]], "tuple[int, ...] | None"]


def output_last_axes(path: tuple[str, ...], shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Centralise over every axis but the last (output features), for arrays with ndim > 1."""
    del path
    return tuple(range(len(shape) - 1)) if len(shape) > 1 else None


def reference_centralization(params: Any) -> CentralizationAxes:
    """The centralisation axes that reproduce Ranger on the reference's torch tensors.

    ``params`` is a (nested dict) parameter tree of this project's networks, e.g.
    ``{'decoder': ..., 'cid': ..., 'maar': ..., 'kria': ...}``. Found by structure:
    a ModulatedConv2d kernel is the ``kernel`` beside a ``modulation`` sub-module;
    a ToRGB bias is the ``bias`` of a module holding a modulated ``conv`` and no
    ``noise_weight`` (a StyledConv's bias is torch's 1-d ``activate.bias``). Those
    and ``constant_input`` are centralised over all their values, ``pos_embedding``
    over its last axis, everything else by `output_last_axes`.
    """
    flat = traverse_util.flatten_dict(params)
    all_values = {path for path in flat if path[-1] == "constant_input"}
    for path in flat:
        if path[-2:] == ("modulation", "kernel"):
            conv = path[:-2]
            all_values.add(conv + ("kernel",))
            owner = conv[:-1]
            if owner + ("bias",) in flat and owner + ("noise_weight",) not in flat:
                all_values.add(owner + ("bias",))
    per_latent = {path for path in flat if path[-1] == "pos_embedding"}

    def axes(path: tuple[str, ...], shape: tuple[int, ...]) -> tuple[int, ...] | None:
        if path in all_values:
            return tuple(range(len(shape)))
        if path in per_latent:
            return (len(shape) - 1,)
        return output_last_axes(path, shape)

    return axes


def _key_name(entry: Any) -> str:
    for attribute in ("key", "name", "idx"):
        if hasattr(entry, attribute):
            return str(getattr(entry, attribute))
    return str(entry)


def centralize_gradients(axes: CentralizationAxes = output_last_axes) -> optax.GradientTransformation:
    """Subtracts from each gradient its mean over ``axes(path, shape)`` (None: unchanged)."""

    def update_fn(updates, state, params=None):
        del params

        def centralize(path, g):
            reduce = axes(tuple(_key_name(entry) for entry in path), tuple(g.shape))
            return g - jnp.mean(g, axis=reduce, keepdims=True) if reduce else g

        return jax.tree_util.tree_map_with_path(centralize, updates), state

    return optax.GradientTransformation(optax.init_empty_state, update_fn)


class RangerRAdamState(NamedTuple):
    count: jax.Array  # steps taken, int32
    mu: Any  # first moment
    nu: Any  # second moment


def _rectification_length(t: jax.Array, b2: float) -> jax.Array:
    """N_t = N_max - 2 t b2^t / (1 - b2^t), accurate in float32.

    Computed directly, N_t loses about 3 digits to cancellation in the first hundred
    steps (errors up to 0.7% at t=2 in float32). With L = -ln b2 and x = t L,
    2 t b2^t / (1 - b2^t) = (2 / L) x / (e^x - 1), so
    N_t = (2/(1-b2) - 1 - 2/L) + (2/L) (1 - x/(e^x - 1)): the constant is exact in
    float64, and 1 - x/(e^x - 1) = x/2 - x^2/12 + x^4/720 - x^6/30240 + x^8/1209600
    for x < 0.5 (the next term is below 1e-10), 1 - x/(e^x - 1) otherwise.
    """
    log_b2 = -math.log(b2)
    constant = 2.0 / (1.0 - b2) - 1.0 - 2.0 / log_b2
    x = t * jnp.float32(log_b2)
    x2 = x * x
    series = x / 2 - x2 / 12 + x2 * x2 / 720 - x2 * x2 * x2 / 30240 + x2 * x2 * x2 * x2 / 1209600
    x_large = jnp.maximum(x, 0.5)
    direct = 1 - x_large / jnp.expm1(x_large)  # e^x = inf for large x gives 1, as it should
    return jnp.float32(constant) + jnp.float32(2.0 / log_b2) * jnp.where(x < 0.5, series, direct)


def scale_by_ranger_radam(
    b1: float = 0.95, b2: float = 0.999, eps: float = 1e-5, n_sma_threshold: float = 5.0
) -> optax.GradientTransformation:
    """Ranger's RAdam direction (before the learning rate): see the module docstring."""
    n_sma_max = 2.0 / (1.0 - b2) - 1.0

    def init_fn(params):
        zeros = lambda p: jnp.zeros_like(p)  # noqa: E731
        return RangerRAdamState(jnp.zeros([], jnp.int32), jax.tree.map(zeros, params), jax.tree.map(zeros, params))

    def update_fn(updates, state, params=None):
        del params
        count = optax.safe_increment(state.count)
        t = count.astype(jnp.float32)
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state.nu, updates)
        # 1 - b^t as -expm1(t ln b): exact where the subtraction would cancel.
        one_minus_b1t = -jnp.expm1(t * jnp.float32(math.log(b1)))
        one_minus_b2t = -jnp.expm1(t * jnp.float32(math.log(b2)))
        n_sma = _rectification_length(t, b2)
        rectified = n_sma > n_sma_threshold
        ratio = jnp.maximum((n_sma - 4) / (n_sma_max - 4) * (n_sma - 2) / n_sma * n_sma_max / (n_sma_max - 2), 0.0)
        step_size = jnp.where(rectified, jnp.sqrt(one_minus_b2t * ratio), 1.0) / one_minus_b1t
        direction = jax.tree.map(
            lambda m, v: jnp.where(rectified, step_size * m / (jnp.sqrt(v) + eps), step_size * m), mu, nu
        )
        return direction, RangerRAdamState(count, mu, nu)

    return optax.GradientTransformation(init_fn, update_fn)


def ranger(
    learning_rate: optax.ScalarOrSchedule = 1e-4,
    alpha: float = 0.5,
    k: int = 6,
    n_sma_threshold: float = 5.0,
    b1: float = 0.95,
    b2: float = 0.999,
    eps: float = 1e-5,
    weight_decay: float = 0.0,
    centralization_axes: CentralizationAxes = output_last_axes,
) -> optax.GradientTransformation:
    """Ranger with the reference's defaults; parameters are ``optax.LookaheadParams``."""
    fast = optax.chain(
        centralize_gradients(centralization_axes),
        scale_by_ranger_radam(b1, b2, eps, n_sma_threshold),
        optax.add_decayed_weights(weight_decay) if weight_decay else optax.identity(),
        optax.scale_by_learning_rate(learning_rate),
    )
    return optax.lookahead(fast, sync_period=k, slow_step_size=alpha)
