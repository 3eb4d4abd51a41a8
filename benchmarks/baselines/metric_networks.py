"""Forward-pass throughput of the evaluation's metric networks: JAX vs their PyTorch packages.

    python -m benchmarks.baselines.metric_networks [--batch-sizes 1 8] [--repeats 5] [--size 256]

FaceNet (facenet-pytorch's InceptionResnetV1 on 160x160 faces) and the FID Inception
(pytorch-fid's InceptionV3, resizing ``--size`` images to 299 itself) run the same random
weights in both frameworks: the packages' models are built and randomised by
tests/torch_reference/metric_networks.py and converted with the converters' own mapping
functions. JAX runs jitted, after a warm-up call that compiles; PyTorch runs in
inference mode after a warm-up call. Each figure is the median over ``--repeats`` calls;
the table gives images per second, PyTorch time / JAX time and the relative difference
of the outputs.
"""

from __future__ import annotations

import argparse

import jax
import numpy as np
import torch

from benchmarks.common.timing import median_seconds
from convert.common import to_numpy
from convert.facenet import facenet_variables
from convert.inception import inception_variables
from dbaf_jax.core import compilation_cache
from dbaf_jax.models.facenet import InceptionResnetV1
from dbaf_jax.models.inception import FIDInceptionV3
from tests.parity import nchw, relative_error
from tests.torch_reference.metric_networks import (
    FACENET_IDENTITIES,
    facenet_input,
    pytorch_fid_model,
    random_facenet,
    random_fid_inception_state_dict,
    random_images,
)


def build_facenet(size: int):
    del size  # FaceNet's published input size is fixed
    reference = random_facenet(FACENET_IDENTITIES["vggface2"])
    variables = facenet_variables(to_numpy(reference.state_dict(), "reference"), "reference")
    return (
        "FaceNet (160 -> 512)",
        160,
        lambda x: reference(facenet_input(x)),
        InceptionResnetV1().apply,
        variables,
    )


def build_inception(size: int):
    state_dict = random_fid_inception_state_dict()
    reference = pytorch_fid_model(state_dict)
    variables = inception_variables(to_numpy(state_dict, "reference"), "reference")

    def torch_forward(x):
        return reference(nchw((x + 1.0) / 2.0))[0][:, :, 0, 0]  # pytorch-fid takes [0, 1]

    return (
        f"FID Inception ({size} -> 299 -> 2048)",
        size,
        torch_forward,
        FIDInceptionV3().apply,
        variables,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--size", type=int, default=256, help="side of the images given to the Inception"
    )
    args = parser.parse_args(argv)
    compilation_cache.enable()

    print(
        f"JAX {jax.__version__} on {jax.devices()[0].platform}; torch {torch.__version__} "
        f"with {torch.get_num_threads()} threads\n"
    )
    print("| network | batch | JAX images/s | PyTorch images/s | PyTorch / JAX | rel. diff |")
    print("|---|---|---|---|---|---|")
    for build in (build_facenet, build_inception):
        name, size, torch_forward, jax_forward, variables = build(args.size)
        jax_forward = jax.jit(jax_forward)
        variables = jax.device_put(variables)
        for batch in args.batch_sizes:
            images = random_images(size, batch=batch, seed=batch)
            images_jax = jax.device_put(images)
            with torch.inference_mode():
                t_torch = median_seconds(lambda: torch_forward(images), args.repeats)
                expected = torch_forward(images).numpy()
            t_jax = median_seconds(
                lambda: jax_forward(variables, images_jax).block_until_ready(), args.repeats
            )
            error = relative_error(np.asarray(jax_forward(variables, images_jax)), expected)
            print(
                f"| {name} | {batch} | {batch / t_jax:.1f} | {batch / t_torch:.1f} | "
                f"{t_torch / t_jax:.2f} | {error:.1e} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
