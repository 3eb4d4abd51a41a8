"""MTCNN on a clip's frames, one at a time against several at once (docs/video.md).

    python -m benchmarks.speed.detect_frames --detector models/mtcnn [--frames 48] [--width 640] [--chunk 8]

Frames are a pan and zoom over tests/data/office3.jpg (tests/video_clips.py) at
``--width`` x 3/4 of it. Each way first runs once over all frames (compilation), then
is timed over them again; printed as a table: frames/s of `Detector.detect` frame
by frame and of `Detector.detect_many` on ``--chunk`` frames at a time, and the
faces each found.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from benchmarks.common import models
from fixtures.clips import pan_frames


def _timed(run: Callable[[], list]) -> tuple[float, int]:
    run()  # compiles every shape the timed run needs
    start = time.perf_counter()
    found = run()
    return time.perf_counter() - start, sum(len(f.boxes) for f in found)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    models.add_detector_argument(parser)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--chunk", type=int, default=8)
    args = parser.parse_args(argv)
    detector = models.mtcnn_alone(args.detector)
    size = (args.width, args.width * 3 // 4)
    frames = [
        np.asarray(Image.fromarray(f).resize(size, Image.Resampling.BILINEAR))
        for f in pan_frames(args.frames, travel=0.5)
    ]
    one, faces_one = _timed(lambda: [detector.detect(frame) for frame in frames])
    many, faces_many = _timed(
        lambda: [
            d
            for i in range(0, len(frames), args.chunk)
            for d in detector.detect_many(frames[i : i + args.chunk])
        ]
    )
    print("| frames | size | one at a time, frames/s | faces | together, frames/s | faces |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {len(frames)} | {size[0]}x{size[1]} | {len(frames) / one:.2f} | {faces_one} | {len(frames) / many:.2f} ({args.chunk} at a time) | {faces_many} |"
    )


if __name__ == "__main__":
    main()
