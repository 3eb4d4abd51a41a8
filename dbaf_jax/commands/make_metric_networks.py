"""Write metric networks with random weights, so that `evaluate` runs without checkpoints.

    python -m dbaf_jax.commands.make_metric_networks --out metrics/ [--mtcnn DIR] [--seed 0]

Writes ArcFace, LPIPS (AlexNet), FaceNet and the FID Inception with random weights into
a new folder for ``python -m dbaf_jax.commands.evaluate --metrics-models``, and MTCNN copied from
``--mtcnn`` (a converted detector, e.g. the ``mtcnn`` of a model directory) or else random
as well. The folder records that its weights are random, and every report made with it
says in bold that its figures are a smoke test (docs/evaluation.md). For real figures,
convert the published checkpoints instead (`metric_networks.CONVERTER_COMMANDS`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from dbaf_jax.commands import run_main
from dbaf_jax.evaluation.random_networks import write_random_metric_networks


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(
        prog="python -m dbaf_jax.commands.make_metric_networks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", required=True, help="the folder to write (must not exist)")
    parser.add_argument(
        "--mtcnn", help="a converted MTCNN detector directory to copy (default: random weights)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the random weights' seed")
    args = parser.parse_args(argv)
    folder = write_random_metric_networks(args.out, args.mtcnn, args.seed)
    print(
        f"wrote {folder} (random weights: evaluation figures made with it are a smoke test)",
        file=sys.stderr,
    )
    return folder


if __name__ == "__main__":
    run_main(main)
