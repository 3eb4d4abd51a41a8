"""One machine against ``--ray``: the same folder of group photos anonymized by the command
on one machine and on a local Ray cluster with 1 and 2 CPU model actors (on a GPU
machine, also one GPU actor per GPU).

    python -m benchmarks.speed.distributed [--model DIR | --width tiny|full] [--detector DIR]
        [--copies 2] [--batch-size N] [--actors 1 2] [--gpu]

Each configuration is the command itself (`anonymize.main`, in this process) run twice
into fresh folders; the table gives the second run (the first compiles, or loads from
the compilation cache, which every Ray worker of this machine shares). A Ray run starts
its actors afresh (new processes that load the model and its compiled programs): that is
part of every Ray run, and its own column. Photos: the tests' group photos (office1-5),
``--copies`` times each. Model: as `benchmarks.speed.anonymize_folder` (``--model``, else a
random model of ``--width`` with MTCNN's and CenterFace's real weights).

Where the time goes: for one machine, each stage of the command timed alone over every
photo in turn: decoding, detection, alignment, the model (on the command's padded
batches across photos), paste-back, writing. For Ray, the run's own record
(`RayRuns.timings`): the photos' part of the run (after the driver's planning and
model load), until the first photo came back, the longest actor start (a new process
loading the model, the finder and their programs from the cache), the seconds the
detection tasks spent (decoding and detection, summed over tasks), the seconds the
model actors spent on their batches (decoding again, crops, the model, paste-back, PNG
writing; summed over actors), and Ray's overhead: the photos' part beyond the actor
start and the actors' share of the work (scheduling, transfers, the driver's moves into
place, actors waiting for work or for each other).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import ray

from benchmarks.common import models
from benchmarks.speed.anonymize_folder import megapixels
from dbaf_jax.commands import anonymize
from dbaf_jax.core import compilation_cache
from dbaf_jax.distributed import runs
from dbaf_jax.inference.anonymizer import FaceAnonymizer, default_batch_size, load_photo_faces
from dbaf_jax.inference.programs import pad_batch
from dbaf_jax.storage import images, keys
from fixtures import DATA

GROUP_PHOTOS = [f"office{n}.jpg" for n in range(1, 6)]
TEST_PHOTOS = DATA


def group_folder(folder: Path, copies: int) -> list[Path]:
    folder.mkdir(parents=True)
    written = []
    for copy in range(copies):
        for name in GROUP_PHOTOS:
            target = folder / f"{Path(name).stem}_{copy}.jpg"
            shutil.copyfile(TEST_PHOTOS / name, target)
            written.append(target)
    return written


@contextlib.contextmanager
def kept_runs() -> Iterator[list]:
    """The `RayRuns` the command makes while in the block (for their `timings`)."""
    made: list = []
    join = runs.join

    def keeping(*args):
        made.append(join(*args))
        return made[-1]

    runs.join = keeping
    try:
        yield made
    finally:
        runs.join = join


def one_machine_stages(
    model: Path, photos: list[Path], batch_size: int | None, work: Path
) -> dict[str, float]:
    """Seconds of each stage of the one-machine run over every photo, each stage timed
    alone and in turn, the model on the command's padded batches across photos (after
    one batch that compiles)."""
    anonymizer = FaceAnonymizer(model)
    faces = load_photo_faces(anonymizer)
    seed = keys.derive_seed("benchmark password", keys.new_key_record())
    size = anonymizer.padded_size(batch_size or default_batch_size())
    times: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(name: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        times[name] = time.perf_counter() - start

    with stage("decoding"):
        decoded = [images.read_photo(path) for path in photos]
    faces.find(decoded[0])  # compiles the detector's first shapes
    with stage("detection"):
        found = [faces.find(photo) for photo in decoded]
    with stage("alignment"):
        crops = [faces.crops(photo, f.faces) for photo, f in zip(decoded, found)]
    latents = np.concatenate(
        [anonymizer.face_latents(seed, [face.index for face in f.faces]) for f in found if f.faces]
    )
    every = np.concatenate([c for c in crops if len(c)])
    np.asarray(
        anonymizer.anonymize_faces(pad_batch(every[:size], size), pad_batch(latents[:size], size))
    )
    with stage("model"):
        results = np.concatenate(
            [
                np.asarray(
                    anonymizer.anonymize_faces(
                        pad_batch(every[i : i + size], size), pad_batch(latents[i : i + size], size)
                    )
                )[: len(every[i : i + size])]
                for i in range(0, len(every), size)
            ]
        )
    with stage("paste-back"):
        start, pasted = 0, []
        for photo, f, crop in zip(decoded, found, crops):
            done = results[start : start + len(f.faces)]
            start += len(f.faces)
            pasted.append(
                faces.paste(photo, f.faces, done, faces.masks(crop, done)) if f.faces else photo
            )
    with stage("writing"):
        for number, photo in enumerate(pasted):
            images.write_png(work / f"stage{number}.png", photo, {})
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", help="DBAF model directory with mtcnn/ and centerface/")
    parser.add_argument("--width", choices=sorted(models.WIDTHS), default="tiny")
    parser.add_argument("--detector", help="a converted mtcnn directory")
    parser.add_argument("--copies", type=int, default=2, help="copies of the five group photos")
    parser.add_argument("--batch-size", type=int, help="the command's --batch-size")
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2], help="CPU actors")
    parser.add_argument("--gpu", action="store_true", help="also one GPU actor per GPU")
    args = parser.parse_args(argv)
    ray.init(include_dashboard=False, log_to_driver=False)  # before JAX computes here
    compilation_cache.enable()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model, described = models.benchmark_model(args.model, args.width, args.detector, work)
        photos = group_folder(work / "photos", args.copies)
        password = work / "password.txt"
        password.write_text("benchmark password\n")
        command = ["--model", str(model), "--password-file", str(password)]
        command += ["--batch-size", str(args.batch_size)] if args.batch_size else []
        configurations = [("one machine", [])]
        configurations += [
            (f"--ray, {n} CPU actor(s)", ["--ray", "--ray-actors", str(n)]) for n in args.actors
        ]
        if args.gpu:
            configurations.append(("--ray, one GPU actor per GPU", ["--ray"]))
        rows = []
        for name, extra in configurations:
            seen = {}
            for attempt in range(2):
                out = work / f"out_{len(rows)}_{attempt}"
                with kept_runs() as made:
                    start = time.perf_counter()
                    report = anonymize.main([*command, *extra, str(work / "photos"), str(out)])
                    seen = {
                        "seconds": time.perf_counter() - start,
                        "faces": report.faces,
                        "timings": made[0].timings if made and made[0] else None,
                    }
                shutil.rmtree(out)
                print(
                    f"{name}, run {attempt + 1}: {seen['seconds']:.1f} s {seen['timings'] or ''}",
                    file=sys.stderr,
                )
            rows.append((name, seen))
        stages = one_machine_stages(model, photos, args.batch_size, work)
        size = megapixels(photos)

    print(
        f"model {model.name} ({described}); {len(photos)} photos ({size:.1f} megapixels), "
        f"{rows[0][1]['faces']} faces anonymized per run; the second of two runs\n"
    )
    print(
        "| run | s | photos/s | faces/s | photos' part s | until the first photo s | actor start s | "
        "detection tasks s | model actors s | Ray's overhead s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, seen in rows:
        seconds, timings = seen["seconds"], seen["timings"]
        extra = "| | | | | | |"
        if timings is not None:
            extra = (
                f"| {timings.photos:.1f} | {timings.first_answer:.1f} | {timings.actor_start:.1f} "
                f"| {timings.detection:.1f} | {timings.actors:.1f} | {timings.overhead:.1f} |"
            )
        print(
            f"| {name} | {seconds:.1f} | {len(photos) / seconds:.2f} | {seen['faces'] / seconds:.2f} {extra}"
        )
    print("\none machine, each stage alone over every photo (s):\n")
    print("| " + " | ".join(stages) + " |")
    print("|" + "---|" * len(stages))
    print("| " + " | ".join(f"{seconds:.1f}" for seconds in stages.values()) + " |")


if __name__ == "__main__":
    main()
