"""What both stages' train steps share: one discriminator update, then one update of
the generator side, as the reference trains (a pure ``step(state, frozen, images,
index_in_epoch) -> (state, metrics)``).

A stage (`dbaf_jax.train.dbaf.stage1`, `dbaf_jax.train.dbaf.stage2`) says what its generator
side computes (`AdversarialStage.forward`), which images D sees as real and fake, and
its generator-side loss terms; this module runs the updates.

By default the generator-side forward runs once per step: ``jax.vjp`` keeps its
linearisation, D updates on its (constant) outputs, and the generator-side loss,
computed with the updated D as in the reference, is pulled back through the same
linearisation. ``two_pass`` runs the forward twice instead, as the reference does
(once for D's fakes, once for G's loss): MAAR's running statistics then update twice
per step and D's fakes and G's loss see different dropout masks. docs/decisions.md
says more.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar

import jax
import jax.numpy as jnp
import ml_collections

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.models.dbaf.dbaf import Variables
from dbaf_jax.train.dbaf import losses
from dbaf_jax.train.dbaf.networks import Networks
from dbaf_jax.train.dbaf.state import DISCRIMINATOR, Optimizers, TrainState
from dbaf_jax.train.shared import (
    REMAT_POLICIES,
    Critics,
    Metrics,
    discriminate_each,
    discriminate_real_and_fakes,
)


@dataclasses.dataclass(frozen=True)
class StepSettings:
    """The static part of a config that every step reads."""

    form: losses.LossForm
    weights: tuple[tuple[str, float], ...]  # (term, weight) of the terms with a weight
    id_margin: float
    identity_reduction: str  # stage 2's identity terms over the outputs: losses.IDENTITY_REDUCTIONS
    parse_classes: tuple[int, ...]  # the parser classes the parse loss compares
    r1_gamma: float  # on the steps that take R1 (lazy R1 already scaled)
    r1_every: int
    train_discriminator: bool
    two_pass: bool
    remat: str

    @classmethod
    def from_config(
        cls, config: ml_collections.ConfigDict, terms: tuple[str, ...]
    ) -> "StepSettings":
        if config.loss.form not in losses.FORMS:
            raise ConfigError(
                f"loss.form {config.loss.form!r}: expected one of {sorted(losses.FORMS)}"
            )
        if config.loss.identity_reduction not in losses.IDENTITY_REDUCTIONS:
            raise ConfigError(
                f"loss.identity_reduction {config.loss.identity_reduction!r}: expected one of {losses.IDENTITY_REDUCTIONS}"
            )
        if config.loss.form == "reference" and config.loss.identity_reduction != "sum":
            raise ConfigError(
                "loss.identity_reduction 'mean' is the paper form's (HFORD eqs. 10-12); the reference's averages are fixed"
            )
        if config.loss.adversarial_reduction not in ("", "sum", "mean"):
            raise ConfigError(
                f"loss.adversarial_reduction {config.loss.adversarial_reduction!r}: expected '', 'sum' or 'mean'"
            )
        return cls(
            form=losses.FORMS[config.loss.form].with_adversarial_reduction(
                config.loss.adversarial_reduction
            ),
            weights=tuple((name, float(config.loss[name])) for name in terms if config.loss[name]),
            id_margin=config.loss.id_margin,
            identity_reduction=config.loss.identity_reduction,
            parse_classes=tuple(config.loss.parse_classes),
            r1_gamma=config.r1_gamma * (config.r1_every if config.r1_lazy else 1),
            r1_every=config.r1_every,
            train_discriminator=DISCRIMINATOR in config.trainable,
            two_pass=config.two_pass,
            remat=config.remat,
        )

    def __post_init__(self):
        if self.remat not in REMAT_POLICIES:
            raise ConfigError(f"remat {self.remat!r}: expected one of {sorted(REMAT_POLICIES)}")
        if self.r1_every < 1:
            raise ConfigError(f"r1_every {self.r1_every}: must be at least 1")


def _merged(model_state: Variables, updates: Variables) -> Variables:
    """Model state (MAAR's running statistics, ...) with a forward pass's updates applied."""
    return {
        name: {**collections, **updates.get(name, {})} for name, collections in model_state.items()
    }


@dataclasses.dataclass(frozen=True)
class AdversarialStage:
    """A stage's training: what its subclass defines, and the step that runs it."""

    networks: Networks
    optimizers: Optimizers
    settings: StepSettings

    # Checkpoint metadata: Ranger keeps slow weights and moments per group of leaves
    # (`optimizers.ranger`); checkpoints of the earlier per-leaf layout do not restore.
    state_layout: ClassVar[dict[str, str]] = {"state_layout": "ranger grouped by shape"}
    terms: ClassVar[tuple[str, ...]]  # the generator-side loss terms this stage can weight
    sample_columns: ClassVar[tuple[str, ...]]  # what each column of a sample grid shows

    # ---- what a stage defines

    def prepare(
        self, frozen: Variables, images: jax.Array, index_in_epoch: jax.Array, rng: jax.Array
    ) -> Any:
        """What the step needs besides the trained networks, computed once (frozen networks only)."""
        raise NotImplementedError

    def forward(
        self, variables: Variables, inputs: Any, rng: jax.Array, train: bool
    ) -> tuple[Any, Variables]:
        """The generator side: -> (outputs, model-state updates of the trained networks)."""
        raise NotImplementedError

    def real_images(self, inputs: Any) -> jax.Array:
        """The images D sees as real (B, H, W, 3); R1 is taken on them."""
        raise NotImplementedError

    def fake_images(self, outputs: Any) -> jax.Array:
        """The images D sees as fake, one batch per output (K, B, H, W, 3)."""
        raise NotImplementedError

    def generator_terms(
        self,
        outputs: Any,
        inputs: Any,
        critics: Critics,
        discriminate: Callable[[jax.Array], jax.Array],
    ) -> dict[str, jax.Array]:
        """The unweighted generator-side loss terms (named as in ``terms``)."""
        raise NotImplementedError

    def sample_images(self, inputs: Any, outputs: Any) -> list[jax.Array]:
        """One image batch (B, H, W, 3) per entry of ``sample_columns``."""
        raise NotImplementedError

    def exported_networks(self) -> tuple[str, ...]:
        """The networks a finished run writes to its model directory."""
        raise NotImplementedError

    def evaluate(
        self, variables: Variables, frozen: Variables, images: jax.Array, rng: jax.Array
    ) -> Metrics:
        """Scalar measures (inference mode) of how well the stage does on held-out ``images``."""
        raise NotImplementedError

    def evaluation_summary(self, evaluated: dict[str, float], count: int) -> str | None:
        """One line for the user about the last evaluation (of ``count`` held-out faces), or None."""
        return None

    def warm_up(self, state: TrainState, frozen: Variables, source: Any) -> TrainState:
        """A fresh state before the first step; the stage's own preparation, if any."""
        return state

    # ---- shared

    def critics(self, frozen: Variables) -> Critics:
        apply = self.networks.apply
        return Critics(
            embed=lambda x: apply("arcface", frozen, x),
            lpips=lambda a, b: apply("lpips", frozen, a, b),
            parse=lambda x: apply("parser", frozen, x),
        )

    def discriminator(self, d_params) -> Callable[[jax.Array], jax.Array]:
        """D with ``d_params``: images (B, H, W, 3) -> logits (B, 1), float32."""
        return lambda x: self.networks.apply(
            DISCRIMINATOR, {DISCRIMINATOR: {"params": d_params}}, x
        )

    def generator_loss(self, terms: dict[str, jax.Array]) -> tuple[jax.Array, Metrics]:
        """(total, weighted terms) over the terms that have a weight."""
        weights = dict(self.settings.weights)
        return losses.weighted_total(
            {k: v for k, v in terms.items() if k in weights}, weights, self.terms
        )

    def sample(
        self, variables: Variables, frozen: Variables, images: jax.Array, rng: jax.Array
    ) -> list[jax.Array]:
        """The sample-grid columns for ``images`` (inference mode; index 1 of an epoch)."""
        inputs = self.prepare(frozen, images, jnp.asarray(1), rng)
        outputs, _ = self.forward(variables, inputs, rng, train=False)
        return self.sample_images(inputs, outputs)

    def step_variant(self, step: int) -> dict[str, bool]:
        """The static arguments of `step` for training step number ``step``: lazy R1 runs
        two compiled steps, with and without the penalty, rather than one program holding
        both behind a ``lax.cond`` (which compiles both and keeps both in every step)."""
        return {"take_r1": step % self.settings.r1_every == 0}

    def step(
        self,
        state: TrainState,
        frozen: Variables,
        images: jax.Array,
        index_in_epoch: jax.Array,
        take_r1: bool = True,
    ) -> tuple[TrainState, Metrics]:
        """One D update (with R1 when ``take_r1``, see `step_variant`), then one
        generator-side update, on ``images`` (B, H, W, 3)."""
        rng, prepare_rng, d_rng, g_rng = jax.random.split(jax.random.wrap_key_data(state.rng), 4)
        inputs = self.prepare(frozen, images, index_in_epoch, prepare_rng)
        critics = self.critics(frozen)
        fast = state.generator_params.fast

        def forward(fast_params, model_state, rng):
            return self.forward(
                state.variables(frozen, fast_params, model_state), inputs, rng, train=True
            )

        if self.settings.remat != "none":
            forward = jax.checkpoint(forward, policy=REMAT_POLICIES[self.settings.remat])

        def loss_of_outputs(outputs, d_params):
            d_apply = self.discriminator(d_params)
            terms = self.generator_terms(
                outputs, inputs, critics, lambda x: discriminate_each(d_apply, x)
            )
            return self.generator_loss(terms)

        real = self.real_images(inputs)
        if self.settings.two_pass:
            d_outputs, d_updates = forward(fast, state.model_state, d_rng)
            state, d_metrics = self._discriminator_update(
                state, real, self.fake_images(d_outputs), take_r1
            )
            model_state = _merged(state.model_state, d_updates)

            def loss(fast_params):
                outputs, updates = forward(fast_params, model_state, g_rng)
                total, terms = loss_of_outputs(outputs, state.discriminator_params.fast)
                return total, (terms, updates)

            (total, (terms, g_updates)), grads = jax.value_and_grad(loss, has_aux=True)(fast)
            model_state = _merged(model_state, g_updates)
        else:
            outputs, pullback, updates = jax.vjp(
                lambda p: forward(p, state.model_state, g_rng), fast, has_aux=True
            )
            state, d_metrics = self._discriminator_update(
                state, real, self.fake_images(outputs), take_r1
            )
            (total, terms), output_grads = jax.value_and_grad(loss_of_outputs, has_aux=True)(
                outputs, state.discriminator_params.fast
            )
            (grads,) = pullback(output_grads)
            model_state = _merged(state.model_state, updates)
        state = state.after_generator_update(
            self.optimizers.generator, grads, rng, model_state=model_state
        )
        return state, {**d_metrics, "g_total": total, **terms}

    def _discriminator_update(
        self, state: TrainState, real: jax.Array, fakes: jax.Array, take_r1: bool
    ) -> tuple[TrainState, Metrics]:
        """One Ranger step of D on real images and constant fakes, with R1 when ``take_r1``."""
        settings = self.settings
        fakes = jax.lax.stop_gradient(fakes)

        def loss_fn(d_params):
            d_apply = self.discriminator(d_params)
            if (
                take_r1
            ):  # R1 differentiates D's real logits twice: the real batch keeps a trace of its own
                r1, real_logits = losses.r1_penalty(d_apply, real, settings.r1_gamma)
                fake_logits = discriminate_each(d_apply, fakes)
            else:
                r1, (real_logits, fake_logits) = (
                    jnp.zeros(()),
                    discriminate_real_and_fakes(d_apply, real, fakes),
                )
            logistic = jax.vmap(lambda f: losses.discriminator_logistic_loss(real_logits, f))(
                fake_logits
            )
            return losses.discriminator_loss(
                logistic, r1, settings.form.output_reductions["d_logistic"]
            )

        (total, terms), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.discriminator_params.fast
        )
        metrics = {"d_total": total, **terms}
        if not settings.train_discriminator:
            return state, metrics
        params, opt_state = self.optimizers.discriminator.step(
            grads, state.discriminator_opt_state, state.discriminator_params
        )
        return state.replace(
            discriminator_params=params, discriminator_opt_state=opt_state
        ), metrics
