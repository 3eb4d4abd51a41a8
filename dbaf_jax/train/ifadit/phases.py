"""iFADIT's two training phases (the paper's dual-phase training, section 3.5).

- Phase 1 (`Phase1`): e4e and the mapper learn to rebuild each image from its ArcFace
  identity and W+ attribute code, ``G(M(E_ID(X), E_Attr(X)))``, under eq. 14.
- Phase 2 (`Phase2`): the secure identity flow and the identity compensation layer
  learn under eq. 22, every other network frozen. Per step two keys shared by the
  batch (the diversity loss compares different faces under one key and one face
  under different keys) anonymize every image; the anonymization with the first key is
  recovered with it and with a third, wrong key.

There is no discriminator: a step is one Adam update of the trained networks
(`dbaf_jax.train.ifadit.state`); a phase is a `dbaf_jax.train.method.TrainingStage`. The losses are
`dbaf_jax.train.ifadit.losses`, looking through the frozen networks: ArcFace (E_ID),
MTCNN's O-net on the image resized to 48x48 (the landmark stand-in E_LM), the model's
BiSeNet (E_FP, parsing at the training size) and LPIPS.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import optax

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.models.ifadit.ifadit import Variables
from dbaf_jax.models.mtcnn import ONET_SIDE
from dbaf_jax.models.parsers import bisenet_inputs
from dbaf_jax.train import losses
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train.ifadit import PHASE1, PHASE2
from dbaf_jax.train.ifadit import losses as ifadit_losses
from dbaf_jax.train.ifadit.networks import IFADITNetworks
from dbaf_jax.train.ifadit.state import PhaseState
from dbaf_jax.train.shared import REMAT_POLICIES, Critics, Metrics, agreement

ANONYMIZATION_KEYS = 2  # the diversity loss's inter-key term needs two
RECOVERY_KEYS = 2  # the first anonymization key, then a wrong one


def sample_keys(
    networks: IFADITNetworks, variables: Variables, rng: jax.Array, count: int
) -> jax.Array:
    """``count`` random keys shared by the batch, (count, 1, 1, style_dim): z ~ N(0, I)
    through the key generator, as a password's key is made."""
    model = networks.model
    z = jax.random.normal(rng, (count, 1, *model.key_shape))
    return model.key_from_z(variables, z)


@dataclasses.dataclass(frozen=True)
class Phase:
    """What both phases share: the non-adversarial step and the frozen networks the losses use."""

    networks: IFADITNetworks
    optimizer: (
        optax.GradientTransformation | None
    )  # None: a phase built only to sample, evaluate or export
    remat: str
    trained_recovery = "image"  # iFADIT's recovery is the flow's exact inverse, on the image

    sample_columns: ClassVar[tuple[str, ...]]

    @classmethod
    def from_config(
        cls,
        config: ml_collections.ConfigDict,
        networks: IFADITNetworks,
        optimizer: optax.GradientTransformation | None,
    ) -> "Phase":
        if config.remat not in REMAT_POLICIES:
            raise ConfigError(f"remat {config.remat!r}: expected one of {sorted(REMAT_POLICIES)}")
        return cls(networks=networks, optimizer=optimizer, remat=config.remat)

    # ---- what a phase defines

    def loss(
        self, variables: Variables, images: jax.Array, rng: jax.Array
    ) -> tuple[jax.Array, Metrics]:
        """(total, unweighted terms) on ``images`` (B, H, W, 3)."""
        raise NotImplementedError

    def sample_images(
        self, variables: Variables, images: jax.Array, rng: jax.Array
    ) -> list[jax.Array]:
        raise NotImplementedError

    def evaluate(
        self, variables: Variables, frozen: Variables, images: jax.Array, rng: jax.Array
    ) -> Metrics:
        raise NotImplementedError

    def evaluation_summary(self, evaluated: dict[str, float], count: int) -> None:
        """No summary line: the evaluation's measures go to the metrics only."""
        return None

    def warm_up(self, state: PhaseState, frozen: Variables, source) -> PhaseState:
        """No preparation: a phase starts from its fresh state."""
        return state

    # ---- shared

    def loss_networks(self, variables: Variables) -> ifadit_losses.LossNetworks:
        """E_ID, E_LM, E_FP and LPIPS on ``variables`` (all frozen in both phases)."""
        nets = self.networks
        model = nets.model

        def landmarks(images):
            resized = jax.image.resize(
                images, (images.shape[0], ONET_SIDE, ONET_SIDE, 3), "bilinear"
            )
            return nets.apply("landmarks", variables, resized)[1]

        return ifadit_losses.LossNetworks(
            identity=lambda x: model.identity(variables, x),
            landmarks=landmarks,
            parser=lambda x: nets.apply("parser", variables, bisenet_inputs(x)),
            lpips=lambda a, b: nets.apply("lpips", variables, a, b),
        )

    def critics(self, variables: Variables) -> Critics:
        """The measures `shared.agreement` reports with."""
        networks = self.loss_networks(variables)
        return Critics(embed=networks.identity, lpips=networks.lpips, parse=networks.parser)

    def step_variant(self, step: int) -> dict:
        """The static arguments of `step` for step number ``step``: none, every step is alike."""
        del step
        return {}

    def step(
        self, state: PhaseState, frozen: Variables, images: jax.Array, index_in_epoch: jax.Array
    ) -> tuple[PhaseState, Metrics]:
        """One Adam update of the trained networks on ``images`` (B, H, W, 3)."""
        del index_in_epoch  # every step of an epoch is alike
        assert self.optimizer is not None, (
            "a phase built without an optimizer only samples and evaluates"
        )
        rng, loss_rng = jax.random.split(jax.random.wrap_key_data(state.rng))

        def loss(params):
            return self.loss(state.variables(frozen, params), images, loss_rng)

        if self.remat != "none":
            loss = jax.checkpoint(loss, policy=REMAT_POLICIES[self.remat])
        (total, terms), grads = jax.value_and_grad(loss, has_aux=True)(state.params)
        updates, opt_state = self.optimizer.update(grads, state.opt_state, state.params)
        state = state.replace(
            step=state.step + 1,
            rng=jax.random.key_data(rng),
            params=optax.apply_updates(state.params, updates),
            opt_state=opt_state,
        )
        return state, {"total": total, **terms}

    def sample(
        self, variables: Variables, frozen: Variables, images: jax.Array, rng: jax.Array
    ) -> list[jax.Array]:
        """The sample-grid columns for ``images``, one batch (B, H, W, 3) per `sample_columns`."""
        del frozen  # ``variables`` hold them
        return self.sample_images(variables, images, rng)

    def exported_networks(self) -> tuple[str, ...]:
        """Every network of the model (phase 2 starts from phase 1's; `dbaf_jax.commands.anonymize` runs phase 2's)."""
        return networks_lib.exported_of(self.networks)


class Phase2Outputs(NamedTuple):
    anonymized: jax.Array  # (2, B, H, W, 3): the two keys
    recovered: jax.Array  # (1, B, H, W, 3): anonymization 1 with its key
    wrongly_recovered: jax.Array  # (1, B, H, W, 3): anonymization 1 with a wrong key


@dataclasses.dataclass(frozen=True)
class Phase1(Phase):
    sample_columns = ("input", "reconstructed")

    def loss(
        self, variables: Variables, images: jax.Array, rng: jax.Array
    ) -> tuple[jax.Array, Metrics]:
        reconstructed = self.networks.model.reconstruct(variables, images)
        return ifadit_losses.phase1_loss(reconstructed, images, self.loss_networks(variables))

    def sample_images(
        self, variables: Variables, images: jax.Array, rng: jax.Array
    ) -> list[jax.Array]:
        return [images, self.networks.model.reconstruct(variables, images)]

    def evaluate(
        self, variables: Variables, frozen: Variables, images: jax.Array, rng: jax.Array
    ) -> Metrics:
        """Reconstruction PSNR, LPIPS and ArcFace similarity on held-out ``images``."""
        reconstructed = self.networks.model.reconstruct(variables, images)
        return agreement(self.critics(variables), images, reconstructed, "reconstruction")


@dataclasses.dataclass(frozen=True)
class Phase2(Phase):
    sample_columns = ("input", "anonymized 1", "anonymized 2", "recovered", "wrong key")

    def forward(self, variables: Variables, images: jax.Array, rng: jax.Array) -> Phase2Outputs:
        """Two anonymizations, then the first recovered with its key and with a wrong one
        (training runs without background refinement, as the paper's)."""
        model = self.networks.model
        keys = sample_keys(self.networks, variables, rng, ANONYMIZATION_KEYS + 1)
        anonymized = model.anonymize(variables, images, keys[:ANONYMIZATION_KEYS]).images
        recovered = model.recover(
            variables, anonymized[0], keys[jnp.array([0, ANONYMIZATION_KEYS])]
        )
        return Phase2Outputs(anonymized, recovered[:1], recovered[1:])

    def loss(
        self, variables: Variables, images: jax.Array, rng: jax.Array
    ) -> tuple[jax.Array, Metrics]:
        outputs = self.forward(variables, images, rng)
        return ifadit_losses.phase2_loss(images, *outputs, self.loss_networks(variables))

    def sample_images(
        self, variables: Variables, images: jax.Array, rng: jax.Array
    ) -> list[jax.Array]:
        outputs = self.forward(variables, images, rng)
        return [images, *outputs.anonymized, outputs.recovered[0], outputs.wrongly_recovered[0]]

    def evaluate(
        self, variables: Variables, frozen: Variables, images: jax.Array, rng: jax.Array
    ) -> Metrics:
        """Anonymization (ArcFace similarity to the input: low is private), recovery with the
        right key (PSNR, LPIPS, similarity) and with a wrong one (similarity)."""
        critics = self.critics(variables)
        outputs = self.forward(variables, images, rng)
        embedding = critics.embed(images)
        similarity = lambda x: jnp.mean(losses.cosine_similarity(embedding, critics.embed(x)))  # noqa: E731
        return {
            "anonymized_similarity": similarity(outputs.anonymized[0]),
            **agreement(critics, images, outputs.recovered[0], "recovery"),
            "wrong_key_similarity": similarity(outputs.wrongly_recovered[0]),
        }


# config.stage -> phase.
PHASES: dict[str, type[Phase]] = {PHASE1: Phase1, PHASE2: Phase2}
