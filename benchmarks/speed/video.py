"""Video figures (docs/video.md): temporal consistency, recovery PSNR, frames/s.

    python -m benchmarks.speed.video [--model DIR] [--frames 48] [--smooth 0 2] [--workdir DIR]

A test clip (tests/video_clips.py: a slow pan and zoom over tests/data/office3.jpg,
320x240, 12 fps, nearly lossless) goes through ``anonymize_video`` (once per
``--smooth`` sigma) and ``recover_video``, each timed end to end (files in, files out,
compilation included: the first command compiles, later ones load the compilation
cache). Per run:

- flicker: the mean absolute difference (8-bit levels) of consecutive frames over the
  pixels where a face's box mask is 1 in both, for the anonymized clip and for the
  original clip over the same pixels; a stable anonymization stays near the original's;
- recovery PSNR (dB) per frame over the faces' pixels, against the original clip
  (mean, minimum);
- identity spread along tracks (with dlib, a dependency): each frame's face,
  cropped at its track's transform, described by dlib's held-out recognizer; per track
  the mean distance of its frames' descriptors to the track's mean descriptor, averaged
  over tracks, for the anonymized and the original clip. A person who keeps one
  pseudo-identity stays near the original's spread, far under dlib's 0.6 threshold.

Without --model a tiny random model (random weights) runs with the real MTCNN: its
faces are not faces, so only the flicker of the crop's placement, the speed and the
mechanics mean anything; its recovery PSNR is not a quality figure.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from dbaf_jax.commands import anonymize_video, recover_video
from dbaf_jax.core import compilation_cache
from dbaf_jax.evaluation import dlib_recognition
from dbaf_jax.faces import align, paste
from dbaf_jax.video import clip, sidecar
from fixtures.clips import pan_frames, write_clip

PASSWORD = "benchmark password"


def decoded(path: Path) -> np.ndarray:
    info = clip.probe(path)
    return np.stack([f.pixels.astype(np.float64) for f in clip.frames(path, info)])


def face_masks(side: sidecar.Sidecar) -> np.ndarray:
    """(F, H, W) booleans: pixels where some face's box mask is 1."""
    masks = np.zeros((side.frames, *side.shape), bool)
    box, ones = paste.box_mask(side.size), np.ones((side.size, side.size, 3), np.float32)
    for _, first, stack in side.tracks:
        for offset, transform in enumerate(stack):
            masks[first + offset] |= (
                paste.paste(np.zeros((*side.shape, 3), np.uint8), ones, box, transform)[..., 0]
                >= 254
            )
    return masks


def flicker(frames: np.ndarray, masks: np.ndarray) -> float:
    both = masks[1:] & masks[:-1]
    return float(np.abs(np.diff(frames, axis=0)).mean(axis=-1)[both].mean())


def psnr_per_frame(a: np.ndarray, b: np.ndarray, masks: np.ndarray) -> list[float]:
    out = []
    for x, y, m in zip(a, b, masks):
        if m.any():
            mse = np.mean((x - y)[m] ** 2)
            out.append(float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse)))
    return out


def track_spread(frames: np.ndarray, side: sidecar.Sidecar, recognizer) -> float:
    """Mean over tracks of the mean dlib distance of a track's faces to its mean descriptor."""
    spreads = []
    for _, first, stack in side.tracks:
        crops = np.stack(
            [
                align.crop(frames[first + i].astype(np.uint8), t, side.size)
                for i, t in enumerate(stack)
            ]
        )
        descriptors = recognizer(crops.astype(np.float32) / 127.5 - 1)
        spreads.append(float(np.linalg.norm(descriptors - descriptors.mean(axis=0), axis=1).mean()))
    return float(np.mean(spreads)) if spreads else float("nan")


def timed(command, argv: Sequence[str]) -> float:
    start = time.perf_counter()
    command.main(list(argv))
    return time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", help="DBAF model directory with mtcnn/ (default: a tiny random model)"
    )
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--smooth", type=float, nargs="+", default=[0.0, 2.0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workdir", help="keep the files here (default: a temporary folder)")
    args = parser.parse_args(argv)
    compilation_cache.enable()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.model:
            model = Path(args.model)
        else:
            from benchmarks.common.models import tiny_model

            model = tiny_model(work / "tiny")
        source = write_clip(work / "pan.mp4", pan_frames(args.frames, travel=0.5))
        (work / "pw.txt").write_text(PASSWORD + "\n", encoding="utf-8")
        common = [
            "--model",
            str(model),
            "--password-file",
            str(work / "pw.txt"),
            "--batch-size",
            str(args.batch_size),
            "--overwrite",
        ]
        original = decoded(source)
        print(f"clip: {args.frames} frames 320x240; model: {model}")
        recognizer = (
            dlib_recognition.DlibRecognizer() if dlib_recognition.unavailable() is None else None
        )
        print(
            "smooth | anonymize s (frames/s) | recover s (frames/s) | tracks | flicker ours / original | recovery PSNR mean / min"
            " | dlib identity spread along tracks, ours / original"
        )
        for sigma in args.smooth:
            anon, back = work / f"anon{sigma:g}.mp4", work / f"back{sigma:g}.mkv"
            seconds = timed(
                anonymize_video, [*common, "--smooth", str(sigma), str(source), str(anon)]
            )
            # --untrained-mode: the tiny and converted models record latent recovery; clips recover from the image
            back_seconds = timed(recover_video, [*common, "--untrained-mode", str(anon), str(back)])
            side = sidecar.read(sidecar.path_for(anon))
            masks = face_masks(side)
            ours, recovered = decoded(anon), decoded(back)
            psnrs = psnr_per_frame(recovered, original, masks)
            spread = (
                f"{track_spread(ours, side, recognizer):.3f} / {track_spread(original, side, recognizer):.3f}"
                if recognizer is not None
                else f"not measured ({dlib_recognition.unavailable()})"
            )
            print(
                f"{sigma:g} | {seconds:.1f} ({args.frames / seconds:.2f}) | {back_seconds:.1f} ({args.frames / back_seconds:.2f}) | "
                f"{len(side.tracks)} | {flicker(ours, masks):.2f} / {flicker(original, masks):.2f} | "
                f"{np.mean(psnrs):.1f} / {np.min(psnrs):.1f} | {spread}"
            )


if __name__ == "__main__":
    main()
