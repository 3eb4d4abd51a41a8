"""Does a recognizer the model never saw still match anonymized faces? Per face size.

    python -m benchmarks.studies.recognizer_bins --model DIR PHOTO ...

Needs dlib and its trained models (``pip install dlib-bin face-recognition-models
'setuptools<81'``; not a dependency of dbaf_jax). Each photo is anonymized as the
command does (every face MTCNN finds, default settings, a fresh salt); then for every
face MTCNN found in the original, dlib's 68-point shape predictor and its ResNet
descriptor are computed inside the face's MTCNN box in the original and in the
anonymized photo, and the face counts as still matched when the two descriptors lie
within dlib's threshold (Euclidean distance 0.6). Faces are binned by their MTCNN box
width in photo pixels: < 40, 40-64, 64-128, > 128. The same is measured for the
fallback (`faces.paste.hide` on each face's box alone: a flat fill) and, for comparison,
for 4 x 4 blocks of mean colour. Prints one row per bin.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from dbaf_jax.faces import paste
from dbaf_jax.inference.anonymizer import FaceAnonymizer, load_photo_faces
from dbaf_jax.storage import images, keys

BINS = ((0, 40, "< 40"), (40, 64, "40-64"), (64, 128, "64-128"), (128, float("inf"), "> 128"))
DLIB_THRESHOLD = 0.6


def main(argv=None) -> dict[str, tuple[int, int, int]]:
    import dlib  # optional: only this measurement needs it
    import face_recognition_models

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.recognizer_bins", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", required=True, help="DBAF model directory holding mtcnn/")
    parser.add_argument("photos", nargs="+", type=Path)
    args = parser.parse_args(argv)
    shape = dlib.shape_predictor(face_recognition_models.pose_predictor_model_location())
    recognizer = dlib.face_recognition_model_v1(
        face_recognition_models.face_recognition_model_location()
    )
    anonymizer = FaceAnonymizer(args.model)
    faces = load_photo_faces(anonymizer)
    seed = keys.derive_seed("measurement", keys.new_key_record())

    def descriptor(photo: np.ndarray, box: np.ndarray) -> np.ndarray:
        rect = dlib.rectangle(*(int(round(v)) for v in box))
        return np.asarray(recognizer.compute_face_descriptor(photo, shape(photo, rect)))

    counts = {
        name: [0, 0, 0, 0] for _, _, name in BINS
    }  # matched after anonymization, the fallback, 4 x 4 blocks; faces
    for path in args.photos:
        photo = images.read_photo(path)
        boxes = faces.detector.detect(photo).boxes
        result = anonymizer.anonymize_photo(photo, seed, faces)
        for box in boxes:
            width = float(box[2] - box[0])
            name = next(n for low, high, n in BINS if low <= width < high)
            original = descriptor(photo, box)
            for column, changed in enumerate(
                (result.photo, paste.hide(photo, box), paste.hide(photo, box, cells=4))
            ):
                counts[name][column] += (
                    float(np.linalg.norm(original - descriptor(changed, box))) < DLIB_THRESHOLD
                )
            counts[name][3] += 1
    print(
        "| face box width (px) | faces | still matched after anonymization | after the fallback (flat fill) | after 4 x 4 blocks |"
    )
    print("|---|---|---|---|---|")
    for _, _, name in BINS:
        anonymized, hidden, blocks, total = counts[name]
        print(f"| {name} | {total} | {anonymized} | {hidden} | {blocks} |")
    return {name: tuple(c) for name, c in counts.items()}


if __name__ == "__main__":
    main()
