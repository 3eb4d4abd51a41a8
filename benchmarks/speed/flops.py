"""The FLOP accounting of docs/performance.md: XLA's count for each
computation at full size, on abstract inputs (nothing is allocated or run, so it works
on any machine in a few minutes).

    python -m benchmarks.speed.flops [--size 256] [--batch1 16] [--batch2 8] [--width-scale 1.0]
        [--encoder-width-scale 1.0] [--remat]

Rows: the stage-1 and stage-2 training steps of the ``reference`` configs (the loop's
own step: frozen critics, the discriminator update with R1 on every step, the
generator side's forward and backward pass, both optimizer updates), the same steps
with the R1 penalty replaced by the discriminator's plain forward pass on the real
images (the difference is R1's share), and anonymizing one image (e4e, CID, MAAR, KRIA, the
generator) and the generator's forward pass alone, per image. Counts are
``Lowered.cost_analysis()['flops']`` of the program before XLA's optimisations: the
multiply-adds the program asks for, 2 FLOPs each. Transposed convolutions are counted
without the zeros they insert.

``--remat`` adds the stage-2 step under each ``config.remat`` policy: its FLOPs (the
recomputation included) and the temporary memory XLA assigns to the step compiled for
this machine's backend (compiled, so slow at full size; the CPU's buffer assignment is
not a GPU's, so read the policies' ratios rather than the sizes).
"""

from __future__ import annotations

import argparse
import functools
from unittest import mock

import jax
import jax.numpy as jnp

from benchmarks.common import timing
from benchmarks.common.configs import stage_config
from dbaf_jax.core import compilation_cache, sharding
from dbaf_jax.train import initialization, stages
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train.dbaf import losses
from dbaf_jax.train.shared import REMAT_POLICIES


def abstract_run(config):
    """(networks, stage, abstract state, abstract frozen variables in the compute dtype)
    of a config: the training loop's setup (`initialization.random_setup`), traced."""
    made = {}

    def create(rng):
        made["networks"], made["setup"] = initialization.random_setup(config, rng)
        return made["setup"].state, made["setup"].frozen

    state, frozen = jax.eval_shape(create, jax.random.PRNGKey(0))
    return made["networks"], made["setup"].stage, state, frozen


def lowered_step(config, **variant):
    """The lowered training step of ``config`` (its global batch, one device), with the
    static arguments ``variant`` (`step_variant`; default: the step's own, R1 taken)."""
    _, stage, state, frozen = abstract_run(config)
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    images = jax.ShapeDtypeStruct(
        (config.batch_size, config.model.size, config.model.size, 3), jnp.float32
    )
    index = jax.ShapeDtypeStruct((), jnp.int32)
    return jax.jit(sharding.within(mesh, functools.partial(stage.step, **variant))).lower(
        state, frozen, images, index
    )


def step_flops(config) -> float:
    """FLOPs of one training step of ``config``."""
    return timing.model_flops(lowered_step(config))


def remat_costs(config) -> dict[str, tuple[float, int]]:
    """(FLOPs, temporary bytes of the compiled step on this backend) of one training
    step of ``config`` under each ``config.remat`` policy. Compiles each: minutes at
    full size."""
    costs = {}
    for policy in REMAT_POLICIES:
        variant = config.copy_and_resolve_references()
        variant.remat = policy
        lowered = lowered_step(variant)
        costs[policy] = (
            timing.model_flops(lowered),
            lowered.compile().memory_analysis().temp_size_in_bytes,
        )
    return costs


def inference_flops(config) -> dict[str, float]:
    """FLOPs per image of anonymizing and of the generator's forward pass (batch 1)."""
    networks = stages.build_networks(config)
    model = networks.model.for_inference()
    names = tuple(model.networks())
    variables = jax.eval_shape(
        lambda r: networks_lib.init_variables(networks, r, config.model.size, names),
        jax.random.PRNGKey(0),
    )
    size = config.model.size
    image = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
    key = jax.ShapeDtypeStruct((1, 1, model.decoder.n_latent, model.decoder.style_dim), jnp.float32)
    latents = jax.ShapeDtypeStruct(
        (1, model.decoder.n_latent, model.decoder.style_dim), jnp.float32
    )
    anonymize = jax.jit(model.anonymize_images).lower(variables, image, key)
    generate = jax.jit(lambda v, w: model.apply("decoder", v, w)).lower(variables, latents)
    return {"anonymize": timing.model_flops(anonymize), "generator": timing.model_flops(generate)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument(
        "--batch1", type=int, default=16, help="stage-1 global batch (the reference's)"
    )
    parser.add_argument(
        "--batch2", type=int, default=8, help="stage-2 global batch (the reference's)"
    )
    parser.add_argument("--width-scale", type=float, default=1.0)
    parser.add_argument("--encoder-width-scale", type=float, default=1.0)
    parser.add_argument(
        "--remat",
        action="store_true",
        help="also compile the stage-2 step under each remat policy (slow)",
    )
    args = parser.parse_args(argv)
    compilation_cache.enable()
    rows = []
    for stage, batch in ((1, args.batch1), (2, args.batch2)):
        config = stage_config(
            stage, args.size, args.width_scale, args.encoder_width_scale, "float32", batch
        )
        total = step_flops(config)
        with mock.patch.object(
            losses, "r1_penalty", lambda d_apply, real, gamma: (jnp.zeros(()), d_apply(real))
        ):
            without_r1 = step_flops(config)
        rows.append(
            (f"stage {stage} step, batch {batch}", total, total / batch, 1 - without_r1 / total)
        )
    per_image = inference_flops(
        stage_config(2, args.size, args.width_scale, args.encoder_width_scale, "float32")
    )
    rows.append(
        ("anonymize, per image", per_image["anonymize"], per_image["anonymize"], float("nan"))
    )
    rows.append(
        (
            "generator forward, per image",
            per_image["generator"],
            per_image["generator"],
            float("nan"),
        )
    )
    print(f"{'computation':34s} {'TFLOP':>9s} {'GFLOP/image':>12s} {'R1 share':>9s}")
    for name, flops, per, r1 in rows:
        share = "" if r1 != r1 else f"{100 * r1:.0f}%"
        print(f"{name:34s} {flops / 1e12:9.3f} {per / 1e9:12.1f} {share:>9s}")
    if args.remat:
        config = stage_config(
            2, args.size, args.width_scale, args.encoder_width_scale, "float32", args.batch2
        )
        print(
            f"\nstage-2 step, batch {args.batch2}, by remat policy (temporary memory of the step compiled for {jax.default_backend()})"
        )
        print(f"{'remat':8s} {'TFLOP':>9s} {'temp GiB':>9s}")
        for policy, (flops, temp) in remat_costs(config).items():
            print(f"{policy:8s} {flops / 1e12:9.3f} {temp / 2**30:9.2f}")


if __name__ == "__main__":
    main()
