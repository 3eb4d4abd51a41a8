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
(an effective eps of eps / sqrt(1 - b2^t)). So the RAdam part is written here; the
Lookahead part follows ``optax.lookahead``, whose synchronisation (after fast steps k,
2k, ...; slow weights initialised to the initial parameters) is Ranger's.

Train state: the parameters are ``optax.LookaheadParams(fast=..., slow=...)``
(``synced`` copies at the start); the model runs on and differentiates ``params.fast``
(the weights Ranger's module holds); ``ranger(...).step(grads_of_fast, opt_state,
params)`` returns the next pair and state. Checkpoints store both; exported networks
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

import functools
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


class RangerState(NamedTuple):
    """Ranger's state; the moments are kept per group of leaves (`ranger`)."""

    count: jax.Array  # steps taken, int32
    mu: tuple[jax.Array, ...]  # first moments, one array per group
    nu: tuple[jax.Array, ...]  # second moments


class Optimizer(NamedTuple):
    """An optimizer as the training steps call it.

    init(params) -> (``LookaheadParams``, state): the parameters as the step keeps them
      (``fast``: the tree the networks run on; ``slow``: one array per group) and the
      state at step 0;
    step(grads of fast, state, LookaheadParams) -> (LookaheadParams, state): the new
      parameters themselves, not optax's updates, whose addition would cost operations
      per leaf;
    leaves(grouped, like) -> a tree like ``like`` (the fast parameters) holding the
      leaves of a per-group tuple (``slow``, ``mu``, ``nu``): for inspecting them.
    """

    init: Callable[[Any], tuple[optax.LookaheadParams, RangerState]]
    step: Callable[
        [Any, RangerState, optax.LookaheadParams], tuple[optax.LookaheadParams, RangerState]
    ]
    leaves: Callable[[tuple[jax.Array, ...], Any], Any]


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


class _Group(NamedTuple):
    """Leaves of one shape, dtype and centralisation: kept and updated as one array."""

    indices: tuple[int, ...]  # positions in the flattened parameter tree
    shape: tuple[int, ...]  # each leaf's
    axes: tuple[int, ...] | None  # centralised over these axes of each leaf


def _groups(params, axes: CentralizationAxes) -> tuple[_Group, ...]:
    """The leaves of ``params`` grouped by (shape, dtype, centralisation axes), in tree order."""
    members: dict[tuple, list[int]] = {}
    for index, (path, leaf) in enumerate(jax.tree_util.tree_leaves_with_path(params)):
        shape = tuple(leaf.shape)
        reduce = axes(tuple(_key_name(entry) for entry in path), shape)
        members.setdefault((shape, jnp.dtype(leaf.dtype), reduce), []).append(index)
    return tuple(
        _Group(tuple(indices), shape, reduce) for (shape, _, reduce), indices in members.items()
    )


def _joined(leaves: list[jax.Array], group: _Group) -> jax.Array:
    """The group's leaves (shape S) as one array (N * S[0], *S[1:]) (scalars: (N,)):
    joined along the first axis, so that no leaf needs a reshape."""
    rows = [leaves[i] if group.shape else leaves[i].reshape(1) for i in group.indices]
    return rows[0] if len(rows) == 1 else jnp.concatenate(rows)


def _split(joined: jax.Array, group: _Group) -> list[jax.Array]:
    """`_joined` undone: one array per leaf, a slice of ``joined`` each."""
    if len(group.indices) == 1:
        return [joined.reshape(group.shape)]
    rows = group.shape[0] if group.shape else 1
    parts = [
        jax.lax.slice_in_dim(joined, i * rows, (i + 1) * rows) for i in range(len(group.indices))
    ]
    return parts if group.shape else [part.reshape(()) for part in parts]


def _centralized(g: jax.Array, group: _Group) -> jax.Array:
    """Each leaf's gradient less its mean over the group's axes (of the leaf)."""
    if not group.axes:
        return g
    per_leaf = g.reshape(len(group.indices), *group.shape)
    reduce = tuple(axis + 1 for axis in group.axes)
    return (per_leaf - jnp.mean(per_leaf, axis=reduce, keepdims=True)).reshape(g.shape)


class RangerSettings(NamedTuple):
    """`ranger`'s arguments (its docstring and the module's)."""

    learning_rate: float
    alpha: float
    k: int
    n_sma_threshold: float
    b1: float
    b2: float
    eps: float
    weight_decay: float
    centralization_axes: CentralizationAxes


class _StepScalars(NamedTuple):
    """One step's scalars, the same for every group: RAdam's step size and whether it
    rectifies; the Lookahead shares (zero but on every k-th step)."""

    step_size: jax.Array
    rectified: jax.Array
    slow_share: jax.Array  # of the way from the slow weights to the fast ones
    fast_share: jax.Array  # of the way from the fast weights to the new slow ones


def _step_scalars(count: jax.Array, settings: RangerSettings) -> _StepScalars:
    b1, b2 = settings.b1, settings.b2
    n_sma_max = 2.0 / (1.0 - b2) - 1.0
    t = count.astype(jnp.float32)
    # 1 - b^t as -expm1(t ln b): exact where the subtraction would cancel.
    one_minus_b1t = -jnp.expm1(t * jnp.float32(math.log(b1)))
    one_minus_b2t = -jnp.expm1(t * jnp.float32(math.log(b2)))
    n_sma = _rectification_length(t, b2)
    rectified = n_sma > settings.n_sma_threshold
    ratio = jnp.maximum(
        (n_sma - 4) / (n_sma_max - 4) * (n_sma - 2) / n_sma * n_sma_max / (n_sma_max - 2), 0.0
    )
    step_size = jnp.where(rectified, jnp.sqrt(one_minus_b2t * ratio), 1.0) / one_minus_b1t
    # Lookahead as optax writes it: after every k-th fast step the slow weights move
    # alpha of the way to the fast ones, and the fast weights to them.
    sync = count % settings.k == 0
    return _StepScalars(step_size, rectified, settings.alpha * sync, sync * (1 - settings.alpha))


def _group_update(
    settings: RangerSettings, step: _StepScalars, constants: dict, g, m, v, fast, slow
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """One group's (fast, slow, m, v) after the step, from its centralised gradient
    ``g``. ``constants``: dtype -> the update's constants, written once into the
    program rather than once per group (filled here on a dtype's first group)."""
    if m.dtype not in constants:
        constants[m.dtype] = [
            jnp.asarray(x, m.dtype)
            for x in (
                settings.b1,
                1 - settings.b1,
                settings.b2,
                1 - settings.b2,
                settings.eps,
                -settings.learning_rate,
                settings.weight_decay,
            )
        ]
    c_b1, c_1_b1, c_b2, c_1_b2, c_eps, c_lr, c_wd = constants[m.dtype]
    m = c_b1 * m + c_1_b1 * g
    v = c_b2 * v + c_1_b2 * g * g
    scaled = step.step_size * m
    direction = jnp.where(step.rectified, scaled / (jnp.sqrt(v) + c_eps), scaled)
    if settings.weight_decay:
        direction = direction + c_wd * fast
    u = c_lr * direction
    difference = fast + u - slow
    return fast + (u - step.fast_share * difference), slow + step.slow_share * difference, m, v


def _ranger_init(settings: RangerSettings, params) -> tuple[optax.LookaheadParams, RangerState]:
    groups = _groups(params, settings.centralization_axes)
    leaves = jax.tree.leaves(params)
    slow = tuple(
        jnp.copy(_joined(leaves, group)) for group in groups
    )  # own buffers: the state is donated
    zeros = lambda: tuple(jnp.zeros_like(x) for x in slow)  # noqa: E731
    return optax.LookaheadParams(fast=params, slow=slow), RangerState(
        jnp.zeros([], jnp.int32), zeros(), zeros()
    )


def _ranger_leaves(settings: RangerSettings, grouped, like):
    out = [None] * len(jax.tree.leaves(like))
    for group, joined in zip(_groups(like, settings.centralization_axes), grouped, strict=True):
        for index, leaf in zip(group.indices, _split(joined, group)):
            out[index] = leaf
    return jax.tree.unflatten(jax.tree.structure(like), out)


def _ranger_step(
    settings: RangerSettings, grads, state: RangerState, params: optax.LookaheadParams
) -> tuple[optax.LookaheadParams, RangerState]:
    count = optax.safe_increment(state.count)
    step = _step_scalars(count, settings)
    constants: dict = {}
    groups = _groups(grads, settings.centralization_axes)
    grad_leaves, fast_leaves = jax.tree.leaves(grads), jax.tree.leaves(params.fast)
    new_fast, slow, mu, nu = [None] * len(fast_leaves), [], [], []
    for group, m, v, s in zip(groups, state.mu, state.nu, params.slow, strict=True):
        g = _centralized(_joined(grad_leaves, group), group)
        fast, s, m, v = _group_update(
            settings, step, constants, g, m, v, _joined(fast_leaves, group), s
        )
        for index, leaf in zip(group.indices, _split(fast, group)):
            new_fast[index] = leaf
        slow.append(s)
        mu.append(m)
        nu.append(v)
    fast_tree = jax.tree.unflatten(jax.tree.structure(params.fast), new_fast)
    return optax.LookaheadParams(fast=fast_tree, slow=tuple(slow)), RangerState(
        count, tuple(mu), tuple(nu)
    )


def ranger(
    learning_rate: float = 1e-4,
    alpha: float = 0.5,
    k: int = 6,
    n_sma_threshold: float = 5.0,
    b1: float = 0.95,
    b2: float = 0.999,
    eps: float = 1e-5,
    weight_decay: float = 0.0,
    centralization_axes: CentralizationAxes = output_last_axes,
) -> Optimizer:
    """Ranger with the reference's defaults (see the module docstring).

    Leaves of one shape, dtype and centralisation form a group (DBAF's stage 2: 424
    parameter arrays in 57 groups), and everything the optimizer keeps (slow weights,
    moments) is one array per group, the group's leaves joined along their first axis.
    The update then runs once per group, and only the new fast weights, which the
    networks take leaf by leaf, are split back: about one operation per leaf in the
    step's program instead of about 47 (optax's per-leaf chain), and no leaf of the
    state written apart (splitting every state array back to leaves costs a kernel per
    leaf and array, which made XLA's CPU compile of the update ten times longer).
    Each element follows the same expressions as optax's ``lookahead`` over a chain of
    centralisation, this RAdam, weight decay and the learning rate.
    """
    if callable(learning_rate):
        raise TypeError("ranger: learning_rate must be a number (schedules are not implemented)")
    settings = RangerSettings(
        learning_rate, alpha, k, n_sma_threshold, b1, b2, eps, weight_decay, centralization_axes
    )
    return Optimizer(
        functools.partial(_ranger_init, settings),
        functools.partial(_ranger_step, settings),
        functools.partial(_ranger_leaves, settings),
    )
