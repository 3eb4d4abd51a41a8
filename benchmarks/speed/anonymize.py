"""Inference figures of anonymization: compile time, time per batch, images/s, FLOPs,
MFU (the fraction of the device's FLOP ceiling reached), peak memory and (optionally)
the largest batch that fits.

    python -m benchmarks.speed.anonymize [--batches 1 8 32] [--dtype float32|bfloat16] [--size 256]
        [--width-scale 1.0] [--encoder-width-scale 1.0] [--steps 20] [--peak-tflops T]
        [--find-max-batch [--max-batch 4096]]

What is timed is the device computation of `FaceAnonymizer.anonymize` (the public
API; ``dtype`` as given, weights placed on the devices once, the batch split over every
local accelerator): its jitted `dbaf_jax.inference.programs.anonymize_program` (e4e, CID with each
image alone, MAAR, KRIA with one key, the generator) compiled for the batch and called
on aligned images and a key already on the devices. The model is the ``reference``
stage-2 config (the full 256 px model with the public checkpoints' widths unless the
flags reduce them) with random weights, written once and kept for later runs
(`benchmarks.common.models.kept_random_model`). Not
timed: copying images to and from the host (``anonymize`` does both, so each of its
calls waits for the device), keys from passwords (scrypt), reading and writing files.

Columns (one row per batch):
- compile s: ``lower(...).compile()`` for that batch, timed alone;
- batch s: after one warm-up call, ``--steps`` calls dispatched back to back with one
  ``block_until_ready`` at the end, wall time / steps;
- images/s: batch / batch s;
- GFLOP/image: XLA's count for the call's program before optimisation
  (`timing.model_flops`, the whole batch) / batch; a batch that does not split evenly
  over the devices is padded (`pad_batch`), and the padding's work counts against the batch;
- TFLOP/s: achieved, GFLOP per batch / batch s;
- ceiling images/s: devices x the named peak / FLOP per image, the rate at 100% MFU;
- MFU: images/s / that ceiling (= TFLOP/s / (devices x peak)); for a known GPU against
  its dense bf16 and dense TF32 peaks (`device_info`), else against ``--peak-tflops``;
- peak GiB: ``memory_stats()['peak_bytes_in_use']``, the peak since the process
  started (rows run in the order given); n/a on the CPU;
- max batch (``--find-max-batch``): the largest batch that compiles and runs, by
  doubling from the last ``--batches`` value then bisecting, up to ``--max-batch``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import jax
import numpy as np

from benchmarks.common import device_info, models, timing
from dbaf_jax.core import compilation_cache
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.inference.programs import anonymize_program


def run_batch(anonymizer: FaceAnonymizer, batch: int, steps: int) -> dict:
    """Compiles and times the anonymization of ``batch`` random images (see the module doc)."""
    rng = np.random.default_rng(batch)
    size = anonymizer.input_size
    z = rng.standard_normal((1, *anonymizer.model.key_shape)).astype(np.float32)
    key = anonymizer.place_key(anonymizer.model.key_from_z(anonymizer.variables, z)[0], batch)
    images = anonymizer.place(rng.uniform(-1, 1, (batch, size, size, 3)).astype(np.float32))
    args = (
        anonymizer.model,
        anonymizer.variables,
        images,
        key,
        False,
    )  # False: no latents, as `anonymize` by default
    timing.progress(f"batch {batch}: lowering and compiling")
    lowered, compiled, watch = timing.compile_watched(anonymize_program, *args)
    timing.progress(f"batch {batch}: {watch.message('anonymization')}; timing")
    devices = anonymizer.batch_multiple
    flops = timing.model_flops(lowered)

    def call(_):
        return compiled(anonymizer.variables, images, key)

    jax.block_until_ready(call(None))  # warm-up
    seconds, (anonymized, _) = timing.steady_state_seconds(call, None, steps, jax.block_until_ready)
    if not np.isfinite(np.asarray(anonymized)).all():
        raise FloatingPointError(f"batch {batch}: non-finite anonymized images")
    return {
        "batch": batch,
        "compile": timing.compile_cell(watch),
        "batch_s": seconds,
        "flops": flops,
        "devices": devices,
        "peak_bytes": device_info.jax_peak_memory_bytes(jax.local_devices()[0]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--width-scale", type=float, default=1.0, help="generator widths")
    parser.add_argument(
        "--encoder-width-scale", type=float, default=1.0, help="e4e widths (>= 0.25)"
    )
    parser.add_argument("--steps", type=int, default=20, help="timed calls after the warm-up call")
    device_info.add_peak_argument(parser, "the device")
    device_info.add_largest_batch_arguments(parser, max_batch=4096)
    args = parser.parse_args(argv)
    compilation_cache.enable()

    with tempfile.TemporaryDirectory() as tmp:
        model = models.kept_random_model(
            args.size, args.width_scale, args.encoder_width_scale, Path(tmp)
        )
        anonymizer = FaceAnonymizer(model, dtype=args.dtype)
    device_kind = jax.local_devices()[0].device_kind
    peaks = device_info.named_peaks(device_kind, args.peak_tflops)
    print(
        f"DBAF anonymize, {args.size}px, widths {args.width_scale:g} (generator) / {args.encoder_width_scale:g} (e4e), "
        f"{args.dtype}; JAX {jax.__version__} on {anonymizer.batch_multiple} x {device_kind}; {args.steps} calls, "
        f"one sync; {device_info.describe_peaks(peaks)}\n"
    )
    ceiling_columns = "".join(f" ceiling images/s {label} | MFU {label} |" for label in peaks)
    print(
        f"| batch | compile s | batch s | images/s | GFLOP/image | TFLOP/s |{ceiling_columns} peak GiB |"
    )
    print("|---" * (7 + 2 * len(peaks)) + "|")
    for batch in args.batches:
        r = run_batch(anonymizer, batch, args.steps)
        figures = timing.throughput(batch, r["batch_s"], r["flops"], peaks, r["devices"])
        flops_per_image = r["flops"] / batch
        ceilings = "".join(
            f" {r['devices'] * peaks[label] / flops_per_image:.4g} | {mfu:.1%} |"
            for label, mfu in figures["mfu"].items()
        )
        print(
            f"| {batch} | {r['compile']} | {r['batch_s']:.4g} | {figures['images_per_s']:.4g} | "
            f"{flops_per_image / 1e9:.4g} | {figures['flops_per_s'] / 1e12:.4g} |{ceilings} "
            f"{device_info.format_bytes(r['peak_bytes'])} |",
            flush=True,
        )
    if args.find_max_batch:
        fits = lambda batch: run_batch(anonymizer, batch, steps=1)  # noqa: E731
        largest = device_info.largest_batch(
            fits,
            anonymizer.padded_size(args.batches[-1]),
            args.max_batch,
            anonymizer.batch_multiple,
        )
        print(
            f"\nlargest batch that fits (up to {args.max_batch}): {largest if largest is not None else 'none'}"
        )


if __name__ == "__main__":
    main()
