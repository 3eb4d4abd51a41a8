"""Stage 2 (anonymization): KRIA learns key-conditioned identity transforms, while CID,
MAAR, the generator and D keep training.

Per step, as the reference's training script: four random keys (p1, p2 and two wrong
keys) give five outputs in this order: the anonymizations with p1 and p2, the
recovery of the p1 anonymization with p1, and its "recoveries" with the two wrong
keys. Recovery is ``recovery='latent'`` (the reference: KRIA applied again to the
anonymized identity code, with the original image's attribute code and MAAR maps)
or ``'image'`` (the paper: re-encode the anonymized image). D sees the inputs as real
and each of the five outputs as fake, one call per output.

With ``config.kria_warmup.steps`` > 0 (the quick start only) KRIA first learns
reversibility in latent space alone (`kria_warmup`, `Stage2.warm_up`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from dbaf_jax.core import image_metrics, sharding
from dbaf_jax.models.dbaf.dbaf import Variables
from dbaf_jax.storage import images as images_lib
from dbaf_jax.train import data
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train.dbaf import kria_warmup, losses
from dbaf_jax.train.dbaf.adversarial import AdversarialStage, StepSettings
from dbaf_jax.train.dbaf.networks import Networks
from dbaf_jax.train.dbaf.state import Optimizers, TrainState
from dbaf_jax.train.shared import Critics, agreement

RECOVERY_MODES = ("latent", "image")
KEYS_PER_STEP = 4  # p1, p2, wrong 1, wrong 2


class Inputs(NamedTuple):
    """What a stage-2 step computes with frozen networks only (B images)."""

    images: jax.Array  # (B, H, W, 3)
    keys: jax.Array  # (4, B, n_latent, style_dim): p1, p2, wrong 1, wrong 2
    embedding: jax.Array  # ArcFace (B, 512) of the inputs
    logits: jax.Array  # parser logits (B, H, W, 19) of the inputs
    latent_avg: jax.Array  # e4e's average code (n_latent, style_dim): the paper's w_avg


class Outputs(NamedTuple):
    """The five outputs: anonymized 1, anonymized 2, recovered, wrong key 1, wrong key 2."""

    images: jax.Array  # (5, B, H, W, 3)
    latents: jax.Array  # (5, B, n_latent, style_dim)


def sample_keys(
    networks: Networks, frozen: Variables, rng: jax.Array, shape: tuple[int, ...]
) -> jax.Array:
    """Random training keys (*shape, n_latent, style_dim): z ~ N(0, I) per latent group
    through the frozen mapping network, as the reference draws them."""
    model = networks.model
    z = jax.random.normal(rng, (*shape, len(model.kria.groups), model.key_generator.style_dim))
    flat = model.key_from_z(frozen, z.reshape(-1, *z.shape[-2:]))
    return flat.reshape(*shape, *flat.shape[1:])


@dataclasses.dataclass(frozen=True)
class Stage2(AdversarialStage):
    recovery: str
    warmup: kria_warmup.Settings

    @property
    def trained_recovery(self) -> str:
        """What the exported model's ``model.json`` records (`model_directory.RECOVERY`)."""
        return self.recovery

    terms = losses.STAGE2_TERMS
    sample_columns = (
        "input",
        "anonymized 1",
        "anonymized 2",
        "recovered",
        "wrong key 1",
        "wrong key 2",
    )

    def __post_init__(self):
        if self.recovery not in RECOVERY_MODES:
            raise ValueError(f"recovery {self.recovery!r}: expected one of {RECOVERY_MODES}")

    @classmethod
    def from_config(
        cls, config: ml_collections.ConfigDict, networks: Networks, optimizers: Optimizers
    ) -> "Stage2":
        return cls(
            networks=networks,
            optimizers=optimizers,
            settings=StepSettings.from_config(config, cls.terms),
            recovery=config.recovery,
            warmup=kria_warmup.Settings.from_config(config),
        )

    def warm_up(self, state: TrainState, frozen: Variables, source: data.ImageSource) -> TrainState:
        """The fresh ``state`` with KRIA warmed up in latent space on the identity codes of
        the first ``warmup.images`` images of ``source`` (`kria_warmup`); unchanged when
        ``warmup.steps`` is 0. Lookahead's fast and slow KRIA weights both take the result
        (the state is fresh: Ranger's moments are still zero)."""
        if self.warmup.steps == 0:
            return state
        count = min(self.warmup.images, len(source))
        images = jnp.asarray(images_lib.to_float(np.stack([source[i] for i in range(count)])))
        rng = jax.random.fold_in(
            jax.random.wrap_key_data(state.rng), 0x4B524941
        )  # state.rng itself stays as it was

        # Everything it reads is an argument: closed over, the frozen networks and the
        # images became constants that XLA folded at compile time (seconds per convolution).
        @jax.jit
        def warmed_kria(state, frozen, images, rng):
            variables = state.variables(frozen)
            encoding, _ = self.networks.model.encode(variables, images)
            keys = lambda key_rng, n: sample_keys(self.networks, frozen, key_rng, (2, n))  # noqa: E731
            return kria_warmup.fit(
                self.networks.model.kria,
                state.generator_params.fast["kria"],
                encoding.identity_code,
                keys,
                self.warmup,
                rng,
            )

        kria = warmed_kria(state, frozen, images, rng)
        # A fresh state: the optimizer starts again from the warmed weights (slow = fast, zero moments).
        params, opt_state = self.optimizers.generator.init(
            {**state.generator_params.fast, "kria": kria}
        )
        warmed = state.replace(generator_params=params, generator_opt_state=opt_state)
        return jax.device_put(warmed, jax.tree.map(lambda x: x.sharding, state))  # placed as before

    def prepare(
        self, frozen: Variables, images: jax.Array, index_in_epoch: jax.Array, rng: jax.Array
    ) -> Inputs:
        critics = self.critics(frozen)
        return Inputs(
            images=images,
            keys=sample_keys(self.networks, frozen, rng, (KEYS_PER_STEP, images.shape[0])),
            embedding=critics.embed(images),
            logits=critics.parse(images),
            latent_avg=frozen["e4e"]["buffers"]["latent_avg"],
        )

    def forward(
        self, variables: Variables, inputs: Inputs, rng: jax.Array, train: bool
    ) -> tuple[Outputs, Variables]:
        model = self.networks.model
        encode_rng, recover_rng = jax.random.split(rng)
        encoding, updates = model.encode(variables, inputs.images, train, encode_rng)
        recovery_keys = inputs.keys[jnp.array([0, 2, 3])]  # p1, wrong 1, wrong 2
        if self.recovery == "latent":
            # The recoveries need the anonymized identity codes, not images: all five
            # outputs decode as one generator batch of 5 * B.
            anonymized_latents, anonymized_identity = model.anonymized_codes(
                variables, encoding, inputs.keys[:2]
            )
            recovered = model.recovered_latents(
                variables, encoding, anonymized_identity[0], recovery_keys
            )
            latents = jnp.concatenate([anonymized_latents, recovered])
            return Outputs(
                model.synthesize(variables, latents, encoding.attribute_maps), latents
            ), updates
        anonymized = model.anonymize(variables, encoding, inputs.keys[:2])
        recovered, latents = model.recover_image(
            variables, anonymized.images[0], recovery_keys, train, recover_rng
        )
        outputs = Outputs(
            jnp.concatenate([anonymized.images, recovered]),
            jnp.concatenate([anonymized.latents, latents]),
        )
        return outputs, updates

    def real_images(self, inputs: Inputs) -> jax.Array:
        return inputs.images

    def fake_images(self, outputs: Outputs) -> jax.Array:
        return outputs.images

    def generator_terms(
        self,
        outputs: Outputs,
        inputs: Inputs,
        critics: Critics,
        discriminate: Callable[[jax.Array], jax.Array],
    ) -> dict[str, jax.Array]:
        form = self.settings.form
        count = outputs.images.shape[0]
        flat = sharding.merge_into_batch(
            outputs.images
        )  # one critic call for all five, image-major
        per_output = lambda x: sharding.split_from_batch(x, count)  # noqa: E731
        embeddings = per_output(critics.embed(flat))
        logits = per_output(critics.parse(flat))
        distances = per_output(critics.lpips(jnp.repeat(inputs.images, count, axis=0), flat))
        terms = form.reduce_terms(
            {
                "rec": jax.vmap(lambda x: form.reconstruction(inputs.images, x))(outputs.images),
                "lpips": jax.vmap(losses.lpips_batch_mean)(distances),
                "parse": jax.vmap(
                    lambda x: losses.parse_loss(inputs.logits, x, self.settings.parse_classes)
                )(logits),
                "reg": jax.vmap(lambda w: form.regulariser(w, inputs.latent_avg))(outputs.latents),
                "adv": jax.vmap(losses.generator_nonsaturating_loss)(discriminate(outputs.images)),
            }
        )
        terms["id"] = form.stage2_identity(
            inputs.embedding,
            *embeddings,
            margin=self.settings.id_margin,
            reduction=self.settings.identity_reduction,
        )
        return terms

    def sample_images(self, inputs: Inputs, outputs: Outputs) -> list[jax.Array]:
        return [inputs.images, *outputs.images]

    def evaluate(
        self, variables: Variables, frozen: Variables, images: jax.Array, rng: jax.Array
    ) -> dict:
        """Anonymization (ArcFace similarity of anonymized 1 to its input: low is private),
        recovery with the right key (PSNR, LPIPS, similarity) and with a wrong one (similarity,
        PSNR), PSNRs against the inputs and against the model's own reconstruction of each
        input (its codes decoded unchanged): a model too small to draw faces well can still
        show that the right key returns to its reconstruction and a wrong key does not."""
        critics = self.critics(frozen)
        inputs = self.prepare(frozen, images, jnp.asarray(0), rng)
        outputs, _ = self.forward(variables, inputs, rng, train=False)
        anonymized, recovered, wrong = outputs.images[0], outputs.images[2], outputs.images[3]
        encoding, _ = self.networks.model.encode(variables, images)
        reconstruction = self.networks.model.synthesize(
            variables, encoding.code, encoding.attribute_maps
        )
        embedding = inputs.embedding
        return {
            "anonymized_similarity": jnp.mean(
                losses.cosine_similarity(embedding, critics.embed(anonymized))
            ),
            **agreement(critics, images, recovered, "recovery"),
            "wrong_key_similarity": jnp.mean(
                losses.cosine_similarity(embedding, critics.embed(wrong))
            ),
            "wrong_key_psnr": jnp.mean(image_metrics.psnr(images, wrong)),
            "recovery_psnr_to_reconstruction": jnp.mean(
                image_metrics.psnr(reconstruction, recovered)
            ),
            "wrong_key_psnr_to_reconstruction": jnp.mean(image_metrics.psnr(reconstruction, wrong)),
        }

    def evaluation_summary(self, evaluated: dict[str, float], count: int) -> str:
        return (
            f"recovery on {count} held-out faces: right password {evaluated['recovery_psnr_to_reconstruction']:.1f} dB, "
            f"wrong password {evaluated['wrong_key_psnr_to_reconstruction']:.1f} dB (PSNR against the model's own "
            f"reconstruction of each face; against the originals {evaluated['recovery_psnr']:.1f} and "
            f"{evaluated['wrong_key_psnr']:.1f} dB; {self.recovery} mode)"
        )

    def exported_networks(self) -> tuple[str, ...]:
        """What `dbaf_jax.commands.anonymize` runs, and D to continue training."""
        return networks_lib.exported_of(self.networks)
