"""Prepare a training dataset from a folder of face images (`dbaf_jax.train.prepare.prepare`).

    python -m dbaf_jax.commands.prepare_data --images DIR --out DATA_DIR --size 256

Every image below DIR (any nesting) is decoded, converted to RGB and resized to
size x size (PIL bilinear, as the reference's transforms), then written into an
ArrayRecord dataset that training reads (``--config.data.dir DATA_DIR``). Unreadable
files are skipped and listed, never fatal.
"""

from __future__ import annotations

import argparse

from dbaf_jax import commands
from dbaf_jax.train import prepare


def main(argv: list[str] | None = None) -> prepare.PrepareSummary:
    """Parses ``argv`` and runs `prepare.prepare`."""
    parser = argparse.ArgumentParser(
        prog="python -m dbaf_jax.commands.prepare_data", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--images", required=True, help="folder of face images (searched recursively)"
    )
    parser.add_argument(
        "--out", required=True, help="output dataset directory (must not exist or be empty)"
    )
    parser.add_argument(
        "--size", type=int, default=256, help="side of the square images (default 256)"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing dataset at --out"
    )
    args = parser.parse_args(argv)
    return prepare.prepare(args.images, args.out, args.size, overwrite=args.overwrite)


if __name__ == "__main__":
    commands.run_main(main)
