"""Recovering photos whose anonymized copy was re-encoded as JPEG and lost its metadata.

    python -m benchmarks.studies.jpeg_recovery [--model DIR] [--detector DIR] [--parser DIR]
        [--password PW] [--qualities 95 75] [--min-face-size 50] [--workdir DIR] [PHOTO ...]

Photos default to tests/data's office3.jpg, office5.jpg and jf.jpg. Two parts:

1. Detection (MTCNN only): each photo against its JPEG re-encodings. Are the same faces
   found, in the same left-to-right order (which selects each face's key), and how far
   do their alignment transforms move? Faces pair up by nearest crop centre; a pair is
   "in order" when both have the same index. Displacement is that of the 256x256 crop's
   four corners, in crop pixels: where the re-encoding's crop corner lies in the
   original's crop.
2. The round trip, through the commands: ``dbaf_jax.commands.anonymize --key-file`` on the
   photos; each anonymized photo re-encoded as PNG (lossless) or JPEG at each quality
   (PIL, its default 4:2:0 chroma subsampling), metadata dropped; ``dbaf_jax.commands.recover
   --key-file``, which finds the faces again by detection. The same re-encoded pixels
   are also recovered with the anonymized output's metadata put back ("recorded"), which
   separates what the model loses to JPEG from what re-detection loses. Per photo and
   encoding: the PSNR of the re-encoded anonymized photo against the anonymized one
   (what JPEG did to the model's input), faces re-detected / anonymized, pairs in
   order, corner displacement against the anonymized faces, and the recovery PSNR
   against the original photo and against the lossless PNG round trip of the same
   kind. PSNRs are per face (in index order, dB) over the face's region: the photo
   pixels where its box mask is 1.

With --model, a DBAF model directory (and its ``mtcnn/`` unless --detector) runs; without,
a tiny random model (reduced width, random weights) with the real MTCNN converted from
facenet-pytorch's bundled files: its outputs are not faces, so MTCNN does not re-detect
them, and its recovery PSNRs say only how much JPEG changes a random model's result.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from convert.common import run
from convert.mtcnn import main as convert_mtcnn
from dbaf_jax.commands import anonymize, new_key, recover
from dbaf_jax.core import compilation_cache
from dbaf_jax.faces import metadata, photos
from dbaf_jax.faces.detectors import mtcnn
from dbaf_jax.faces.detectors.base import Detector
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.storage import images
from fixtures import DATA
from fixtures.refound import CROP, PNG, compare, face_region, psnr, reencode

PHOTOS = tuple(DATA / name for name in ("office3.jpg", "office5.jpg", "jf.jpg"))


def encoding_name(quality: int | None) -> str:
    return "png" if quality is PNG else f"jpeg{quality}"


def detection_table(
    detector: Detector, sources: Sequence[Path], qualities: Sequence[int], min_face_size: float
) -> None:
    """Part 1: each photo's faces against those of its JPEG re-encodings."""
    faces = photos.PhotoFaces(detector, CROP, None, min_face_size)
    print(
        "| photo | encoding | faces found / in the original | in order | corner displacement max / mean (crop px) |"
    )
    print("|---|---|---|---|---|")
    for source in sources:
        photo = images.read_photo(source)
        original = faces.find(photo).faces
        for quality in qualities:
            print(
                f"| {source.name} | {encoding_name(quality)} | {compare(original, faces.find(reencode(photo, quality)).faces).row()} |"
            )


def psnrs(photo: np.ndarray, reference: np.ndarray, faces: Sequence[photos.AlignedFace]) -> str:
    return (
        " / ".join(
            f"{psnr(photo, reference, face_region(face, photo.shape)):.1f}" for face in faces
        )
        or "-"
    )


def run_command(command, args: Sequence[str]) -> None:
    report = command.main(list(args))
    if report.skipped:
        raise RuntimeError(f"{command.__name__} skipped: {[s.reason for s in report.skipped]}")


def round_trip_table(
    args: argparse.Namespace, model: Path, sources: Sequence[Path], work: Path
) -> None:
    """Part 2: anonymize, re-encode, recover (by detection and at the recorded places)."""
    size = FaceAnonymizer(model).input_size
    (work / "password.txt").write_text(args.password + "\n", encoding="utf-8")
    new_key.main(["--out", str(work / "me.key")])
    common = [
        "--model",
        str(model),
        "--password-file",
        str(work / "password.txt"),
        "--key-file",
        str(work / "me.key"),
        "--min-face-size",
        str(args.min_face_size),
    ]
    common += ["--detector-weights", str(Path(args.detector).parent)] if args.detector else []
    common += ["--parser", args.parser] if args.parser else []
    (work / "photos").mkdir()
    for source in sources:
        shutil.copyfile(source, work / "photos" / source.name)
    run_command(anonymize, [*common, str(work / "photos"), str(work / "anonymized")])

    encodings = [PNG, *args.qualities]
    for quality in encodings:
        name = encoding_name(quality)
        for source in sources:
            anonymized = work / "anonymized" / f"{source.stem}.png"
            pixels = reencode(images.read_photo(anonymized), quality)
            # Detected: the file as shared (no metadata). Recorded: the same pixels with the metadata put back.
            (work / f"{name}_detected").mkdir(exist_ok=True)
            Image.fromarray(pixels).save(work / f"{name}_detected" / f"{source.stem}.png")
            images.write_png(
                work / f"{name}_recorded" / f"{source.stem}.png",
                pixels,
                images.read_metadata(anonymized),
            )
        for kind in ("detected", "recorded"):
            # The model may record latent recovery; photos recover from the image.
            run_command(
                recover,
                [
                    *common,
                    "--untrained-mode",
                    str(work / f"{name}_{kind}"),
                    str(work / f"recovered_{name}_{kind}"),
                ],
            )

    print(
        "| photo | encoding | anonymized vs PNG | re-detected / anonymized | in order | corner displacement max / mean (crop px) "
        "| detected: recovered vs original | vs PNG | recorded: recovered vs original | vs PNG |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for source in sources:
        original = images.read_photo(source)
        anonymized_path = work / "anonymized" / f"{source.stem}.png"
        faces = metadata.recorded_faces(images.read_metadata(anonymized_path), original.shape, size)
        anonymized = images.read_photo(anonymized_path)
        recovered = {
            (quality, kind): images.read_photo(
                work / f"recovered_{encoding_name(quality)}_{kind}" / f"{source.stem}.png"
            )
            for quality in encodings
            for kind in ("detected", "recorded")
        }
        for quality in encodings:
            path = work / f"recovered_{encoding_name(quality)}_detected" / f"{source.stem}.png"
            redetected = metadata.recorded_faces(images.read_metadata(path), original.shape, size)
            shared = images.read_photo(
                work / f"{encoding_name(quality)}_detected" / f"{source.stem}.png"
            )
            cells = [psnrs(shared, anonymized, faces), compare(faces, redetected).row()]
            for kind in ("detected", "recorded"):
                cells += [
                    psnrs(recovered[quality, kind], original, faces),
                    psnrs(recovered[quality, kind], recovered[PNG, kind], faces),
                ]
            print(f"| {source.name} | {encoding_name(quality)} | " + " | ".join(cells) + " |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("photos", nargs="*", type=Path, default=list(PHOTOS))
    parser.add_argument(
        "--model", help="DBAF model directory (default: a tiny random model, random weights)"
    )
    parser.add_argument("--detector", help="MTCNN directory (default MODEL/mtcnn)")
    parser.add_argument("--parser", help="BiSeNet directory for soft masks (default the box mask)")
    parser.add_argument("--password", default="jpeg benchmark")
    parser.add_argument("--qualities", type=int, nargs="+", default=[95, 75])
    parser.add_argument("--min-face-size", type=float, default=50.0)
    parser.add_argument(
        "--detection-only", action="store_true", help="part 1 only (no DBAF model needed)"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep every intermediate photo here (default a temporary folder)",
    )
    args = parser.parse_args(argv)
    compilation_cache.enable()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if args.model:
            model = Path(args.model)
        elif args.detection_only:
            model = work / "detector"
            run(convert_mtcnn, ["--out", str(model)])
        else:
            from benchmarks.common.models import (
                tiny_model,  # builds a tiny random model with the real MTCNN
            )

            model = tiny_model(work / "tiny")
        detector = Path(args.detector) if args.detector else model / "mtcnn"
        described = (
            "given" if args.model else "none" if args.detection_only else "tiny, random weights"
        )
        print(f"model {model} ({described}), detector {detector}")
        print("\nDetection: the photos re-encoded\n")
        detection_table(
            mtcnn.MTCNN.load(detector),
            args.photos,
            [PNG, *args.qualities],
            args.min_face_size,
        )
        if not args.detection_only:
            print(
                "\nRound trip: anonymize --key-file, re-encode, recover --key-file (PSNR per face, dB)\n"
            )
            round_trip_table(args, model, args.photos, work)


if __name__ == "__main__":
    main()
