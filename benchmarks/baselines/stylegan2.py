"""Forward-pass timings of the full-width StyleGAN2 generator: JAX vs the PyTorch reference.

    python -m benchmarks.baselines.stylegan2 [--size 256] [--batch-sizes 1 8] [--repeats 5] [--dtype float32|bfloat16]

Both frameworks run the same random weights: the PyTorch reference
(tests/torch_reference/stylegan2.py: rosinality's per-sample grouped modulated conv, the
pure-PyTorch upfirdn2d) is randomised and converted with `convert.stylegan2`. Input:
W+ latents (B, 14, 512) with the stored noise buffers. JAX runs jitted after a warm-up
call that compiles, timed with ``block_until_ready``; PyTorch runs under ``no_grad``
after a warm-up call (on the GPU when there is one, synchronised). Each figure is the
median over ``--repeats`` calls, in ms per image. ``--dtype bfloat16`` makes JAX compute
in bfloat16 (parameters stay float32) and runs PyTorch under autocast(bfloat16).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import torch

from benchmarks.common.timing import median_seconds
from convert.common import to_numpy
from convert.stylegan2 import generator_variables
from dbaf_jax.core import compilation_cache
from dbaf_jax.models.stylegan2 import Generator
from tests.parity import randomize_, relative_error
from tests.torch_reference import stylegan2 as ref


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    args = parser.parse_args(argv)
    compilation_cache.enable()

    torch_device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    reference = ref.Generator(args.size, 512, 8)
    # Small random weights keep the unnormalised ToRGB sums in a sensible range.
    reference = (
        ref.reset_fixed_kernels_(randomize_(reference, seed=0, scale=0.5)).eval().to(torch_device)
    )
    module = Generator(size=args.size, dtype=args.dtype)
    variables = jax.device_put(
        generator_variables(to_numpy(reference.state_dict(), "reference"), module, "reference")
    )
    forward = jax.jit(module.apply)

    def torch_forward(latents):
        with (
            torch.no_grad(),
            torch.autocast(torch_device, torch.bfloat16, enabled=args.dtype == "bfloat16"),
        ):
            out = reference(latents)
        if torch_device == "cuda":
            torch.cuda.synchronize()
        return out

    print(
        f"StyleGAN2 generator {args.size}px, full width, {args.dtype}. JAX {jax.__version__} on "
        f"{jax.devices()[0].device_kind}; torch {torch.__version__} on {torch_device} "
        f"({torch.get_num_threads()} threads)\n"
    )
    print("| batch | JAX ms/image | PyTorch ms/image | PyTorch / JAX | rel. diff |")
    print("|---|---|---|---|---|")
    for batch in args.batch_sizes:
        latents = (
            np.random.default_rng(batch)
            .standard_normal((batch, module.n_latent, 512))
            .astype(np.float32)
        )
        latents_jax = jax.device_put(latents)
        latents_torch = torch.from_numpy(latents).to(torch_device)
        t_torch = median_seconds(lambda: torch_forward(latents_torch), args.repeats)
        t_jax = median_seconds(
            lambda: forward(variables, latents_jax).block_until_ready(), args.repeats
        )
        expected = torch_forward(latents_torch).float().permute(0, 2, 3, 1).cpu().numpy()
        error = relative_error(
            np.asarray(forward(variables, latents_jax).astype(jnp.float32)), expected
        )
        print(
            f"| {batch} | {1e3 * t_jax / batch:.1f} | {1e3 * t_torch / batch:.1f} | "
            f"{t_torch / t_jax:.2f} | {error:.1e} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
