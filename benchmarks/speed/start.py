"""Seconds from typing a command to its first photo: `python -m dbaf_jax.commands.anonymize`
on one photo with a full-width model directory, as a user starts it.

    python -m benchmarks.speed.start [--model DIR | --width full|tiny] [--detector-weights DIR]
        [--runs 2] [--photo FILE]

Each run is a fresh process (the interpreter, the imports, the model's load and checks,
the key's derivation, the detector), timed from its launch to the moment the command's
progress bar first shows the photo loop (``0/1``), then to its exit. The first run
fills the compilation cache (``DBAF_JAX_CACHE_DIR``, default the user's cache); the
later runs are the warm start issue 46 asks to be within 10 s. The model: ``--model
DIR`` as it is, else the random model of ``--width`` (`benchmarks.common.models`:
written once and kept, the detectors' weights from ``--detector-weights`` or converted
here). Prints one row per run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import models
from fixtures import DATA

LOOP_STARTED = b"0/1"  # the progress bar's first frame: the photo loop has begun


def timed_run(command: list[str]) -> tuple[float, float, int, str]:
    """(seconds to the photo loop, seconds to the exit, exit status, the last line of
    stderr) of ``command``, read from its stderr as it is written."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert process.stderr is not None
    seen, loop = b"", float("nan")
    while chunk := process.stderr.read1(4096):
        seen += chunk
        if loop != loop and LOOP_STARTED in seen:
            loop = time.perf_counter() - start
    status = process.wait()
    lines = seen.decode(errors="replace").replace("\r", "\n").strip().splitlines()
    return loop, time.perf_counter() - start, status, lines[-1] if lines else ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a model directory (default: the random --width model)")
    parser.add_argument("--width", choices=sorted(models.WIDTHS), default="full")
    parser.add_argument(
        "--detector-weights", help="a folder of converted detectors (centerface/, mtcnn/)"
    )
    parser.add_argument("--runs", type=int, default=2, help="runs, the first filling the cache")
    parser.add_argument("--photo", type=Path, default=DATA / "office2.jpg")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        built = time.perf_counter()
        model, described = models.benchmark_model(
            args.model, args.width, None, work, args.detector_weights
        )
        built = time.perf_counter() - built
        (work / "in").mkdir()
        (work / "in" / args.photo.name).write_bytes(args.photo.read_bytes())
        (work / "password.txt").write_text("start benchmark\n")
        print(f"model: {described} ({built:.1f} s to build or find); photo {args.photo.name}")
        print("| run | to the photo loop s | to the exit s | exit |")
        print("|---|---|---|---|")
        for run in range(args.runs):
            command = [
                sys.executable,
                "-m",
                "dbaf_jax.commands.anonymize",
                "--model",
                str(model),
                "--password-file",
                str(work / "password.txt"),
                str(work / "in"),
                str(work / f"out{run}"),
            ]
            loop, total, status, last = timed_run(command)
            print(f"| {run + 1} | {loop:.1f} | {total:.1f} | {status} |", flush=True)
            if status not in (0, 3):
                raise SystemExit(f"error: the command exited {status}: {last}")


if __name__ == "__main__":
    main()
