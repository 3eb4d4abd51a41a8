"""MTCNN on photos of many sizes: how many programs compile, and the time it costs (docs/performance.md).

    python -m benchmarks.speed.detect_sizes --detector models/mtcnn [--photos 24] [--bucket 32 1]

Photos are crops of tests/data/office5.jpg scaled to random sizes between 300 and
1200 pixels a side (a seeded draw: every run sees the same sizes), detected one after
another in a fresh process state per ``--bucket`` (`faces.detectors.mtcnn.PNET_BUCKET`; 1 is one
program per level size, as before bucketing). Printed per bucket: the programs compiled
(P-net's per level shape, and R-net's and O-net's per crop batch bucket beyond the first),
the seconds of the whole pass, and of a second pass over the same photos (nothing left to
compile), whose difference is about the compiling.
"""

from __future__ import annotations

import argparse
import time
from typing import Sequence

import jax
import numpy as np
from PIL import Image

from benchmarks.common import models
from dbaf_jax.faces.detectors import mtcnn as detect
from fixtures import DATA


def photos(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    with Image.open(DATA / "office5.jpg") as source:
        source = source.convert("RGB")
        return [
            np.asarray(source.resize((int(w), int(h)), Image.Resampling.BILINEAR))
            for w, h in rng.integers(300, 1201, (count, 2))
        ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    models.add_detector_argument(parser)
    parser.add_argument("--photos", type=int, default=24)
    parser.add_argument("--bucket", type=int, nargs="+", default=[32, 1])
    args = parser.parse_args(argv)
    detector, images = models.mtcnn_alone(args.detector), photos(args.photos)
    print("| bucket | programs compiled | first pass s | second pass s | faces |")
    print("|---|---|---|---|---|")
    for bucket in args.bucket:
        jax.clear_caches()
        detect.PNET_BUCKET = bucket
        detector.detect(images[0][:40, :40])  # R-net and O-net's first buckets, outside the count
        before = detect._forward._cache_size()
        start = time.perf_counter()
        found = sum(len(detector.detect(image).boxes) for image in images)
        first = time.perf_counter() - start
        programs = detect._forward._cache_size() - before
        start = time.perf_counter()
        for image in images:
            detector.detect(image)
        print(
            f"| {bucket} | {programs} | {first:.1f} | {time.perf_counter() - start:.1f} | {found} |"
        )


if __name__ == "__main__":
    main()
