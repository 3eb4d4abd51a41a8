"""How big the training steps' programs are, and where the size comes from: XLA's
compile time grows with the number of operations it is handed, so this is the
measure to watch when a step compiles slowly.

    python -m benchmarks.speed.program_size [--stages 2 1] [--size 256] [--batch1 16] [--batch2 8]
        [--dtype float32|bfloat16] [--width-scale 1.0] [--encoder-width-scale 1.0]
        [--r1-every K] [--cid-scan] [--top 12] [--compile [--compile-twice]]

Each step is the training loop's own (`dbaf_jax.train.initialization.setup`, traced on abstract inputs as
`benchmarks.speed.flops` does, one device), lowered to StableHLO. Rows:
- ops: the operations in the lowered module's text (every function body once);
- by kind: the most frequent operation names;
- by part: the operations grouped by the first Flax module on their name stack
  (``ArcFace``, ``Generator``, ``CID`` ...); outside any module, "top level" (directly
  under the step: the optimizer updates, mostly) and "losses and glue" (inside the
  differentiated function);
- sharding constraints and convolutions, counted apart;
- with ``--compile``: the seconds this machine's backend takes to compile the lowered
  program (minutes on a CPU at full size; a GPU's compile differs, but grows with the
  same count), marked "(cache)" when it was loaded from the compilation cache;
  ``--compile-twice`` compiles again after dropping the in-memory programs, which
  times the load from the persistent cache the first compile filled.

With ``--r1-every K`` (lazy R1) stage 2's two compiled steps are measured apart: with
the penalty (every K-th step) and without.

Lowering needs no device memory, so it runs anywhere; the counts are the same on every
backend for the same JAX version.
"""

from __future__ import annotations

import argparse
import collections
import re
import time

import jax

from benchmarks.common.configs import stage_config
from benchmarks.speed import flops
from dbaf_jax.core import compilation_cache

_OP = re.compile(r'^\s*(?:%[^=]*= )?"?([a-z_]+\.[a-z_]+)[\s("]', re.M)
_OP_WITH_LOC = re.compile(
    r'^\s*(?:%[^=]*= )?"?([a-z_]+\.[a-z_]+)[\s("].*loc\((#loc\d+)\)\s*$', re.M
)
_LOC = re.compile(r"^(#loc\d+) = loc\((.*)\)\s*$", re.M)
_NAMED = re.compile(r'^"([^"]*)"(?:\((#loc\d+)\))?')
_STRUCTURAL = {"func.func", "func.return", "stablehlo.return", "sdy.mesh", "module.attributes"}


def _name_of(loc: str, locs: dict[str, str], depth: int = 0) -> str:
    """The first name a location carries, following fused and nested locations."""
    text = locs.get(loc, "")
    match = _NAMED.match(text)
    if match:
        return match.group(1)
    inner = re.search(r"#loc\d+", text)
    if inner and depth < 8:
        return _name_of(inner.group(0), locs, depth + 1)
    return ""


def part_of(name: str) -> str:
    """The part of the step a name stack (``jit(f)/transpose(jvp(Generator))/...``)
    belongs to: its first Flax module (a capitalised component once transforms like
    ``jvp(...)`` are peeled off); outside any module, "top level" for operations
    directly under the step (the optimizer updates, mostly) and "losses and glue" for
    differentiated ones."""
    components = name.split("/")[1:]  # the first is the jitted function
    for component in components:
        inner = re.sub(r"^(?:[a-z_]+\()+|\)+$", "", component)
        if inner[:1].isupper():
            return inner.split(".")[0]
    return "top level" if len(components) <= 1 else "losses and glue"


def measure(text: str) -> dict:
    """Operation counts of a module's StableHLO text (``lowered.as_text(debug_info=True)``)."""
    kinds = collections.Counter(op for op in _OP.findall(text) if op not in _STRUCTURAL)
    locs = dict(_LOC.findall(text))
    parts = collections.Counter()
    for op, loc in _OP_WITH_LOC.findall(text):
        if op not in _STRUCTURAL:
            parts[part_of(_name_of(loc, locs))] += 1
    return {
        "ops": sum(kinds.values()),
        "kinds": kinds,
        "parts": parts,
        "sharding_constraints": kinds.get("sdy.sharding_constraint", 0),
        "convolutions": kinds.get("stablehlo.convolution", 0),
    }


def _top(counter: collections.Counter, total: int, count: int) -> str:
    return ", ".join(f"{name} {n} ({n / total:.0%})" for name, n in counter.most_common(count))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", type=int, nargs="+", choices=[1, 2], default=[2, 1])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--batch1", type=int, default=16)
    parser.add_argument("--batch2", type=int, default=8)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--width-scale", type=float, default=1.0)
    parser.add_argument("--encoder-width-scale", type=float, default=1.0)
    parser.add_argument(
        "--r1-every", type=int, default=1, help="lazy R1 every K steps: both compiled steps"
    )
    parser.add_argument(
        "--cid-scan", action="store_true", help="CID's blocks under lax.scan (config.cid_scan)"
    )
    parser.add_argument("--top", type=int, default=12, help="kinds and parts listed per step")
    parser.add_argument(
        "--compile", action="store_true", help="also time this backend's compile (slow)"
    )
    parser.add_argument(
        "--compile-twice", action="store_true", help="with --compile: then the load from the cache"
    )
    args = parser.parse_args(argv)
    if args.compile:
        compilation_cache.enable()

    print(
        f"Training-step program size, {args.size}px, widths {args.width_scale:g}/{args.encoder_width_scale:g}, {args.dtype}\n"
    )
    timed = ["compile s"] * args.compile + ["again s"] * (args.compile and args.compile_twice)
    print(
        "| step | batch | ops | convolutions | sharding constraints | lower s |"
        + "".join(f" {c} |" for c in timed)
    )
    print("|---" * (6 + len(timed)) + "|")
    details = []
    steps = [
        (stage, take_r1)
        for stage in args.stages
        for take_r1 in ((True, False) if args.r1_every > 1 else (True,))
    ]
    for stage, take_r1 in steps:
        batch = args.batch1 if stage == 1 else args.batch2
        config = stage_config(
            stage, args.size, args.width_scale, args.encoder_width_scale, args.dtype, batch
        )
        config.r1_every, config.r1_lazy = args.r1_every, args.r1_every > 1
        config.cid_scan = args.cid_scan
        name = f"stage {stage}" + (
            "" if args.r1_every == 1 else " with R1" if take_r1 else " without R1"
        )
        start = time.perf_counter()
        lowered = flops.lowered_step(config, take_r1=take_r1)
        text = lowered.as_text(debug_info=True)
        lower_s = time.perf_counter() - start
        m = measure(text)
        row = f"| {name} | {batch} | {m['ops']} | {m['convolutions']} | {m['sharding_constraints']} | {lower_s:.1f} |"
        for again in range(len(timed)):
            if again:
                jax.clear_caches()
                lowered = flops.lowered_step(config, take_r1=take_r1)
            with compilation_cache.CompileWatch() as watch:
                lowered.compile()
            row += f" {watch.seconds:.1f}{' (cache)' if watch.from_cache else ''} |"
        print(row, flush=True)
        details.append((name, m))
    for name, m in details:
        print(f"\n{name} by kind: {_top(m['kinds'], m['ops'], args.top)}")
        print(f"{name} by part: {_top(m['parts'], m['ops'], args.top)}")


if __name__ == "__main__":
    main()
