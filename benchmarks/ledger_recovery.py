"""Recovery without metadata, end to end: what the face ledger lets recovery touch after
the anonymized photos are shared (metadata stripped, JPEG 90 and 75, rescaled by 0.5).

    python -m benchmarks.ledger_recovery --photos DIR --detector models/mtcnn [--work DIR]

Anonymizes every photo below DIR with a key file (writing its face ledger) using the
test double `benchmarks.invertible_double.InvertibleDouble` (a key-dependent colour change
and mirror, so that the anonymized faces are still faces the real MTCNN finds again),
then recovers each transformed copy with the key file alone. Per photo and
transformation it prints: faces anonymized, faces found again, verified against the
ledger, restored (their mean error to the original within the face halved or better),
and the pixels recovery changed outside the faces anonymization changed (must be 0).
The never-anonymized originals, recovered with the same key file, are the control:
every detection there must stay unverified and every pixel as it was.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from benchmarks.invertible_double import InvertibleDouble
from dbaf_jax import images, keys, metadata
from dbaf_jax.faces import ledger, ledger_match, paste, photos
from dbaf_jax.faces.detectors import mtcnn
from dbaf_jax.inference.photo_folders import anonymize_photo_folder, recover_photo_folder

PASSWORD = "ledger benchmark"
RESTORED = 0.5  # a face is restored when recovery at least halves its mean error to the original


def _stripped(photo: np.ndarray, path: Path) -> Path:
    target = path.with_suffix(".png")
    Image.fromarray(photo).save(target)  # a plain PNG: no dbaf_jax chunk
    return target


def _jpeg(quality: int) -> Callable[[np.ndarray, Path], Path]:
    def save(photo: np.ndarray, path: Path) -> Path:
        target = path.with_suffix(".jpg")
        Image.fromarray(photo).save(target, quality=quality)
        return target

    return save


def _half(photo: np.ndarray, path: Path) -> Path:
    target = path.with_suffix(".png")
    height, width = photo.shape[:2]
    Image.fromarray(photo).resize((width // 2, height // 2), Image.Resampling.BILINEAR).save(target)
    return target


TRANSFORMS: dict[str, Callable[[np.ndarray, Path], Path]] = {
    "metadata stripped": _stripped,
    "JPEG 90": _jpeg(90),
    "JPEG 75": _jpeg(75),
    "rescaled 0.5": _half,
}


@dataclasses.dataclass(frozen=True)
class Row:
    photo: str
    transform: str
    anonymized: int  # faces anonymization changed (the ledger's entries for the photo)
    found: int
    verified: int
    restored: int
    changed_outside: int  # pixels recovery changed outside the faces anonymization changed


def _same_geometry(mask: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``mask`` (H, W) bool at ``shape``'s size: as is, or any-pooled for the 0.5 rescale."""
    if mask.shape == tuple(shape[:2]):
        return mask
    height, width = shape[:2]
    return mask[: 2 * height, : 2 * width].reshape(height, 2, width, 2).any(axis=(1, 3))


def _face_errors(photo: np.ndarray, original: np.ndarray, discs: list) -> np.ndarray:
    """Mean absolute error to ``original`` within each disc ((x, y), r) of ``photo``."""
    yy, xx = np.mgrid[: photo.shape[0], : photo.shape[1]]
    errors = []
    for (cx, cy), radius in discs:
        inside = np.hypot(xx - cx, yy - cy) <= radius
        errors.append(
            np.abs(photo[inside].astype(np.float64) - original[inside]).mean()
            if inside.any()
            else np.nan
        )
    return np.array(errors)


def _anonymized_faces(path: Path, size: int) -> tuple[np.ndarray, list[tuple[float, float, float]]]:
    """The faces the anonymized photo ``path`` records: the (H, W) bool mask of the
    pixels their pastes cover (the box mask's support), and their discs as (x, y,
    radius) fractions of the photo's width (what `ledger_match.region` lets recovery change)."""
    photo = images.read_photo(path)
    recorded = metadata.recorded_faces(images.read_metadata(path), photo.shape, size)
    covered = np.zeros(photo.shape, np.uint8)
    for face in recorded:
        covered = paste.paste(
            covered, np.ones((size, size, 3), np.float32), paste.box_mask(size), face.transform
        )
    placed = [ledger_match.place(photo.shape, face.transform, size) for face in recorded]
    return covered.any(axis=-1), [
        (centre[0], centre[1], ledger_match.RECOVERY_RADIUS * side) for _, centre, side in placed
    ]


def _anonymized(
    sources: list[Path], double: InvertibleDouble, faces: photos.PhotoFaces, work: Path
) -> tuple[Path, keys.KeyRecord, list[ledger.Entry]]:
    """``sources`` copied into work/originals and anonymized into work/anonymized with a
    key file, whose face ledger this writes: (the originals' folder, the key record,
    the ledger's entries)."""
    originals = _folder(work / "originals")
    for source in sources:
        shutil.copy(source, originals / source.name)
    record = keys.KeyRecord(salt="3c" * keys.SALT_BYTES)
    key_file = work / "me.key"
    keys.write_key_file(key_file, record)
    anonymize_photo_folder(
        double,
        faces,
        PASSWORD,
        originals,
        work / "anonymized",
        record=record,
        face_ledger=ledger.ledger_path(key_file),
    )
    return originals, record, ledger.read(ledger.ledger_path(key_file))


def _shared_copies(
    originals: Path, work: Path, cases: dict[str, Callable[[np.ndarray, Path], Path]]
) -> dict[tuple[str, str], tuple[Path, Path | None]]:
    """(photo, case) -> (the shared copy, the original at its size; None for the control),
    each copy alone in its folder, so that a run's counts are the photo's."""
    shared = {}
    for source in sorted(originals.iterdir()):
        original = images.read_photo(source)
        anonymized = images.read_photo(work / "anonymized" / f"{source.stem}.png")
        for number, (case, save) in enumerate(cases.items()):
            folder = _folder(work / f"shared{number}_{source.stem}")
            if case.startswith("control"):
                shared[source.name, case] = (save(original, folder / source.stem), None)
            else:
                shared[source.name, case] = (
                    save(anonymized, folder / source.stem),
                    save(original, _folder(work / f"reference{number}") / source.stem),
                )
    return shared


def _recovered_folder(given: Path) -> Path:
    return given.parent.with_name("recovered_" + given.parent.name)


def _measured(
    given: Path, reference: Path | None, stem: str, changed: np.ndarray, discs: list[tuple]
) -> tuple[int, int]:
    """(faces restored, pixels changed outside the faces anonymization changed) of the
    recovery of the shared copy ``given``; ``changed`` and ``discs``: `_anonymized_faces`."""
    before = images.read_photo(given)
    after = images.read_photo(_recovered_folder(given) / f"{stem}.png")
    allowed = (
        _same_geometry(changed, before.shape)
        if reference is not None
        else np.zeros(before.shape[:2], bool)
    )
    outside = int(((after != before).any(axis=-1) & ~allowed).sum())
    restored = 0
    if reference is not None and discs:
        target = images.read_photo(reference)
        width = before.shape[1]
        in_pixels = [((x * width, y * width), r * width) for x, y, r in discs]
        restored = int(
            (
                _face_errors(after, target, in_pixels)
                <= RESTORED * _face_errors(before, target, in_pixels)
            ).sum()
        )
    return restored, outside


def measure(sources: list[Path], detector_dir: Path, work: Path) -> list[Row]:
    """The rows of the module doc for ``sources`` (photos), using the MTCNN in ``detector_dir``."""
    double = InvertibleDouble()
    faces = photos.PhotoFaces(mtcnn.MTCNN.load(detector_dir), double.input_size)
    originals, record, entries = _anonymized(sources, double, faces, work)
    cases = {**TRANSFORMS, "control: the original": _stripped}
    shared = _shared_copies(originals, work, cases)
    reports = {
        key: recover_photo_folder(
            double,
            faces,
            PASSWORD,
            given.parent,
            _recovered_folder(given),
            record=record,
            face_ledger=entries,
        )
        for key, (given, _) in shared.items()
    }
    rows = []
    for source in sorted(originals.iterdir()):
        changed, discs = _anonymized_faces(
            work / "anonymized" / f"{source.stem}.png", double.input_size
        )
        for case in cases:
            given, reference = shared[source.name, case]
            restored, outside = _measured(given, reference, source.stem, changed, discs)
            report = reports[source.name, case]
            anonymized = len(discs) if reference is not None else 0
            rows.append(
                Row(
                    source.name,
                    case,
                    anonymized,
                    report.faces_found,
                    report.faces,
                    restored,
                    outside,
                )
            )
    return rows


def _folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", required=True, help="folder of photos (jpg, png)")
    parser.add_argument(
        "--detector", required=True, help="MTCNN directory (python -m convert.mtcnn)"
    )
    parser.add_argument("--work", help="folder for the runs (default: a temporary one)")
    args = parser.parse_args(argv)
    sources = images.input_images(Path(args.photos))
    with tempfile.TemporaryDirectory() as temporary:
        rows = measure(sources, Path(args.detector), Path(args.work or temporary))
    print(
        "| photo | shared as | anonymized | found | verified | restored | pixels changed outside |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row.photo} | {row.transform} | {row.anonymized} | {row.found} | {row.verified} | {row.restored} | {row.changed_outside} |"
        )
    return rows


if __name__ == "__main__":
    main()
