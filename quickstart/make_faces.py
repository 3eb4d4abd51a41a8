"""Writes the quick start's aligned face crops (quickstart/faces/*.png) from photos.

The crops are committed; this script says how they were made and remakes them:

    python -m convert.mtcnn --out models/
    python quickstart/make_faces.py --mtcnn models/mtcnn --out quickstart/faces PHOTO...

Every face MTCNN finds whose FFHQ quad is at least ``--min-face-size`` pixels is
aligned as `dbaf_jax.commands.anonymize` aligns faces, at ``--size`` pixels, and written as
``{photo stem}_{face index}.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

from dbaf_jax.faces import align
from dbaf_jax.faces.detectors import mtcnn
from dbaf_jax.faces.photos import PhotoFaces


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("photos", nargs="+", type=Path)
    parser.add_argument(
        "--mtcnn", required=True, help="converted MTCNN directory (python -m convert.mtcnn)"
    )
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--min-face-size", type=float, default=32.0)
    args = parser.parse_args(argv)
    # Aligned at 4x the size, then area-reduced: bilinear sampling straight to 64 px would alias.
    faces = PhotoFaces(
        mtcnn.MTCNN.load(args.mtcnn),
        4 * args.size,
        min_face_size=args.min_face_size,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.photos:
        photo = np.asarray(Image.open(path).convert("RGB"))
        found = faces.find(photo)
        for face in found.faces:
            crop = np.clip(
                np.rint(align.crop(photo, face.transform, 4 * args.size)), 0, 255
            ).astype(np.uint8)
            Image.fromarray(crop).reduce(4).save(
                args.out / f"{path.stem}_{face.index:02d}.png", optimize=True
            )
        print(f"{path.name}: {len(found.faces)} faces, {len(found.too_small)} too small")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
