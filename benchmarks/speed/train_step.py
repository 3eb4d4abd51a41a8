"""Train-step figures of both stages: compile time, step time, images/s, FLOPs, MFU,
peak memory and (optionally) the largest batch that fits.

    python -m benchmarks.speed.train_step [--stages 1 2] [--size 256] [--batch 8] [--dtype float32|bfloat16]
        [--width-scale 1.0] [--encoder-width-scale 1.0] [--steps 20] [--fsdp 1]
        [--devices N] [--two-pass] [--peak-tflops T] [--find-max-batch [--max-batch 1024]]

The step is the training loop's own (`loop.make_step`: the jitted stage-1 or stage-2
step with explicit shardings and a donated state) on a mesh over the first ``--devices``
devices (default: all of them), for
the ``reference`` config of each stage (the full 256 px model with the public
checkpoints' widths unless the flags reduce them) with random weights, so no files
are needed. Per iteration it does what the reference's D step + G step do (the frozen
critics' passes, the discriminator update with R1 on every step, the generator side's
forward and backward pass, both Ranger updates), with one generator-side forward
pass serving both updates (docs/decisions.md, "One forward pass per step"); ``--two-pass`` runs
the generator side twice per step as the reference does (the config's ``two_pass``).

Columns:
- compile s: ``step.lower(...).compile()``, timed alone; "(cache)" when the program
  came from the persistent compilation cache (`dbaf_jax.core.compilation_cache`; set
  ``DBAF_JAX_CACHE_DIR=off`` for a cold compile);
- step s: after one warm-up step, ``--steps`` steps dispatched back to back with one
  ``block_until_ready`` at the end, wall time / steps;
- images/s: global batch / step s;
- GFLOP/step: XLA's count for the step's program before optimisation
  (`timing.model_flops`, the global batch): everything the step computes;
- TFLOP/s: GFLOP/step / step s;
- MFU: TFLOP/s / (devices x a named peak of one device; `device_info`): for a known GPU
  against its dense bf16 and its dense TF32 peak, else against ``--peak-tflops``;
- peak GiB: ``memory_stats()['peak_bytes_in_use']`` of the first device, the peak
  since the process started (so a later row includes earlier rows' peaks); n/a on
  the CPU;
- max batch (``--find-max-batch``): the largest global batch whose step compiles and
  runs, found by doubling from ``--batch`` then bisecting (steps of the mesh's data
  axis), up to ``--max-batch``; slow, since every trial compiles.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.common import device_info, timing
from benchmarks.common.configs import stage_config
from dbaf_jax import commands
from dbaf_jax.core import compilation_cache, sharding
from dbaf_jax.core.errors import ConfigError
from dbaf_jax.train import initialization, loop


def run_stage(stage: int, args: argparse.Namespace, batch: int, steps: int) -> dict:
    """Builds a stage's state and step for ``batch`` and measures it (see the module doc)."""
    config = stage_config(
        stage,
        args.size,
        args.width_scale,
        args.encoder_width_scale,
        args.dtype,
        batch,
        args.fsdp,
        args.two_pass,
    )
    timing.progress(f"stage {stage}, batch {batch}: initialising the networks")
    mesh = sharding.make_mesh(None, config.mesh.fsdp, jax.devices()[: args.devices])
    if batch % mesh.shape["data"]:
        raise ConfigError(
            f"--batch {batch} is not a multiple of the mesh's data axis ({mesh.shape['data']} of {mesh.size} devices)"
        )
    _, (stage_fns, state, frozen, _) = initialization.random_setup(
        config, jax.random.PRNGKey(0), mesh
    )
    images = (
        np.random.default_rng(0).uniform(-1, 1, (batch, args.size, args.size, 3)).astype(np.float32)
    )
    images = sharding.put_batch(mesh, images)
    index_in_epoch = jnp.asarray(1, jnp.int32)
    trained = sum(
        x.size
        for x in jax.tree.leaves((state.generator_params.fast, state.discriminator_params.fast))
    )

    step_fn = loop.make_step(stage_fns, mesh, state, frozen)
    timing.progress(
        f"stage {stage}, batch {batch}: state built and placed; lowering and compiling the step"
    )
    lowered, compiled, watch = timing.compile_watched(
        step_fn, state, frozen, images, index_in_epoch
    )
    flops = timing.model_flops(lowered)
    timing.progress(f"stage {stage}, batch {batch}: {watch.message('the step')}; timing")

    def step(carry):
        return compiled(carry[0], frozen, images, index_in_epoch)

    carry = step((state, None))  # warm-up
    jax.block_until_ready(carry)
    seconds, (_, metrics) = timing.steady_state_seconds(step, carry, steps, jax.block_until_ready)
    if not np.isfinite(float(metrics["g_total"])):
        raise FloatingPointError(
            f"stage {stage}: the step diverged (g_total {float(metrics['g_total'])})"
        )
    return {
        "stage": stage,
        "batch": batch,
        "trained_params": trained,
        "compile": timing.compile_cell(watch),
        "step_s": seconds,
        "flops": flops,
        "devices": mesh.size,
        "data_axis": mesh.shape["data"],
        "peak_bytes": device_info.jax_peak_memory_bytes(jax.devices()[0]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", type=int, nargs="+", choices=[1, 2], default=[1, 2])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8, help="global batch")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument(
        "--width-scale", type=float, default=1.0, help="generator and discriminator widths"
    )
    parser.add_argument(
        "--encoder-width-scale", type=float, default=1.0, help="e4e and ArcFace widths (>= 0.25)"
    )
    parser.add_argument("--steps", type=int, default=20, help="timed steps after the warm-up step")
    parser.add_argument(
        "--fsdp", type=int, default=1, help="fsdp axis of the mesh (the rest is data)"
    )
    parser.add_argument("--devices", type=int, help="use the first N devices (default: all)")
    parser.add_argument(
        "--two-pass",
        action="store_true",
        help="the generator side twice per step, as the reference",
    )
    device_info.add_peak_argument(parser, "one device")
    device_info.add_largest_batch_arguments(parser, max_batch=1024)
    args = parser.parse_args(argv)
    compilation_cache.enable()

    devices = jax.devices()[: args.devices]
    peaks = device_info.named_peaks(devices[0].device_kind, args.peak_tflops)
    print(
        f"DBAF train step, {args.size}px, widths {args.width_scale:g} (G, D) / {args.encoder_width_scale:g} "
        f"(e4e, ArcFace), global batch {args.batch}, {args.dtype}{', two passes' if args.two_pass else ''}; JAX {jax.__version__} on "
        f"{len(devices)} x {devices[0].device_kind}; {args.steps} steps, one sync; {device_info.describe_peaks(peaks)}\n"
    )
    mfu_columns = "".join(f" MFU {label} |" for label in peaks)
    max_column = " max batch |" if args.find_max_batch else ""
    print(
        f"| stage | trained params (M) | compile s | step s | images/s | GFLOP/step | TFLOP/s |{mfu_columns} peak GiB |{max_column}"
    )
    print("|---" * (8 + len(peaks) + bool(args.find_max_batch)) + "|")
    for stage in args.stages:
        r = run_stage(stage, args, args.batch, args.steps)
        figures = timing.throughput(r["batch"], r["step_s"], r["flops"], peaks, r["devices"])
        mfu = "".join(f" {value:.1%} |" for value in figures["mfu"].values())
        row = (
            f"| {stage} | {r['trained_params'] / 1e6:.1f} | {r['compile']} | {r['step_s']:.4g} | "
            f"{figures['images_per_s']:.4g} | {r['flops'] / 1e9:.4g} | {figures['flops_per_s'] / 1e12:.4g} |{mfu} "
            f"{device_info.format_bytes(r['peak_bytes'])} |"
        )
        if args.find_max_batch:
            fits = lambda batch: run_stage(stage, args, batch, steps=1)  # noqa: E731
            largest = device_info.largest_batch(
                fits, args.batch, args.max_batch, multiple=r["data_axis"]
            )
            row += f" {largest if largest is not None else 'none'} |"
        print(row, flush=True)


if __name__ == "__main__":
    commands.run_main(main)
