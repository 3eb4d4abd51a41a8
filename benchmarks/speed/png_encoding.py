"""What each PNG compression level costs the host: encode ms and file size per image.

    python -m benchmarks.speed.png_encoding [--levels 0 1 3 6 9] [--repeats 5]

Every output of anonymize and recover is a PNG written on the host beside the model,
so on a fast device the encoder can be the slowest stage. Images: a 256 px aligned
face crop (the aligned-folder path) and the tests' group photo (the photo path), both
real photos. Each figure is the median of ``--repeats`` encodes to memory, one thread.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import numpy as np
from PIL import Image

from fixtures import DATA


def sample_images() -> dict[str, np.ndarray]:
    """(H, W, 3) uint8 images: a 256 px face crop and a group photo."""
    with Image.open(DATA / "jf.jpg") as img:
        portrait = img.convert("RGB")
    side = min(portrait.size)
    crop = portrait.crop((0, 0, side, side)).resize((256, 256), Image.BICUBIC)
    with Image.open(DATA / "office3.jpg") as img:
        group = img.convert("RGB")
    return {
        "256 px crop": np.asarray(crop),
        f"photo {group.width}x{group.height}": np.asarray(group),
    }


def encode(pixels: np.ndarray, level: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", compress_level=level)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[0, 1, 3, 6, 9])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print("| image | level | encode ms | KiB | size vs level 6 |")
    print("|---|---|---|---|---|")
    for name, pixels in sample_images().items():
        reference = len(encode(pixels, 6))
        for level in args.levels:
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                data = encode(pixels, level)
                times.append(time.perf_counter() - start)
            print(
                f"| {name} | {level} | {statistics.median(times) * 1e3:.1f} | {len(data) / 1024:.0f} "
                f"| {len(data) / reference:.2f} |"
            )


if __name__ == "__main__":
    main()
