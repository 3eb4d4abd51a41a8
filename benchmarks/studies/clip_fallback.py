"""How many faces of a clip the irreversible fallback hides, and whether the clip recovers.

    python -m benchmarks.studies.clip_fallback --detector-weights DIR [--detectors NAMES] [CLIP ...]

Each clip (default: the clips the tests synthesize, `fixtures.clips`: pans over
tests/data's group photos) goes through ``anonymize_video`` with the default detectors
(their low-confidence band on, as the commands run) and the test double of a model
(`fixtures.invertible_double`: no trained model needed; detection, tracking and the
fallback are the product's), then through ``recover_video`` from its sidecar. Per clip:
frames, tracks, faces anonymized, faces hidden by the fallback and their share of all
faces handled, whether the sidecar passed recovery's checks, and the seconds of both runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from dbaf_jax.core.errors import DbafError
from dbaf_jax.inference.anonymizer import load_photo_faces
from dbaf_jax.inference.run import Run
from dbaf_jax.storage import keys
from dbaf_jax.video import runner
from dbaf_jax.video.settings import ClipRunSettings
from fixtures.clips import pan_frames, write_clip
from fixtures.invertible_double import InvertibleDouble

PASSWORD = "benchmark password"
# (photo of tests/data, frames, travel): the video tests' pan and wider ones over crowds.
SYNTHESIZED = (
    ("office3.jpg", 12, 0.5),
    ("office1.jpg", 24, 1.0),
    ("office4.jpg", 24, 1.0),
    ("office5.jpg", 24, 1.0),
)


def synthesized(work: Path) -> list[Path]:
    return [
        write_clip(
            work / f"pan_{photo.split('.')[0]}.mp4",
            pan_frames(frames, photo, travel=travel),
            audio_streams=0,
        )
        for photo, frames, travel in SYNTHESIZED
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("clips", nargs="*", type=Path, help="clips; default the synthesized ones")
    parser.add_argument(
        "--detector-weights",
        required=True,
        help="the folder holding each detector's weights (mtcnn/: python -m convert.mtcnn --out DIR)",
    )
    parser.add_argument("--detectors", help="as the commands take it; default theirs")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    double = InvertibleDouble(256)
    faces = load_photo_faces(double, args.detector_weights, detectors=args.detectors)
    undo = load_photo_faces(
        double, args.detector_weights, detectors=args.detectors, recovering=True
    )
    settings = ClipRunSettings(batch_size=args.batch_size)
    record = keys.KeyRecord(salt="5e" * keys.SALT_BYTES)
    anonymize = Run("anonymize", double, faces, PASSWORD, record, settings=settings)
    recover = Run("recover", double, undo, PASSWORD)
    print(f"detectors: {faces.detector.name}")
    print(
        "| clip | frames | tracks | faces anonymized | hidden by the fallback | share hidden "
        "| recovers | anonymize s | recover s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    totals = [0, 0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for source in args.clips or synthesized(work):
            target = work / f"anon_{source.stem}.mp4"
            start = time.perf_counter()
            try:
                report = runner.anonymize_video(anonymize, source, target)
            except DbafError as err:
                print(f"| {source.name} | refused: {err} |")
                continue
            anonymize_s = time.perf_counter() - start
            start = time.perf_counter()
            try:
                runner.recover_video(recover, target, work / f"rec_{source.stem}.mp4")
                recovers = "yes"
            except DbafError as err:
                recovers = f"no: {str(err)[:80]}"
            recover_s = time.perf_counter() - start
            handled = report.faces + report.hidden
            totals[0] += report.hidden
            totals[1] += handled
            print(
                f"| {source.name} | {report.frames} | {report.tracks} | {report.faces} | {report.hidden} "
                f"| {report.hidden / max(handled, 1):.1%} | {recovers} | {anonymize_s:.1f} | {recover_s:.1f} |"
            )
    print(f"all clips: {totals[0]} of {totals[1]} faces hidden by the fallback")


if __name__ == "__main__":
    main()
