"""Peak memory and seconds of one photo's anonymization against its megapixels.

    python -m benchmarks.speed.photo_memory [--model DIR] [--megapixels 1 12 24 50 100]
        [--detectors NAMES] [--out FILE.json]

Each photo is a synthetic JPEG (`fixtures.labelled.labelled_canvas`): rows of the hand-labelled test
photos (tests/data/faces_labelled.json) at several heights, so that detection has real
faces to find at several scales (from 6 to about 700 pixels), wherever the tiles' seams
fall. Each size runs in a fresh process (`measure_one`): the model and the detectors
are loaded and a small photo anonymized first (the programs compiled, the model's own
memory in place); then the large photo goes through the folder command's path
(`anonymize_photo_folder`: decode, detect, align, model, paste, write), and its cost is
the process's peak resident memory above what it held before (VmHWM, reset through
/proc/self/clear_refs), in bytes a pixel too. The labelled faces found (anonymized or
hidden: a face's centre inside its label) are counted. Without --model, the tiny random
model of `benchmarks.common.models` runs: the detection, decode, paste and encode are at full
cost, the model at a fraction (its own memory is not what this measures).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from benchmarks.common import models
from dbaf_jax.core import compilation_cache
from dbaf_jax.faces import align
from dbaf_jax.inference.anonymizer import FaceAnonymizer, load_photo_faces
from dbaf_jax.inference.photo_folders import anonymize_photo_folder
from dbaf_jax.inference.run import Run
from fixtures import DATA
from fixtures.labelled import labelled_canvas

MEGAPIXELS = (1, 12, 24, 50, 100)
WARM_UP = "office3.jpg"


def peak_rss() -> tuple[int, int]:
    """(current, peak) resident bytes of this process (Linux /proc)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) << 10, int(fields["VmHWM"].split()[0]) << 10


def reset_peak() -> None:
    """Sets the peak resident memory (VmHWM) back to the current (Linux)."""
    Path("/proc/self/clear_refs").write_text("5")


def labels_found(labels: np.ndarray, found, size: int) -> int:
    """How many labelled boxes hold the centre of a face anonymized (its crop's centre
    mapped back into the photo) or hidden (its box's centre)."""
    centres = [
        align.apply(align.invert(face.transform), np.array([size / 2 - 0.5, size / 2 - 0.5]))
        for face in found.faces
    ] + [np.array([(b[0] + b[2]) / 2, (b[1] + b[3]) / 2]) for b in found.to_hide]
    if not centres:
        return 0
    points = np.stack(centres)
    inside = (
        (points[None, :, 0] >= labels[:, None, 0])
        & (points[None, :, 0] <= labels[:, None, 2])
        & (points[None, :, 1] >= labels[:, None, 1])
        & (points[None, :, 1] <= labels[:, None, 3])
    )
    return int(inside.any(axis=1).sum())


def measure_one(
    photo: Path, labels_file: Path, model: Path, detectors: str | None, work: Path
) -> dict:
    """In this process: load, warm up on a small photo, then anonymize ``photo`` alone
    through `anonymize_photo_folder`; its peak memory above the warmed-up process."""
    compilation_cache.enable()
    anonymizer = FaceAnonymizer(model)
    faces = load_photo_faces(anonymizer, detectors=detectors)
    found = []
    find = faces.find
    faces.find = lambda pixels: found.append(find(pixels)) or found[-1]  # the run's own faces

    def run(folder: Path, out: Path):
        return anonymize_photo_folder(Run("anonymize", anonymizer, faces, "benchmark"), folder, out)

    warm = work / "warm"
    warm.mkdir()
    (warm / WARM_UP).write_bytes((DATA / WARM_UP).read_bytes())
    run(warm, work / "warm_out")
    found.clear()
    folder = work / "in"
    folder.mkdir()
    shutil.copyfile(photo, folder / photo.name)  # a link out of the folder is not followed
    before, _ = peak_rss()
    reset_peak()
    start = time.perf_counter()
    report = run(folder, work / "out")
    seconds = time.perf_counter() - start
    _, peak = peak_rss()
    if report.skipped or len(report.written) != 1:
        raise RuntimeError(f"{photo} was not anonymized: {report.skipped}")
    with Image.open(photo) as img:
        pixels = img.width * img.height
    labels = np.asarray(json.loads(labels_file.read_text()), np.float32).reshape(-1, 4)
    return {
        "megapixels": pixels / 1e6,
        "seconds": seconds,
        "before_gb": before / 1e9,
        "peak_gb": peak / 1e9,
        "above_gb": (peak - before) / 1e9,
        "bytes_per_pixel": (peak - before) / pixels,
        "faces": report.faces,
        "hidden": report.faces_hidden,
        "labelled": len(labels),
        "labelled_found": labels_found(labels, found[0], faces.size) if found else 0,
        "detectors": faces.detector.name,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", help="DBAF model directory with its detectors (default: a tiny random model)"
    )
    parser.add_argument("--megapixels", type=float, nargs="+", default=list(MEGAPIXELS))
    parser.add_argument("--detectors", help="as the commands' --detectors (default theirs)")
    parser.add_argument("--out", help="also write the rows as JSON here")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # PHOTO LABELS: a child's run
    args = parser.parse_args(argv)
    if args.one:
        with tempfile.TemporaryDirectory() as tmp:
            row = measure_one(
                Path(args.one[0]), Path(args.one[1]), Path(args.model), args.detectors, Path(tmp)
            )
        print(json.dumps(row))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model, about = models.benchmark_model(args.model, "tiny", None, work)
        print(f"model {model} ({about})")
        print(
            "| megapixels | seconds | peak above the loaded model | bytes a pixel "
            "| labelled faces found | faces anonymized + hidden | detectors |"
        )
        print("|---|---|---|---|---|---|---|")
        for megapixels in args.megapixels:
            pixels, labels = labelled_canvas(megapixels)
            photo = work / f"canvas_{megapixels:g}mp.jpg"
            Image.fromarray(pixels).save(photo, quality=92)
            labels_file = work / f"canvas_{megapixels:g}mp.json"
            labels_file.write_text(json.dumps(labels.tolist()))
            del pixels
            command = [sys.executable, "-m", "benchmarks.speed.photo_memory", "--model", str(model)]
            command += ["--one", str(photo), str(labels_file)]
            command += ["--detectors", args.detectors] if args.detectors else []
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"{megapixels:g} MP: the run failed:\n{done.stderr[-3000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            row["process_peak_gb"] = (
                resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss << 10
            ) / 1e9  # the largest child so far, model included
            rows.append(row)
            print(
                f"| {row['megapixels']:.1f} | {row['seconds']:.0f} | {row['above_gb']:.2f} GB "
                f"| {row['bytes_per_pixel']:.1f} | {row['labelled_found']} of {row['labelled']} "
                f"| {row['faces']} + {row['hidden']} | {row['detectors']} |",
                flush=True,
            )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
