"""Stage 1 (disentanglement): CID, MAAR and the generator learn to put one image's
identity on another's attributes, against the discriminator.

Per step, as the reference's training script: the attribute images are the batch
itself every ``pair_self_every``-th step of an epoch and otherwise the batch rolled by
one (`losses.pair_attribute_images`); the mixed code ``I_id + A_attr`` is decoded with
the attribute images' MAAR maps; D sees the attribute images as real and the mixed
images as fake. e4e is frozen and deterministic, so each image is encoded once and the
encoding is rolled for the attribute images.

The reference's loader keeps each epoch's last, partial batch; this one drops it
(static shapes under jit), so an epoch here has floor(N / B) steps and the
reference's one more. The pairing phase is the step's index within its epoch in both,
so every step both run pairs the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections

from dbaf_jax.models.dbaf.dbaf import Variables
from dbaf_jax.models.e4e import EncoderOutput
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train.dbaf import losses
from dbaf_jax.train.dbaf.adversarial import AdversarialStage, StepSettings
from dbaf_jax.train.dbaf.networks import Networks
from dbaf_jax.train.dbaf.state import Optimizers
from dbaf_jax.train.shared import Critics, agreement


class Inputs(NamedTuple):
    """What a stage-1 step computes with frozen networks only (B images)."""

    images: jax.Array  # the identity images (B, H, W, 3)
    attribute_images: jax.Array  # (B, H, W, 3)
    same: jax.Array  # bool: each image is its own attribute image
    encoded: EncoderOutput  # e4e of the identity images
    attribute_encoded: EncoderOutput  # e4e of the attribute images
    identity_embedding: jax.Array  # ArcFace (B, 512) of the identity images
    attribute_embedding: jax.Array  # ArcFace (B, 512) of the attribute images
    attribute_logits: jax.Array  # parser logits (B, H, W, 19) of the attribute images
    latent_avg: jax.Array  # e4e's average code (n_latent, style_dim): the paper's w_avg


class Outputs(NamedTuple):
    mixed: jax.Array  # (B, H, W, 3)
    latents: jax.Array  # the mixed codes (B, n_latent, style_dim)


@dataclasses.dataclass(frozen=True)
class Stage1(AdversarialStage):
    pair_self_every: int
    same_threshold: float
    different_threshold: float

    terms = losses.STAGE1_TERMS
    sample_columns = ("identity", "attributes", "mixed")
    trained_recovery = "none"  # stage 1 trains anonymization only (`model_directory.RECOVERY`)

    @classmethod
    def from_config(
        cls, config: ml_collections.ConfigDict, networks: Networks, optimizers: Optimizers
    ) -> "Stage1":
        return cls(
            networks=networks,
            optimizers=optimizers,
            settings=StepSettings.from_config(config, cls.terms),
            pair_self_every=config.pair_self_every,
            same_threshold=config.loss.same_threshold,
            different_threshold=config.loss.different_threshold,
        )

    def prepare(
        self, frozen: Variables, images: jax.Array, index_in_epoch: jax.Array, rng: jax.Array
    ) -> Inputs:
        def partners(x):
            return losses.pair_attribute_images(x, index_in_epoch, self.pair_self_every)[0]

        critics = self.critics(frozen)
        encoded = self.networks.model.apply("e4e", frozen, images)
        embedding = critics.embed(images)
        attribute_images = partners(images)
        return Inputs(
            images=images,
            attribute_images=attribute_images,
            same=index_in_epoch % self.pair_self_every == 0,
            encoded=encoded,
            attribute_encoded=jax.tree.map(partners, encoded),
            identity_embedding=embedding,
            attribute_embedding=partners(embedding),
            attribute_logits=critics.parse(attribute_images),
            latent_avg=frozen["e4e"]["buffers"]["latent_avg"],
        )

    def forward(
        self, variables: Variables, inputs: Inputs, rng: jax.Array, train: bool
    ) -> tuple[Outputs, Variables]:
        model = self.networks.model
        identity_rng, attribute_rng = jax.random.split(rng)
        identity, _ = model.disentangle(variables, inputs.encoded, train, identity_rng)
        attributes, updates = model.disentangle(
            variables, inputs.attribute_encoded, train, attribute_rng
        )
        mixed, latents = model.mix(variables, identity, attributes)
        return Outputs(mixed, latents), updates

    def real_images(self, inputs: Inputs) -> jax.Array:
        return inputs.attribute_images

    def fake_images(self, outputs: Outputs) -> jax.Array:
        return outputs.mixed[None]

    def generator_terms(
        self,
        outputs: Outputs,
        inputs: Inputs,
        critics: Critics,
        discriminate: Callable[[jax.Array], jax.Array],
    ) -> dict[str, jax.Array]:
        form, margin = self.settings.form, self.settings.id_margin
        mixed_embedding = critics.embed(outputs.mixed)
        distances = losses.contrastive_distance(inputs.attribute_embedding, mixed_embedding, margin)
        return {
            "id": losses.identity_loss(inputs.identity_embedding, mixed_embedding, margin),
            "contrastive": losses.contrastive_loss(
                distances, inputs.same, self.same_threshold, self.different_threshold
            ),
            "rec": form.reconstruction(inputs.attribute_images, outputs.mixed),
            "lpips": losses.lpips_batch_mean(critics.lpips(inputs.attribute_images, outputs.mixed)),
            "parse": losses.parse_loss(
                inputs.attribute_logits, critics.parse(outputs.mixed), self.settings.parse_classes
            ),
            "reg": form.regulariser(outputs.latents, inputs.latent_avg),
            "adv": losses.generator_nonsaturating_loss(discriminate(self.fake_images(outputs))[0]),
        }

    def sample_images(self, inputs: Inputs, outputs: Outputs) -> list[jax.Array]:
        return [inputs.images, inputs.attribute_images, outputs.mixed]

    def evaluate(
        self, variables: Variables, frozen: Variables, images: jax.Array, rng: jax.Array
    ) -> dict:
        """Reconstruction (each image mixed with itself) and identity transfer (identity of
        each image on its neighbour's attributes: ArcFace similarity to the identity image)."""
        critics = self.critics(frozen)
        metrics = {}
        for index_in_epoch in (0, 1):  # 0: self-pairing, 1: neighbour pairing
            inputs = self.prepare(frozen, images, jnp.asarray(index_in_epoch), rng)
            outputs, _ = self.forward(variables, inputs, rng, train=False)
            if index_in_epoch == 0:
                metrics.update(agreement(critics, images, outputs.mixed, "reconstruction"))
            else:
                similarity = losses.cosine_similarity(
                    inputs.identity_embedding, critics.embed(outputs.mixed)
                )
                metrics["identity_transfer_similarity"] = jnp.mean(similarity)
        return metrics

    def evaluation_summary(self, evaluated: dict[str, float], count: int) -> str:
        return f"reconstruction of {count} held-out faces: {evaluated['reconstruction_psnr']:.1f} dB (PSNR against the originals)"

    def exported_networks(self) -> tuple[str, ...]:
        """Everything stage 2 starts from; KRIA is not trained yet."""
        return networks_lib.exported_of(self.networks, leave_out=("kria",))
