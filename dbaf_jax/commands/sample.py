"""Samples a grid of faces from a StyleGAN2 generator into a PNG.

    python -m dbaf_jax.commands.sample --model DIR/generator --out faces.png [--rows 4 --cols 4 --psi 0.7]

Without --model, a randomly initialised generator of the given size and width is
sampled (a smoke test of the whole synthesis path; the faces are noise).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from dbaf_jax import commands
from dbaf_jax.models.stylegan2 import Generator, truncate
from dbaf_jax.storage import images, model_directory


def mean_latent(generator: Generator, variables, rng: jax.Array, n: int = 4096) -> jax.Array:
    """The average w of ``n`` mapped z, (style_dim,): the truncation centre."""
    z = jax.random.normal(rng, (n, generator.style_dim))
    return generator.apply(variables, z, method=Generator.map).mean(axis=0)


def sample(
    generator: Generator, variables, rng: jax.Array, count: int, psi: float = 1.0
) -> jax.Array:
    """``count`` images (count, size, size, 3) from z ~ N(0, I), truncated by ``psi`` in W."""
    z_rng, avg_rng = jax.random.split(rng)
    z = jax.random.normal(z_rng, (count, generator.style_dim))
    w = generator.apply(variables, z, method=Generator.map)
    if psi != 1.0:
        w = truncate(w, mean_latent(generator, variables, avg_rng), psi)
    latents = jnp.broadcast_to(w[:, None], (count, generator.n_latent, generator.style_dim))
    return generator.apply(variables, latents)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="a converted generator directory (e.g. DIR/generator)")
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--cols", type=int, default=4)
    parser.add_argument("--psi", type=float, default=1.0, help="truncation in W (1 = none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=256, help="random generator only")
    parser.add_argument("--width-scale", type=float, default=0.25, help="random generator only")
    args = parser.parse_args(argv)

    rng = jax.random.PRNGKey(args.seed)
    if args.model:
        network = model_directory.load_network(args.model)
        generator, variables = network.module, network.variables
    else:
        generator = Generator(size=args.size, width_scale=args.width_scale)
        init_latents = jnp.zeros((1, generator.n_latent, generator.style_dim))
        variables = generator.init(jax.random.PRNGKey(args.seed + 1), init_latents)
    count = args.rows * args.cols
    batch = jax.jit(lambda v, r: sample(generator, v, r, count, args.psi))(variables, rng)
    out = Path(args.out)
    images.write_png(
        out,
        images.make_grid(np.asarray(batch), args.rows, padding=0),
        {"source": args.model or "random init"},
    )
    print(f"wrote {out} ({args.rows}x{args.cols} faces at {generator.size}px)")


if __name__ == "__main__":
    commands.run_main(main)
