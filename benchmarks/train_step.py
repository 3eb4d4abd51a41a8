"""Train-step timings of both stages: step time, images/s and achieved FLOP/s.

    python -m benchmarks.train_step [--stages 1 2] [--size 256] [--batch 8] [--dtype float32|bfloat16]
        [--width-scale 1.0] [--encoder-width-scale 1.0] [--steps 5] [--fsdp 1]

The step is the training loop's own (`loop.make_step`: the jitted stage-1 or stage-2
step with explicit shardings and a donated state) on a mesh over every device, for
the ``reference`` config of each stage (the full 256 px model with the public
checkpoints' widths unless the flags reduce them) with random weights, so no files
are needed. Each stage's step is compiled first (timed separately), then run once
to warm up and ``--steps`` times; the table gives the median step time.

FLOPs are XLA's count for the compiled step (``cost_analysis()['flops']`` of the
per-device program, times the devices): everything a step computes, i.e. the frozen critics' passes, the
discriminator update with R1, the generator side's forward and backward pass and
both optimizer updates. Achieved FLOP/s = FLOPs per step / median step time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from configs import stage1, stage2
from dbaf_jax import sharding
from dbaf_jax.train import loop, networks as networks_lib, stages, state as state_lib


def stage_config(stage: int, args: argparse.Namespace):
    config = (stage1 if stage == 1 else stage2).get_config("reference")
    config.model.size = args.size
    n_latent = 2 * int(np.log2(args.size)) - 2
    if n_latent <= 8:
        raise SystemExit(f"--size {args.size}: the coarse/medium/fine split 4/4/rest needs at least 64 px")
    config.model.latent_groups = (4, 4, n_latent - 8)
    config.model.width_scale = args.width_scale
    config.model.encoder_width_scale = args.encoder_width_scale
    config.compute_dtype = args.dtype
    config.batch_size = args.batch
    config.mesh.fsdp = args.fsdp
    return config


def benchmark_stage(stage: int, args: argparse.Namespace) -> dict:
    config = stage_config(stage, args)
    networks = networks_lib.build(config)
    init_rng, state_rng = jax.random.split(jax.random.PRNGKey(0))
    variables = networks_lib.init_variables(networks, init_rng, config.model.size)
    state, frozen, optimizers = state_lib.create(config, variables, state_rng)
    del variables
    mesh = sharding.make_mesh(None, config.mesh.fsdp)
    state = jax.device_put(state, sharding.param_sharding(mesh, state, config.mesh.min_shard_size))
    frozen = jax.device_put(frozen, sharding.replicated(mesh))
    images = np.random.default_rng(0).uniform(-1, 1, (args.batch, args.size, args.size, 3)).astype(np.float32)
    images = sharding.put_batch(mesh, images)
    index_in_epoch = jnp.asarray(1, jnp.int32)
    trained = sum(x.size for x in jax.tree.leaves((state.generator_params.fast, state.discriminator_params.fast)))

    step_fn = loop.make_step(stages.build(config, networks, optimizers), mesh, state, frozen)
    start = time.perf_counter()
    compiled = step_fn.lower(state, frozen, images, index_in_epoch).compile()
    compile_seconds = time.perf_counter() - start
    costs = compiled.cost_analysis()
    costs = costs[0] if isinstance(costs, (list, tuple)) else costs
    flops = float(costs.get("flops", float("nan"))) * mesh.size  # the count is the per-device program's

    state, metrics = compiled(state, frozen, images, index_in_epoch)  # warm-up
    jax.block_until_ready(metrics)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        state, metrics = compiled(state, frozen, images, index_in_epoch)
        jax.block_until_ready((state, metrics))
        times.append(time.perf_counter() - start)
    assert np.isfinite(float(metrics["g_total"])), "the step diverged"
    seconds = statistics.median(times)
    return {
        "stage": stage,
        "trained_params": trained,
        "compile_s": compile_seconds,
        "step_s": seconds,
        "images_per_s": args.batch / seconds,
        "gflop": flops / 1e9,
        "gflops_per_s": flops / seconds / 1e9,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", type=int, nargs="+", choices=[1, 2], default=[1, 2])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8, help="global batch")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--width-scale", type=float, default=1.0, help="generator and discriminator widths")
    parser.add_argument("--encoder-width-scale", type=float, default=1.0, help="e4e and ArcFace widths (>= 0.25)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps after the warm-up step")
    parser.add_argument("--fsdp", type=int, default=1, help="fsdp axis of the mesh (the rest is data)")
    args = parser.parse_args(argv)

    devices = jax.devices()
    print(
        f"DBAF train step, {args.size}px, widths {args.width_scale:g} (G, D) / {args.encoder_width_scale:g} "
        f"(e4e, ArcFace), global batch {args.batch}, {args.dtype}; JAX {jax.__version__} on "
        f"{len(devices)} x {devices[0].device_kind}; median of {args.steps} steps\n"
    )
    print("| stage | trained params (M) | compile s | step s | images/s | GFLOP/step | achieved GFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for stage in args.stages:
        r = benchmark_stage(stage, args)
        print(
            f"| {r['stage']} | {r['trained_params'] / 1e6:.1f} | {r['compile_s']:.0f} | {r['step_s']:.3g} | "
            f"{r['images_per_s']:.3g} | {r['gflop']:.4g} | {r['gflops_per_s']:.3g} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
