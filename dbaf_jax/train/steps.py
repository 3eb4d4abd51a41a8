"""The two stages' train steps: pure functions (state, frozen, batch) -> (state, metrics).

Each step is one discriminator update followed by one update of the generator side,
as the reference trains. The reference runs the generator-side forward pass twice
per step (once for D, once for G); here it runs once: ``jax.vjp`` keeps its
linearisation, the discriminator updates on its (constant) outputs, and the
generator-side loss, computed with the updated discriminator as in the reference,
is pulled back through the same linearisation. e4e is frozen and deterministic, so
stage 1 encodes each image once and rolls the encoding for the attribute images.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import optax

from dbaf_jax import losses
from dbaf_jax.models.dbaf import Variables
from dbaf_jax.train.networks import Networks
from dbaf_jax.train.state import DISCRIMINATOR, Optimizers, TrainState

Metrics = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class StepSettings:
    """The static (hashable) part of a config that a step reads."""

    stage: int
    form: str  # loss set: "reference" or "paper"
    weights: tuple[tuple[str, float], ...]
    id_margin: float
    same_threshold: float = 0.0
    different_threshold: float = 0.5
    pair_self_every: int = 3
    r1_gamma: float = 10.0
    r1_every: int = 1
    train_discriminator: bool = True
    recovery: str = "latent"  # stage 2: "latent" (reference) or "image" (paper)

    @classmethod
    def from_config(cls, config) -> "StepSettings":
        stage_terms = losses.STAGE1_TERMS if config.stage == 1 else losses.STAGE2_TERMS
        weights = tuple((name, float(config.loss[name])) for name in stage_terms if config.loss.get(name))
        return cls(
            stage=config.stage,
            form=config.loss.form,
            weights=weights,
            id_margin=config.loss.id_margin,
            same_threshold=config.loss.get("same_threshold", 0.0),
            different_threshold=config.loss.get("different_threshold", 0.5),
            pair_self_every=config.get("pair_self_every", 3),
            r1_gamma=config.r1_gamma,
            r1_every=config.r1_every,
            train_discriminator=DISCRIMINATOR in config.trainable,
            recovery=config.get("recovery", "latent"),
        )


class Critics(NamedTuple):
    """The frozen networks behind the losses, bound to their variables."""

    embed: Callable[[jax.Array], jax.Array]  # images -> (B, 512) ArcFace embeddings
    lpips: Callable[[jax.Array, jax.Array], jax.Array]  # image pairs -> (B,) distances
    parse: Callable[[jax.Array], jax.Array]  # images -> (B, H, W, 19) parser logits


def critics(networks: Networks, frozen: Variables) -> Critics:
    return Critics(
        embed=lambda x: networks.arcface.apply(frozen["arcface"], x),
        lpips=lambda a, b: networks.lpips.apply(frozen["lpips"], a, b),
        parse=lambda x: networks.parser.apply(frozen["parser"], x),
    )


def _reconstruction(settings: StepSettings) -> Callable[[jax.Array, jax.Array], jax.Array]:
    return losses.smooth_l1_loss if settings.form == "reference" else losses.l1_loss


def _regulariser(settings: StepSettings, frozen: Variables) -> Callable[[jax.Array], jax.Array]:
    if settings.form == "reference":
        return losses.latent_square_mean
    latent_avg = frozen["e4e"]["buffers"]["latent_avg"]  # the paper's w_avg
    return lambda w: losses.latent_distance_to_average(w, latent_avg)


def discriminate_each(d_apply: Callable[[jax.Array], jax.Array], batches: Sequence[jax.Array]) -> jax.Array:
    """D's logits (n, B, 1) for n image batches (B, H, W, 3), each batch seen on its own.

    The reference calls D once per output. D's minibatch-stddev layer shares a
    statistic among samples of one call, so one call on the concatenated batches would
    change every logit (and fail unless n * B divides by the stddev group); vmap keeps
    the calls separate and still runs one batched network.
    """
    return jax.vmap(d_apply)(jnp.stack(batches))


def _discriminator_update(
    networks: Networks,
    settings: StepSettings,
    tx: optax.GradientTransformation,
    state: TrainState,
    real: jax.Array,
    fakes: list[jax.Array],
    reduction: str,
) -> tuple[TrainState, Metrics]:
    """One Ranger step of D on real images and constant fakes; R1 every ``r1_every`` steps."""
    fakes = [jax.lax.stop_gradient(f) for f in fakes]

    def loss_fn(d_params):
        d_apply = lambda x: networks.discriminator.apply({"params": d_params}, x)  # noqa: E731
        r1, real_logits = jax.lax.cond(
            state.step % settings.r1_every == 0,
            lambda: losses.r1_penalty(d_apply, real, settings.r1_gamma),
            lambda: (jnp.zeros(()), d_apply(real)),
        )
        logistic = [losses.discriminator_logistic_loss(real_logits, f) for f in discriminate_each(d_apply, fakes)]
        return losses.discriminator_loss(logistic, r1, reduction)

    (total, terms), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.discriminator_params.fast)
    metrics = {"d_total": total, **terms}
    if not settings.train_discriminator:
        return state, metrics
    updates, opt_state = tx.update(grads, state.discriminator_opt_state, state.discriminator_params)
    params = optax.apply_updates(state.discriminator_params, updates)
    return state.replace(discriminator_params=params, discriminator_opt_state=opt_state), metrics


def _adversarial_step(
    networks: Networks,
    settings: StepSettings,
    txs: Optimizers,
    state: TrainState,
    forward: Callable,
    real: jax.Array,
    fakes_of: Callable,
    reduction: str,
    loss_of_outputs: Callable,
    next_rng: jax.Array,
) -> tuple[TrainState, Metrics]:
    """D step, then G step, from ONE generator-side forward pass.

    ``forward(fast params) -> (outputs, model-state updates)``; ``fakes_of(outputs)``
    lists the images D sees as fake; ``loss_of_outputs(outputs, d_params) -> (total,
    terms)`` is the generator-side loss, computed with the updated D.
    """
    outputs, pullback, model_updates = jax.vjp(forward, state.generator_params.fast, has_aux=True)
    state, d_metrics = _discriminator_update(
        networks, settings, txs.discriminator, state, real, fakes_of(outputs), reduction
    )
    (total, terms), output_grads = jax.value_and_grad(loss_of_outputs, has_aux=True)(
        outputs, state.discriminator_params.fast
    )
    (grads,) = pullback(output_grads)
    updates, opt_state = txs.generator.update(grads, state.generator_opt_state, state.generator_params)
    model_state = {
        name: {**collections, **model_updates.get(name, {})} for name, collections in state.model_state.items()
    }
    state = state.replace(
        step=state.step + 1,
        rng=jax.random.key_data(next_rng),
        generator_params=optax.apply_updates(state.generator_params, updates),
        generator_opt_state=opt_state,
        model_state=model_state,
    )
    return state, {**d_metrics, "g_total": total, **terms}


def _trained_variables(state: TrainState, frozen: Variables, fast_params) -> Variables:
    variables = state.variables(frozen)
    for name, params in fast_params.items():
        variables[name] = {**variables[name], "params": params}
    return variables


def stage1_step(
    networks: Networks,
    settings: StepSettings,
    txs: Optimizers,
    state: TrainState,
    frozen: Variables,
    images: jax.Array,
    index_in_epoch: jax.Array,
) -> tuple[TrainState, Metrics]:
    """Stage 1 (disentanglement) on ``images`` (B, H, W, 3).

    Attribute images pair as in the reference (`losses.pair_attribute_images`): every
    ``pair_self_every``-th step of an epoch each image with itself, otherwise with
    its neighbour in the batch.
    """
    model = networks.model
    rng, cid_rng = jax.random.split(jax.random.wrap_key_data(state.rng))
    id_rng, attr_rng = jax.random.split(cid_rng)

    def partners(x):
        return losses.pair_attribute_images(x, index_in_epoch, settings.pair_self_every)[0]

    same = index_in_epoch % settings.pair_self_every == 0
    encoded = model.e4e.apply(frozen["e4e"], images)
    attr_encoded = jax.tree.map(partners, encoded)
    attr_images = partners(images)

    def forward(fast_params):
        variables = _trained_variables(state, frozen, fast_params)
        identity, _ = model.disentangle(variables, encoded, train=True, rng=id_rng)
        attributes, maar_stats = model.disentangle(variables, attr_encoded, train=True, rng=attr_rng)
        mixed, latents = model.mix(variables, identity, attributes)
        return (mixed, latents), ({"maar": maar_stats} if maar_stats else {})

    crit = critics(networks, frozen)
    id_embedding = crit.embed(images)
    attr_embedding = partners(id_embedding)
    attr_logits = crit.parse(attr_images)
    reconstruction = _reconstruction(settings)
    regulariser = _regulariser(settings, frozen)
    weights = dict(settings.weights)

    def loss_of_outputs(outputs, d_params):
        mixed, latents = outputs
        mixed_embedding = crit.embed(mixed)
        distances = losses.contrastive_distance(attr_embedding, mixed_embedding, settings.id_margin)
        terms = {
            "id": losses.identity_loss(id_embedding, mixed_embedding, settings.id_margin),
            "contrastive": losses.contrastive_loss(
                distances, same, settings.same_threshold, settings.different_threshold
            ),
            "rec": reconstruction(attr_images, mixed),
            "lpips": losses.lpips_batch_mean(crit.lpips(attr_images, mixed)),
            "parse": losses.parse_loss(attr_logits, crit.parse(mixed)),
            "reg": regulariser(latents),
            "adv": losses.generator_nonsaturating_loss(networks.discriminator.apply({"params": d_params}, mixed)),
        }
        return losses.stage1_generator_loss({k: v for k, v in terms.items() if k in weights}, weights)

    fakes_of = lambda outputs: [outputs[0]]  # noqa: E731
    return _adversarial_step(
        networks, settings, txs, state, forward, attr_images, fakes_of, "mean", loss_of_outputs, rng
    )


def sample_keys(networks: Networks, frozen: Variables, rng: jax.Array, batch: int) -> jax.Array:
    """Random training keys (B, n_latent, style_dim): z ~ N(0, I) per group through the frozen mapping."""
    model = networks.model
    z = jax.random.normal(rng, (batch, len(model.kria.groups), model.key_generator.style_dim))
    return model.key_from_z(frozen, z)


class Stage2Outputs(NamedTuple):
    """Stage 2's five images (each (B, H, W, 3)) and their latents, in the reference's order."""

    images: tuple[jax.Array, ...]  # anonymized 1, anonymized 2, recovered, wrong key 1, wrong key 2
    latents: tuple[jax.Array, ...]


def stage2_forward(
    networks: Networks, settings: StepSettings, variables: Variables, images: jax.Array, key_set: jax.Array, rng, train: bool
) -> tuple[Stage2Outputs, Variables]:
    """The five outputs of stage 2 for ``images`` and keys (4, B, L, D): p1, p2, wrong 1, wrong 2."""
    model = networks.model
    enc_rng, rec_rng = jax.random.split(rng)
    encoding, maar_stats = model.encode(variables, images, train=train, rng=enc_rng)
    p1, p2, wrong1, wrong2 = key_set
    anonymized_identity = [model.transform_identity(variables, encoding.identity_code, k) for k in (p1, p2)]
    anonymized_latents = [encoding.attribute_code + a for a in anonymized_identity]
    if settings.recovery == "latent":
        # Recovery reuses the original A and maps: all five outputs in one generator call.
        recovered_latents = [
            encoding.attribute_code + model.transform_identity(variables, anonymized_identity[0], k)
            for k in (p1, wrong1, wrong2)
        ]
        decoded = _synthesize_many(model, variables, anonymized_latents + recovered_latents, encoding.attribute_maps)
        anonymized, recovered = decoded[:2], decoded[2:]
    else:
        anonymized = _synthesize_many(model, variables, anonymized_latents, encoding.attribute_maps)
        source, _ = model.encode(variables, anonymized[0], train=train, rng=rec_rng)
        recovered_latents = [
            source.attribute_code + model.transform_identity(variables, source.identity_code, k)
            for k in (p1, wrong1, wrong2)
        ]
        recovered = _synthesize_many(model, variables, recovered_latents, source.attribute_maps)
    outputs = Stage2Outputs(tuple(anonymized) + tuple(recovered), tuple(anonymized_latents + recovered_latents))
    return outputs, ({"maar": maar_stats} if maar_stats else {})


def _synthesize_many(model, variables, latents: list[jax.Array], maps: tuple[jax.Array, ...]) -> list[jax.Array]:
    """Decodes several latent batches sharing the same maps in one generator call."""
    n = len(latents)
    tiled_maps = tuple(jnp.concatenate([m] * n) for m in maps)
    images = model.synthesize(variables, jnp.concatenate(latents), tiled_maps)
    return list(jnp.split(images, n))


def stage2_step(
    networks: Networks,
    settings: StepSettings,
    txs: Optimizers,
    state: TrainState,
    frozen: Variables,
    images: jax.Array,
) -> tuple[TrainState, Metrics]:
    """Stage 2 (anonymization) on ``images`` (B, H, W, 3), with fresh random keys."""
    rng, key_rng, fwd_rng = jax.random.split(jax.random.wrap_key_data(state.rng), 3)
    key_set = jnp.stack(
        [sample_keys(networks, frozen, k, images.shape[0]) for k in jax.random.split(key_rng, 4)]
    )

    def forward(fast_params):
        variables = _trained_variables(state, frozen, fast_params)
        outputs, stats = stage2_forward(networks, settings, variables, images, key_set, fwd_rng, train=True)
        return outputs, stats

    reduction = losses.STAGE2_OUTPUT_REDUCTIONS[settings.form]["d_logistic"]
    crit = critics(networks, frozen)
    original_embedding = crit.embed(images)
    original_logits = crit.parse(images)
    reconstruction = _reconstruction(settings)
    regulariser = _regulariser(settings, frozen)
    identity_terms = losses.stage2_identity_reference if settings.form == "reference" else losses.stage2_identity_paper
    weights = dict(settings.weights)

    def loss_of_outputs(outputs: Stage2Outputs, d_params):
        n = len(outputs.images)
        stacked = jnp.concatenate(outputs.images)
        embeddings = jnp.split(crit.embed(stacked), n)
        logits = jnp.split(crit.parse(stacked), n)
        distances = jnp.split(crit.lpips(jnp.concatenate([images] * n), stacked), n)
        fake_logits = discriminate_each(lambda x: networks.discriminator.apply({"params": d_params}, x), outputs.images)
        per_output = {
            "rec": [reconstruction(images, x) for x in outputs.images],
            "lpips": [losses.lpips_batch_mean(d) for d in distances],
            "parse": [losses.parse_loss(original_logits, x) for x in logits],
            "reg": [regulariser(w) for w in outputs.latents],
            "adv": [losses.generator_nonsaturating_loss(f) for f in fake_logits],
        }
        terms = losses.stage2_terms(per_output, settings.form)
        terms["id"] = identity_terms(original_embedding, *embeddings, margin=settings.id_margin)
        return losses.stage2_generator_loss({k: v for k, v in terms.items() if k in weights}, weights)

    fakes_of = lambda outputs: list(outputs.images)  # noqa: E731
    return _adversarial_step(
        networks, settings, txs, state, forward, images, fakes_of, reduction, loss_of_outputs, rng
    )
