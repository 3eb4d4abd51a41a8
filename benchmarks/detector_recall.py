"""Recall and false alarms of each detector setting on the hand-labelled photos
(tests/data/faces_labelled.json), and its time per photo (docs/photos.md).

    python -m benchmarks.detector_recall --detector DIR/mtcnn [--settings NAME ...] [--repeats 1]

A labelled face is *found* when a detection covers at least `MATCH_OVERLAP` of the
smaller of the two boxes (detectors draw boxes of different extents around one face,
`detectors.base.overlap_of_smaller`), and *anonymized* when that detection is sure;
a detection that covers no labelled face is a *false alarm* (sure or low band). Each
setting first runs once over the photos (compiling MTCNN's programs), then is timed
over them ``--repeats`` times; seconds per photo are the mean over the photos of the
fastest run. Printed as a markdown table, one row per setting.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from dbaf_jax.faces.detectors import dlib_detectors, mtcnn, registry
from dbaf_jax.faces.detectors.base import Detections, Detector, overlap_of_smaller
from dbaf_jax.faces.detectors.ensemble import Ensemble

# The labelled photos live beside the tests that hold the default to them; read as files only.
LABELS = Path(__file__).resolve().parent.parent / "tests" / "data" / "faces_labelled.json"
MATCH_OVERLAP = 0.4


def labelled(path: Path = LABELS) -> dict[str, np.ndarray]:
    """Photo name -> its labelled boxes (N, 4), as the label file gives them."""
    return {
        name: np.array([face["box"] for face in faces], np.float32).reshape(-1, 4)
        for name, faces in json.loads(path.read_text())["photos"].items()
    }


def kinds(path: Path = LABELS) -> dict[str, list[str]]:
    """Photo name -> each labelled face's kind (frontal, small, profile, occluded, border)."""
    return {
        name: [face["kind"] for face in faces]
        for name, faces in json.loads(path.read_text())["photos"].items()
    }


def score(labels: np.ndarray, found: Detections) -> dict[str, np.ndarray | int]:
    """Of one photo: which labelled faces were found and which anonymized ((N,) bool
    each), and the false alarms, sure and low band."""
    covers = np.stack(
        [overlap_of_smaller(box, found.boxes) >= MATCH_OVERLAP for box in labels]
    ).reshape(len(labels), len(found.boxes))
    sure = found.confident()
    alarms = ~covers.any(axis=0)
    return {
        "found": covers.any(axis=1),
        "anonymized": (covers & sure[None]).any(axis=1),
        "alarms_sure": int((alarms & sure).sum()),
        "alarms_low": int((alarms & ~sure).sum()),
    }


def settings(mtcnn_dir: Path) -> dict[str, Callable[[], Detector]]:
    """The settings measured: name -> a fresh detector."""
    low = registry.MTCNN_LOW_THRESHOLDS
    sure = mtcnn.THRESHOLDS[2]

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

    return {
        "mtcnn (today's default: 20 px, 0.6/0.7/0.7)": lambda: mt(),
        "mtcnn, 12 px": lambda: mt(12.0),
        "mtcnn, 10 px": lambda: mt(10.0),
        "mtcnn + low band (0.5/0.5/0.5, sure > 0.7)": lambda: mt(band=True),
        "mtcnn, 12 px + low band": lambda: mt(12.0, band=True),
        "dlib-hog, upsample 1": lambda: hog(1),
        "dlib-hog, upsample 2": lambda: hog(2),
        "dlib-hog, upsample 2 + low band": lambda: hog(2, band=True),
        "dlib-cnn, upsample 1": lambda: cnn(),
        "dlib-cnn, upsample 1 + low band": lambda: cnn(band=True),
        "mtcnn + dlib-hog": lambda: Ensemble([mt(), hog(2)]),
        "mtcnn + dlib-hog + low bands (the default)": lambda: registry.build(mtcnn_dir)[0],
        "mtcnn 12 px + dlib-hog + low bands": lambda: Ensemble(
            [mt(12.0, band=True), hog(2, band=True)]
        ),
        "mtcnn + dlib-hog + dlib-cnn + low bands": lambda: registry.build(
            mtcnn_dir, ["mtcnn", "dlib-hog", "dlib-cnn"]
        )[0],
    }


def measure(
    detector: Detector, photos: dict[str, np.ndarray], labels: dict[str, np.ndarray], repeats: int
) -> dict[str, float | int]:
    """One setting's row: faces found and anonymized, false alarms, seconds per photo."""
    rows = [
        score(labels[name], detector.detect(image)) for name, image in photos.items()
    ]  # and compiles
    fastest = {}
    for _ in range(repeats):
        for name, image in photos.items():
            start = time.perf_counter()
            detector.detect(image)
            fastest[name] = min(fastest.get(name, np.inf), time.perf_counter() - start)
    return {
        "faces": sum(len(labels[name]) for name in photos),
        "found": sum(int(r["found"].sum()) for r in rows),
        "anonymized": sum(int(r["anonymized"].sum()) for r in rows),
        "alarms_sure": sum(r["alarms_sure"] for r in rows),
        "alarms_low": sum(r["alarms_low"] for r in rows),
        "seconds": float(np.mean(list(fastest.values()))),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--detector",
        required=True,
        type=Path,
        help="DIR/mtcnn as written by python -m convert.mtcnn",
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
    args = parser.parse_args(argv)
    labels = labelled(args.labels)
    photos = {
        name: np.asarray(Image.open(args.labels.parent / name).convert("RGB")) for name in labels
    }
    print(f"{sum(map(len, labels.values()))} labelled faces in {len(photos)} photos")
    print(
        "| setting | found (hidden or anonymized) | anonymized | false alarms (sure + low band) | s / photo |"
    )
    print("|---|---|---|---|---|")
    for name, make in settings(args.detector).items():
        if args.settings and not any(name.startswith(wanted) for wanted in args.settings):
            continue
        row = measure(make(), photos, labels, args.repeats)
        print(
            f"| {name} | {row['found']} / {row['faces']} ({row['found'] / row['faces']:.0%}) | {row['anonymized']} "
            f"| {row['alarms_sure']} + {row['alarms_low']} | {row['seconds']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
