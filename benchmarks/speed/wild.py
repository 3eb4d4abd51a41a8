"""Photos in the wild: photos/s and where the time goes, for 1080p photos with 1 and 5 faces.

    python -m benchmarks.speed.wild [--model DIR] [--faces 1 5] [--repeats 3]

Each photo is a 1920x1080 canvas holding N copies of the test portrait (jf.jpg) side
by side. The stages are the photo path's own (`dbaf_jax.faces.photos.PhotoFaces` and
`FaceAnonymizer`): detection (MTCNN and the alignment transforms), alignment (warping
the aligned crops), the model (anonymizing the crops, one key per face) and paste-back
(masks and blending). Each is the median over ``--repeats`` runs after a warm-up run
that compiles. With --model, a converted DBAF model directory holding ``mtcnn/`` runs;
without, the tiny random model of `benchmarks.common.models` (reduced widths) with the real
MTCNN (converted from facenet-pytorch's bundled files), which measures detection,
alignment and paste-back at full cost and the model at a fraction of it. The same
command runs unchanged on a GPU.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from PIL import Image

from benchmarks.common.models import model_parser, photo_run
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.storage import keys
from fixtures import DATA

PORTRAIT = DATA / "jf.jpg"
WIDTH, HEIGHT = 1920, 1080
STAGES = ("detection", "alignment", "model", "paste-back")


def photo_with_faces(count: int) -> np.ndarray:
    """A (1080, 1920, 3) uint8 photo with ``count`` copies of the portrait side by side."""
    with Image.open(PORTRAIT) as img:
        portrait = img.convert("RGB")
    width = min(WIDTH // count, 600)
    portrait = portrait.resize(
        (width, round(portrait.height * width / portrait.width)), Image.BICUBIC
    )
    canvas = Image.new("RGB", (WIDTH, HEIGHT), (96, 110, 120))
    top = (HEIGHT - portrait.height) // 2
    for i in range(count):
        canvas.paste(portrait, (i * (WIDTH // count) + (WIDTH // count - width) // 2, top))
    return np.asarray(canvas)


def stage_seconds(
    anonymizer: FaceAnonymizer, faces, photo: np.ndarray, seed: bytes
) -> tuple[dict[str, float], int]:
    """Seconds per stage for one photo, and the number of faces anonymized."""
    times = {}
    start = time.perf_counter()
    found = faces.find(photo)
    times["detection"] = time.perf_counter() - start
    start = time.perf_counter()
    crops = faces.crops(photo, found.faces)
    times["alignment"] = time.perf_counter() - start
    start = time.perf_counter()
    anonymized, _ = anonymizer.anonymize(
        crops, anonymizer.face_keys(seed, [f.index for f in found.faces])
    )
    times["model"] = time.perf_counter() - start  # anonymize returns host arrays: synchronised
    start = time.perf_counter()
    faces.paste(photo, found.faces, anonymized, faces.masks(crops, anonymized))
    times["paste-back"] = time.perf_counter() - start
    return times, len(found.faces)


def main() -> None:
    parser = model_parser(__doc__)
    parser.add_argument("--faces", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-face-size", type=float, default=50.0)
    args = parser.parse_args()
    with photo_run(args.model, min_face_size=args.min_face_size) as (_, model, anonymizer, faces):
        seed = keys.derive_seed("benchmark", keys.KeyRecord(salt="00" * keys.SALT_BYTES, n=2**10))
        print(
            f"model {model} ({'given' if args.model else 'tiny, random weights'}), {WIDTH}x{HEIGHT} photos"
        )
        print("| faces | photos/s | " + " | ".join(f"{s} s" for s in STAGES) + " |")
        print("|---" * (len(STAGES) + 2) + "|")
        for count in args.faces:
            photo = photo_with_faces(count)
            stage_seconds(anonymizer, faces, photo, seed)  # warm-up: compiles
            runs = [stage_seconds(anonymizer, faces, photo, seed) for _ in range(args.repeats)]
            found = {n for _, n in runs}
            medians = {s: statistics.median(t[s] for t, _ in runs) for s in STAGES}
            row = " | ".join(f"{medians[s]:.3f}" for s in STAGES)
            print(f"| {count} (found {sorted(found)}) | {1 / sum(medians.values()):.3g} | {row} |")


if __name__ == "__main__":
    main()
