"""Write the evaluation's seeded split lists of a folder of face images (`evaluation.splits`).

python -m dbaf_jax.commands.make_splits --images DIR --out LISTS_DIR --protocol ffhq|celebahq [--seed 0]
"""

from __future__ import annotations

import argparse

from dbaf_jax.commands import run_main
from dbaf_jax.evaluation import splits


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m dbaf_jax.commands.make_splits", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--images", required=True, help="folder of face images (searched recursively)"
    )
    parser.add_argument("--out", required=True, help="folder for the list files")
    parser.add_argument("--protocol", required=True, choices=sorted(splits.PROTOCOLS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--allow-fewer",
        action="store_true",
        help="scale the counts down to a smaller folder (not the paper's protocol)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace existing list files")
    args = parser.parse_args(argv)
    made = splits.make_splits(args.images, args.protocol, args.seed, args.allow_fewer)
    header = f"dbaf_jax.evaluation.splits protocol={args.protocol} seed={args.seed} images_found={made.images_found}"
    files = splits.write_splits(made.lists, args.out, header, args.overwrite)
    for path, paths in zip(files, made.lists.values()):
        print(f"wrote {path} ({len(paths)} images)")
    if made.images_unused:
        print(f"{made.images_unused} of {made.images_found} images are in no list")


if __name__ == "__main__":
    run_main(main)
