"""Forward-pass timings of the full-width e4e encoder and ArcFace: JAX vs the PyTorch reference.

    python -m benchmarks.baselines.encoders [--batch-sizes 1 8] [--repeats 5]

Both frameworks run the same random weights: a PyTorch reference (tests/torch_reference)
is randomised and converted with the converters' own mapping functions. Inputs are
(B, 256, 256, 3) images (ArcFace pools and crops them to 112 as DBAF does). JAX runs
jitted, after a warm-up call that compiles; PyTorch runs in inference mode after a
warm-up call. Each figure is the median over ``--repeats`` calls, in ms per image; the
table also gives PyTorch time / JAX time and the relative difference of the outputs.
"""

from __future__ import annotations

import argparse

import jax
import numpy as np
import torch

from benchmarks.common.timing import median_seconds
from convert.arcface import arcface_variables
from convert.common import to_numpy
from convert.e4e import encoder_variables
from dbaf_jax.core import compilation_cache
from dbaf_jax.models.arcface import ArcFace
from dbaf_jax.models.e4e import Encoder4Editing
from tests.parity import nchw, relative_error
from tests.torch_reference import e4e as torch_e4e
from tests.torch_reference.arcface import Backbone
from tests.torch_reference.irse import randomize_irse_


def build_e4e():
    torch.manual_seed(0)
    reference = randomize_irse_(torch_e4e.Encoder4Editing(), seed=0)
    latent_avg = torch.randn(14, 512)
    state_dict = to_numpy(reference.state_dict(), "reference")
    state_dict["latent_avg"] = latent_avg.numpy()
    module = Encoder4Editing()
    variables = encoder_variables(state_dict, module, "reference")

    def torch_forward(x):
        return reference(x)[0] + latent_avg

    return "e4e (256 -> W+ 14x512)", torch_forward, lambda v, x: module.apply(v, x).codes, variables


def build_arcface():
    torch.manual_seed(0)
    reference = randomize_irse_(Backbone(), seed=0)
    module = ArcFace()
    variables = arcface_variables(
        to_numpy(reference.state_dict(), "reference"), module, "reference"
    )

    def torch_forward(x):
        # DBAF's preprocessing of a 256 image: crop, adaptive pool to 112.
        return reference(
            torch.nn.functional.adaptive_avg_pool2d(x[:, :, 35:223, 32:220], (112, 112))
        )

    return "ArcFace IR-SE50 (256 -> 512)", torch_forward, module.apply, variables


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    compilation_cache.enable()

    print(
        f"JAX {jax.__version__} on {jax.devices()[0].platform}; torch {torch.__version__} "
        f"with {torch.get_num_threads()} threads\n"
    )
    print("| network | batch | JAX ms/image | PyTorch ms/image | PyTorch / JAX | rel. diff |")
    print("|---|---|---|---|---|---|")
    for build in (build_e4e, build_arcface):
        name, torch_forward, jax_forward, variables = build()
        jax_forward = jax.jit(jax_forward)
        variables = jax.device_put(variables)
        for batch in args.batch_sizes:
            images = np.tanh(
                np.random.default_rng(batch).standard_normal((batch, 256, 256, 3))
            ).astype(np.float32)
            images_jax = jax.device_put(images)
            images_torch = nchw(images)
            with torch.inference_mode():
                t_torch = median_seconds(lambda: torch_forward(images_torch), args.repeats)
                expected = torch_forward(images_torch).numpy()
            t_jax = median_seconds(
                lambda: jax_forward(variables, images_jax).block_until_ready(), args.repeats
            )
            error = relative_error(jax_forward(variables, images_jax), expected)
            print(
                f"| {name} | {batch} | {1e3 * t_jax / batch:.1f} | {1e3 * t_torch / batch:.1f} | "
                f"{t_torch / t_jax:.2f} | {error:.1e} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
