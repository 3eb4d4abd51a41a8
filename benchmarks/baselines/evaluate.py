"""Throughput of the evaluation: each metric network (JAX vs its PyTorch reference) and the whole run.

    python -m benchmarks.baselines.evaluate [--batch-sizes 8] [--repeats 3] [--images 200]
        [--model DIR --metrics-models DIR --faces DIR]

Metric networks run the same random weights in both frameworks (built as the parity
tests build them and converted with the converters' mapping functions): ArcFace
IR-SE50 and FaceNet at full size, the FID Inception (256 -> 299), LPIPS AlexNet on
256 px pairs, and MTCNN with its real weights (facenet-pytorch's bundled files) on
256 px face crops, one image per call as the evaluation runs it. JAX runs jitted after
a warm-up call; PyTorch in inference mode after one. Figures are medians over
``--repeats`` calls, in images per second.

The whole evaluation (`dbaf_jax.evaluation.protocol.evaluate`, everything included:
anonymization, both recoveries with both passwords, every metric, the diversity study
and its plots) is timed once on ``--images`` faces, after a warm-up run on one batch
that compiles. With --model, --metrics-models and --faces it runs the given (real,
converted) models on the first ``--images`` faces of that folder; without them, the
tests' tiny model (reduced width, 64 px output) with random metric networks on crops of
the test photos, which measures the pipeline's overhead more than the networks.
The same command runs unchanged on a GPU.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Iterator

import jax
import numpy as np
import torch

from benchmarks.baselines.encoders import build_arcface
from benchmarks.baselines.metric_networks import build_facenet, build_inception
from benchmarks.common.timing import median_seconds
from convert.lpips import convert_lpips, default_lin_path
from convert.mtcnn import convert_mtcnn
from dbaf_jax.core import compilation_cache
from dbaf_jax.evaluation.protocol import EvaluationOptions, evaluate
from dbaf_jax.faces.detectors import mtcnn
from dbaf_jax.storage import images, model_directory
from tests.evaluation_models import build_metrics_models, build_tiny_model, face_crops, write_faces
from tests.parity import nchw
from tests.torch_reference.metric_networks import (
    random_images,
    reference_lpips,
    torchvision_trunk_state_dict,
)
from tests.torch_reference.nms import batched_nms as torch_batched_nms

SIZE = 256


def build_lpips(work: Path):
    reference = reference_lpips("alex", seed=0)
    trunk = work / "alex_trunk.pth"
    torch.save(torchvision_trunk_state_dict(reference), trunk)
    network = model_directory.load_network(
        convert_lpips("alex", default_lin_path("alex"), trunk, work)
    )
    return "LPIPS AlexNet (256 pairs)", reference, network


def time_network(
    name, torch_forward, jax_forward, variables, inputs, repeats
) -> tuple[str, float, float]:
    """(name, JAX images/s, PyTorch images/s) of forwards on the same (B, H, W, 3) inputs."""
    jax_forward = jax.jit(jax_forward)
    on_device = [jax.device_put(x) for x in inputs]
    variables = jax.device_put(variables)
    with torch.inference_mode():
        t_torch = median_seconds(lambda: torch_forward(*inputs), repeats)
    t_jax = median_seconds(
        lambda: jax.block_until_ready(jax_forward(variables, *on_device)), repeats
    )
    return name, len(inputs[0]) / t_jax, len(inputs[0]) / t_torch


def metric_network_rows(batch: int, repeats: int, work: Path) -> Iterator[tuple[str, float, float]]:
    """Yields (name, JAX images/s, PyTorch images/s) per network as each is timed."""
    work.mkdir(parents=True)
    arcface_name, arcface_torch, arcface_jax, arcface_variables = build_arcface()
    for name, size, torch_forward, jax_forward, variables in [
        (arcface_name, SIZE, lambda x: arcface_torch(nchw(x)), arcface_jax, arcface_variables),
        build_facenet(SIZE),
        build_inception(SIZE),
    ]:
        inputs = [random_images(size, batch=batch, seed=batch)]
        yield time_network(name, torch_forward, jax_forward, variables, inputs, repeats)
    images = random_images(SIZE, batch=batch, seed=batch)
    name, reference, network = build_lpips(work)
    others = np.clip(images + np.float32(0.1), -1, 1)
    yield time_network(
        name,
        lambda a, b: reference(nchw(a), nchw(b)),
        network.module.apply,
        network.variables,
        [images, others],
        repeats,
    )


def mtcnn_row(repeats: int, work: Path) -> tuple[str, float, float]:
    """One 256 px face crop per call, as the evaluation detects."""
    import facenet_pytorch.models.utils.detect_face as reference_detect  # after the torchvision stub
    from facenet_pytorch import MTCNN

    reference_detect.batched_nms = torch_batched_nms  # torchvision's compiled op is missing here
    detector = mtcnn.MTCNN.load(convert_mtcnn(work))
    face = face_crops(detector, 1)[0]
    reference = MTCNN(keep_all=True)
    t_jax = median_seconds(lambda: detector.detect(face), repeats)
    t_torch = median_seconds(lambda: reference.detect(face, landmarks=True), repeats)
    return "MTCNN (256 crop, 1 per call)", 1 / t_jax, 1 / t_torch


def whole_evaluation(args, work: Path) -> float:
    """Images per second of `evaluate` on ``args.images`` faces (after a one-batch warm-up)."""
    if args.model:
        model, metrics, paths = (
            Path(args.model),
            Path(args.metrics_models),
            images.input_images(Path(args.faces))[: args.images],
        )
    else:
        model, metrics = build_tiny_model(work), build_metrics_models(work / "metrics")
        paths = images.input_images(
            write_faces(
                work / "faces",
                mtcnn.MTCNN.load(metrics / "mtcnn"),
                args.images,
            )
        )
    options = EvaluationOptions(batch_size=args.batch_sizes[0])
    evaluate(model, paths[: options.batch_size], metrics, work / "warmup", options)
    start = time.perf_counter()
    evaluate(model, paths, metrics, work / "report", options)
    return len(paths) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--images", type=int, default=200, help="faces of the whole-evaluation run")
    parser.add_argument("--model", help="a converted DBAF model (else the tests' tiny one)")
    parser.add_argument("--metrics-models", help="with --model: the converted metric networks")
    parser.add_argument("--faces", help="with --model: a folder of aligned faces")
    args = parser.parse_args(argv)
    compilation_cache.enable()
    if bool(args.model) != bool(args.metrics_models) or bool(args.model) != bool(args.faces):
        parser.error("--model, --metrics-models and --faces go together")

    print(
        f"JAX {jax.__version__} on {jax.devices()[0].platform}; torch {torch.__version__} "
        f"with {torch.get_num_threads()} threads\n"
    )
    print("| network | batch | JAX images/s | PyTorch images/s | JAX / PyTorch speed |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for batch in args.batch_sizes:
            for name, jax_rate, torch_rate in metric_network_rows(
                batch, args.repeats, work / f"b{batch}"
            ):
                print(
                    f"| {name} | {batch} | {jax_rate:.2f} | {torch_rate:.2f} | {jax_rate / torch_rate:.2f} |",
                    flush=True,
                )
        name, jax_rate, torch_rate = mtcnn_row(args.repeats, work / "mtcnn")
        print(
            f"| {name} | 1 | {jax_rate:.2f} | {torch_rate:.2f} | {jax_rate / torch_rate:.2f} |",
            flush=True,
        )
        rate = whole_evaluation(args, work / "whole")
        which = (
            "the given models" if args.model else "the tests' tiny model, random metric networks"
        )
        print(
            f"\nwhole evaluation ({which}), {args.images} images, batch {args.batch_sizes[0]}: {rate:.3f} images/s"
        )


if __name__ == "__main__":
    main()
