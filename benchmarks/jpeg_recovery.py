"""Recovering photos whose anonymized copy was re-encoded as JPEG and lost its metadata.

    python -m benchmarks.jpeg_recovery [--model DIR] [--detector DIR] [--parser DIR]
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
import dataclasses
import io
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from convert.common import run
from convert.mtcnn import main as convert_mtcnn
from dbaf_jax import compilation_cache, images, metadata
from dbaf_jax.commands import anonymize, new_key, recover
from dbaf_jax.faces import align, paste, photos
from dbaf_jax.faces.detectors import mtcnn
from dbaf_jax.faces.detectors.base import Detector
from dbaf_jax.inference.anonymizer import FaceAnonymizer

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
PHOTOS = tuple(DATA / name for name in ("office3.jpg", "office5.jpg", "jf.jpg"))
CROP = 256  # displacements are in pixels of a 256 x 256 crop, whatever the model's input size
CORNERS = np.array([[-0.5, -0.5], [CROP - 0.5, -0.5], [-0.5, CROP - 0.5], [CROP - 0.5, CROP - 0.5]])
PNG = None  # the lossless encoding's "quality"


def reencode(photo: np.ndarray, quality: int | None) -> np.ndarray:
    """``photo`` (H, W, 3) uint8 after a PNG (``quality`` None: unchanged) or JPEG round trip."""
    if quality is PNG:
        return photo.copy()
    buffer = io.BytesIO()
    Image.fromarray(photo).save(buffer, format="JPEG", quality=quality)
    with Image.open(buffer) as img:
        return np.asarray(img.convert("RGB"))


def encoding_name(quality: int | None) -> str:
    return "png" if quality is PNG else f"jpeg{quality}"


def at_crop_size(face: photos.AlignedFace) -> np.ndarray:
    """The face's transform for a CROP x CROP crop."""
    return align.scaled(face.transform, CROP / face.size)


def corner_displacement(reference: photos.AlignedFace, other: photos.AlignedFace) -> np.ndarray:
    """(4,) distances, in CROP-crop pixels of ``reference``, between its crop's corners
    and ``other``'s crop corners."""
    moved = align.apply(
        at_crop_size(reference), align.apply(align.invert(at_crop_size(other)), CORNERS)
    )
    return np.hypot(*(moved - CORNERS).T)


def crop_centre(face: photos.AlignedFace) -> np.ndarray:
    """The photo (x, y) of the face's crop centre."""
    return align.apply(align.invert(at_crop_size(face)), [(CROP - 1) / 2, (CROP - 1) / 2])


def pair_faces(
    reference: Sequence[photos.AlignedFace], found: Sequence[photos.AlignedFace]
) -> list[photos.AlignedFace | None]:
    """For each reference face, the found face whose crop centre is nearest, if that is
    within a quarter of the reference crop's side (else None)."""
    pairs = []
    for face in reference:
        reach = (
            CROP / 4 / np.hypot(*at_crop_size(face)[:, 0])
        )  # a quarter of the crop's side, in photo pixels
        distances = [np.hypot(*(crop_centre(other) - crop_centre(face))) for other in found]
        nearest = int(np.argmin(distances)) if distances else None
        pairs.append(
            found[nearest] if nearest is not None and distances[nearest] <= reach else None
        )
    return pairs


@dataclasses.dataclass
class Comparison:
    """Faces found again, against a reference set of faces."""

    reference: int  # faces in the reference
    found: int  # faces found in the other
    in_order: int  # reference faces paired with a found face of the same index
    displacement: np.ndarray  # (P, 4) corner displacements of the P paired faces

    def row(self) -> str:
        moved = (
            f"{self.displacement.max():.2f} / {self.displacement.mean():.2f}"
            if self.displacement.size
            else "-"
        )
        return f"{self.found} / {self.reference} | {self.in_order} / {self.reference} | {moved}"


def compare(
    reference: Sequence[photos.AlignedFace], found: Sequence[photos.AlignedFace]
) -> Comparison:
    pairs = pair_faces(reference, found)
    paired = [(face, other) for face, other in zip(reference, pairs) if other is not None]
    displacement = np.array([corner_displacement(face, other) for face, other in paired]).reshape(
        -1, 4
    )
    in_order = sum(face.index == other.index for face, other in paired)
    return Comparison(len(reference), len(found), in_order, displacement)


def face_region(face: photos.AlignedFace, shape: Sequence[int]) -> np.ndarray:
    """(H, W) bool: the photo pixels where the face's box mask is 1."""
    mask = paste.box_mask(face.size)[..., None]
    return align.warp(mask, face.transform, tuple(shape[:2]), fill=0.0)[..., 0] > 0.999


def psnr(a: np.ndarray, b: np.ndarray, region: np.ndarray) -> float:
    """PSNR (dB, 0..255 pixels) of two images over a boolean region; inf where equal."""
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64))[region] ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


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
            from benchmarks.wild import (
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
