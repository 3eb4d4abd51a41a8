"""Recall and false alarms of each detector setting on the hand-labelled photos
(tests/data/faces_labelled.json), by face size, and its time per photo (docs/photos.md).

    python -m benchmarks.studies.detector_recall --detector-weights DIR [--settings NAME ...] [--repeats 1]
    python -m benchmarks.studies.detector_recall --detector-weights DIR --lost PHOTOS

DIR holds the converted detectors (``python -m convert.mtcnn --out DIR`` and
``python -m convert.centerface --out DIR`` write DIR/mtcnn and DIR/centerface).

A labelled face is *found*, *anonymized* or missed and a detection a *false alarm* as
`fixtures.labelled.score` counts them (the detector tests count them the same way). Faces
are counted by the width of their labelled box (`SIZES`). *Pixelated* counts the
detections of the low band (faces and false alarms: what the photo path hides
irreversibly). Each setting first runs once over the photos (compiling its programs),
then is timed over them ``--repeats`` times; seconds per photo are the mean over the
photos of the fastest run, and seconds at 1080p the fastest detection of office2.jpg
enlarged to 1920x1080. Printed as a markdown table, one row per setting.

``--lost PHOTOS``: every detection today's default (`TODAY`) makes on the photos of
the folder PHOTOS that the registry's default does not cover (overlap of the smaller
box under `MATCH_OVERLAP`), printed one a line with its box and whether it was sure.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from dbaf_jax.faces.detectors import centerface, dlib_detectors, mtcnn, registry
from dbaf_jax.faces.detectors.base import Detector, overlap_of_smaller
from dbaf_jax.storage import images
from fixtures.labelled import LABELS, MATCH_OVERLAP, labelled, score

SIZES = (("under 16 px", 0, 16), ("16-32 px", 16, 32), ("over 32 px", 32, np.inf))
TODAY = ("mtcnn", "dlib-hog")  # the default before CenterFace


def settings(weights: Path) -> dict[str, Callable[[], Detector]]:
    """The settings measured: name -> a fresh detector (``weights``: the folder holding
    mtcnn/ and centerface/)."""
    low = registry.MTCNN_LOW_THRESHOLDS
    sure = mtcnn.THRESHOLDS[2]
    mtcnn_dir = weights / "mtcnn"

    def mt(min_face: float = 20.0, band: bool = False) -> Detector:
        return mtcnn.MTCNN.load(
            mtcnn_dir,
            min_face_size=min_face,
            **({"thresholds": low, "sure_threshold": sure} if band else {}),
        )

    def hog(upsample: int, band: bool = False) -> Detector:
        return dlib_detectors.DlibDetector(
            "hog",
            upsample,
            registry.HOG_LOW if band else registry.HOG_SURE,
            registry.HOG_SURE if band else None,
        )

    def cnn(band: bool = False) -> Detector:
        return dlib_detectors.DlibDetector(
            "cnn",
            registry.CNN_UPSAMPLE,
            0.0 if band else registry.CNN_SURE,
            registry.CNN_SURE if band else None,
        )

    def cf(threshold: float, sure: float | None = None) -> Detector:
        return centerface.CenterFaceDetector.load(
            weights / "centerface", threshold=threshold, sure_threshold=sure
        )

    def built(*names: str) -> Callable[[], Detector]:
        return lambda: registry.build(weights, names)[0]

    cf_sure, cf_low = registry.CENTERFACE_SURE, registry.CENTERFACE_LOW
    return {
        "mtcnn (20 px, 0.6/0.7/0.7)": lambda: mt(),
        "mtcnn, 12 px": lambda: mt(12.0),
        "mtcnn + low band (0.5/0.5/0.5, sure > 0.7)": lambda: mt(band=True),
        "mtcnn, 12 px + low band": lambda: mt(12.0, band=True),
        "dlib-hog, upsample 1": lambda: hog(1),
        "dlib-hog, upsample 2": lambda: hog(2),
        "dlib-hog, upsample 2 + low band": lambda: hog(2, band=True),
        "dlib-cnn, upsample 1": lambda: cnn(),
        "dlib-cnn, upsample 1 + low band": lambda: cnn(band=True),
        f"centerface (>= {cf_sure})": lambda: cf(cf_sure),
        "centerface (>= 0.5)": lambda: cf(0.5),
        f"centerface + low band ({cf_low}, sure >= {cf_sure})": built("centerface"),
        "centerface + low band (0.2, sure >= 0.35)": lambda: cf(0.2, cf_sure),
        "mtcnn + dlib-hog + low bands (the default before CenterFace)": built(*TODAY),
        "centerface + dlib-hog + low bands": built("centerface", "dlib-hog"),
        "centerface + mtcnn + low bands": built("centerface", "mtcnn"),
        "centerface + mtcnn + dlib-hog + low bands": built("centerface", "mtcnn", "dlib-hog"),
    }


def full_hd(labels_file: Path = LABELS) -> np.ndarray:
    """office2.jpg (1280x720, four faces) enlarged to 1920x1080 (bicubic): a real 1080p photo."""
    with Image.open(labels_file.parent / "office2.jpg") as photo:
        return np.asarray(photo.convert("RGB").resize((1920, 1080), Image.Resampling.BICUBIC))


def measure(
    detector: Detector,
    photos: dict[str, np.ndarray],
    labels: dict[str, np.ndarray],
    repeats: int,
    large: np.ndarray | None = None,
) -> dict[str, float | int]:
    """One setting's row: faces found (in all and by `SIZES`) and anonymized, false
    alarms, pixelated detections, seconds per photo and at 1080p (``large``)."""
    found_faces = {name: detector.detect(image) for name, image in photos.items()}  # compiles
    rows = {name: score(labels[name], found) for name, found in found_faces.items()}
    fastest = {}
    for _ in range(repeats):
        for name, image in photos.items():
            start = time.perf_counter()
            detector.detect(image)
            fastest[name] = min(fastest.get(name, np.inf), time.perf_counter() - start)
    large_seconds = np.nan
    if large is not None:
        detector.detect(large)  # compiles
        for _ in range(repeats):
            start = time.perf_counter()
            detector.detect(large)
            large_seconds = np.nanmin([large_seconds, time.perf_counter() - start])
    widths = {name: labels[name][:, 2] - labels[name][:, 0] for name in photos}
    row: dict[str, float | int] = {
        "faces": sum(len(labels[name]) for name in photos),
        "found": sum(int(r["found"].sum()) for r in rows.values()),
        "anonymized": sum(int(r["anonymized"].sum()) for r in rows.values()),
        "alarms_sure": sum(r["alarms_sure"] for r in rows.values()),
        "alarms_low": sum(r["alarms_low"] for r in rows.values()),
        "pixelated": sum(int((~f.confident()).sum()) for f in found_faces.values()),
        "seconds": float(np.mean(list(fastest.values()))),
        "seconds_1080p": float(large_seconds),
    }
    for label, low, high in SIZES:
        in_bin = {name: (widths[name] >= low) & (widths[name] < high) for name in photos}
        row[f"{label} found"] = sum(int((rows[n]["found"] & in_bin[n]).sum()) for n in photos)
        row[f"{label} faces"] = sum(int(in_bin[n].sum()) for n in photos)
    return row


def lost(weights: Path, folder: Path) -> list[str]:
    """`TODAY`'s detections on the photos of ``folder`` that the registry's default misses."""
    before, after = registry.build(weights, TODAY)[0], registry.build(weights)[0]
    lines = []
    for path in images.input_images(folder):
        photo = images.read_photo(path)
        old, new = before.detect(photo), after.detect(photo)
        for box, sure in zip(old.boxes, old.confident()):
            if not (overlap_of_smaller(box, new.boxes) >= MATCH_OVERLAP).any():
                kind = "sure" if sure else "low band"
                lines.append(f"{path.name}: {np.round(box).astype(int).tolist()} ({kind})")
        print(f"{path.name}: {len(old.boxes)} detections before, {len(new.boxes)} now", flush=True)
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--detector-weights",
        required=True,
        type=Path,
        help="the folder holding mtcnn/ and centerface/ (python -m convert.mtcnn / convert.centerface --out DIR)",
    )
    parser.add_argument(
        "--settings",
        nargs="*",
        help="names (or the start of names) of the settings to run; default all",
    )
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--labels", type=Path, default=LABELS, help="the label file; its photos lie beside it"
    )
    parser.add_argument(
        "--lost", type=Path, help="a folder of photos: list what the default no longer finds"
    )
    args = parser.parse_args(argv)
    weights = registry.weights_dir(args.detector_weights, args.detector_weights)
    if args.lost:
        missed = lost(weights, args.lost)
        print(f"{len(missed)} detection(s) of {'+'.join(TODAY)} not covered by the default")
        print("\n".join(missed))
        return
    labels = labelled(args.labels)
    photos = {
        name: np.asarray(Image.open(args.labels.parent / name).convert("RGB")) for name in labels
    }
    large = full_hd(args.labels)
    print(f"{sum(map(len, labels.values()))} labelled faces in {len(photos)} photos")
    sizes = " | ".join(f"found {label}" for label, _, _ in SIZES)
    print(
        f"| setting | {sizes} | found | anonymized | false alarms (sure + low band) | pixelated "
        "| s / photo | s / 1080p photo |"
    )
    print("|---" * (8 + len(SIZES)) + "|")
    for name, make in settings(weights).items():
        if args.settings and not any(name.startswith(wanted) for wanted in args.settings):
            continue
        row = measure(make(), photos, labels, args.repeats, large)
        by_size = " | ".join(
            f"{row[f'{label} found']} / {row[f'{label} faces']}" for label, _, _ in SIZES
        )
        print(
            f"| {name} | {by_size} | {row['found']} / {row['faces']} | {row['anonymized']} "
            f"| {row['alarms_sure']} + {row['alarms_low']} | {row['pixelated']} "
            f"| {row['seconds']:.2f} | {row['seconds_1080p']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
