"""What one photo's metadata can make recovery do: the honest output of a photo against
the same pixels carrying crafted metadata with the most faces the checks accept.

    python -m benchmarks.studies.hostile_metadata [--model DIR] [--photo PATH] [--repeats 2]

Anonymizes the photo (default: the tests' office5.jpg, a group photo) with the command's
own runner, then times `recover_photo_folder` (warm, median of ``--repeats``) on

- the honest output, with the faces the detector found;
- a crafted PNG: the same pixels and key record, its face list replaced by a grid of
  32 px faces, one per 32x32 px, as many as `metadata.max_recorded_faces` allows for
  the photo's size (the densest list `metadata.recorded_faces` accepts).

and prints faces and seconds of each and their ratio. For scale it also prints the
densest honest photo of that size: MTCNN reports faces down to its minimum box
(`registry.MTCNN_MIN_FACE`), so a crowd photo of faces that small, side by side, records
about area / MIN_FACE_SIZE**2 faces, and recovering it costs what its faces cost.
Model: ``--model DIR`` (a converted DBAF model directory holding ``mtcnn/``), or the
tests' tiny model (random weights) with the real MTCNN.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.common.models import model_parser, photo_run
from benchmarks.common.timing import median_seconds
from dbaf_jax.faces import metadata
from dbaf_jax.faces.detectors import registry
from dbaf_jax.faces.photos import AlignedFace
from dbaf_jax.inference.photo_folders import anonymize_photo_folder, recover_photo_folder
from dbaf_jax.inference.run import Run
from dbaf_jax.inference.settings import FolderRunSettings
from dbaf_jax.storage import images
from fixtures import DATA

PASSWORD = "hostile metadata benchmark"
TEST_PHOTO = DATA / "office5.jpg"
GRID = 32  # px: one crafted face per GRID x GRID cell, places.FACE_AREA_PER_FACE


def crafted_faces(photo_shape: tuple[int, ...], size: int) -> list[AlignedFace]:
    """The most GRID px faces `metadata.recorded_faces` accepts for this photo, on a grid."""
    height, width = photo_shape[:2]
    scale = size / GRID
    cells = [
        (x, y) for y in range(0, height - GRID + 1, GRID) for x in range(0, width - GRID + 1, GRID)
    ]
    cells = cells[: metadata.max_recorded_faces(photo_shape)]
    return [
        AlignedFace(i, np.array([[scale, 0.0, -scale * x], [0.0, scale, -scale * y]]), size)
        for i, (x, y) in enumerate(cells)
    ]


def main() -> None:
    parser = model_parser(__doc__)
    parser.add_argument("--photo", type=Path, default=TEST_PHOTO)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with photo_run(args.model) as (work, model, anonymizer, faces):
        (work / "in").mkdir()
        (work / "in" / args.photo.name).write_bytes(args.photo.read_bytes())
        anonymize_photo_folder(
            Run("anonymize", anonymizer, faces, PASSWORD), work / "in", work / "honest"
        )
        again = Run(
            "recover", anonymizer, faces, PASSWORD, settings=FolderRunSettings(overwrite=True)
        )
        honest = next((work / "honest").glob("*.png"))
        pixels = images.read_photo(honest)
        fields = images.read_metadata(honest)
        crafted = crafted_faces(pixels.shape, anonymizer.input_size)
        (work / "hostile").mkdir()
        fields.update(metadata.photo_fields(pixels.shape, crafted))
        images.write_png(work / "hostile" / honest.name, pixels, fields)
        metadata.recorded_faces(
            fields, pixels.shape, anonymizer.input_size
        )  # accepted, as recover will

        def recover(folder: str) -> float:
            return median_seconds(
                lambda: recover_photo_folder(again, work / folder, work / f"out_{folder}"),
                args.repeats,
            )

        honest_faces = len(images.read_metadata(honest)["faces"])
        honest_s, hostile_s = recover("honest"), recover("hostile")
        height, width = pixels.shape[:2]
        densest = height * width // int(registry.MTCNN_MIN_FACE) ** 2
        print(
            f"model {model} ({'given' if args.model else 'tiny, random weights'}), photo {args.photo.name} {width}x{height}"
        )
        print("| metadata | faces | recover s (warm) | s per face |")
        print("|---|---|---|---|")
        print(
            f"| honest | {honest_faces} | {honest_s:.2f} | {honest_s / max(honest_faces, 1):.3f} |"
        )
        print(
            f"| crafted, the most the checks accept | {len(crafted)} | {hostile_s:.2f} | {hostile_s / len(crafted):.3f} |"
        )
        print(
            f"crafted / honest: {hostile_s / honest_s:.1f}x the time for {len(crafted) / max(honest_faces, 1):.1f}x the faces; "
            f"a crowd of {registry.MTCNN_MIN_FACE:.0f} px faces side by side on this photo would record about {densest}"
        )


if __name__ == "__main__":
    main()
