"""The photo pipeline both folder runs share (`photo_folders`): photos decoded on worker
threads ahead of the model, their faces batched across photos (`face_batches`), each
result said (`photo_notes`) and written behind the model with its crops, counted into the
run's `Report`.

Memory follows the pixels, not the count of photos or faces: a photo over
``max_pixels`` is skipped from its header, before it is decoded; the photos decoded
ahead and those waiting to be written hold at most `AHEAD_BYTES` and `BEHIND_BYTES` of
pixels (one at a time when a photo is larger); each photo is pasted into in place, its
faces cut, computed and pasted a batch at a time, their results let go once pasted
unless ``save_crops`` writes them (`face_batches`), so that a large photo is held about
once, whatever its crowd (docs/performance.md measures it).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Callable

import numpy as np
from tqdm import tqdm

from dbaf_jax.core import pipeline
from dbaf_jax.faces import metadata, photos
from dbaf_jax.inference import face_batches
from dbaf_jax.inference.anonymizer import PhotoResult, photo_result
from dbaf_jax.inference.planning import Plan, crop_path
from dbaf_jax.inference.report import Report
from dbaf_jax.storage import images

AHEAD_BYTES = 256 << 20  # decoded photos waiting for detection: 4 of 12 megapixels, 1 of 100
BEHIND_BYTES = 256 << 20  # results waiting to be encoded (PIL copies each: 7 bytes a pixel)


def decoded_bytes(path: Path) -> int:
    """What ``path`` holds once decoded (3 bytes a pixel), by its header."""
    return 3 * images.declared_pixels(path)


def photo_notes(source: Path, result: PhotoResult, meta: dict) -> list[str]:
    """What a photo's outcome needs said, in the words that are true of it."""
    notes = []
    if meta.get("operation") == "recover" and not meta.get("detected"):
        if not result.faces:
            notes.append(f"{source}: its metadata records no face; copied unchanged")
    elif not result.found:
        notes.append(
            f"{source}: no face found{' by detection' if meta.get('detected') else ''}, copied unchanged"
        )
    if result.too_small:
        sides = ", ".join(f"{side:.0f}" for side in result.too_small)
        notes.append(
            f"{source}: {len(result.too_small)} face(s) below --min-face-size left as they were (sides {sides} px)"
        )
    if result.hidden:
        notes.append(
            f"{source}: {len(result.hidden)} face(s) hidden by pixelation (low-confidence detections, or unusable landmarks)"
        )
    if result.unverified:
        notes.append(
            f"{source}: {result.unverified} detected face(s) not verified as anonymized ({result.unverified_why}): left as they are"
        )
    return notes


def write_photo(
    target: Path, result: PhotoResult, meta: dict, save_crops: bool, overwrite: bool
) -> None:
    """Writes the photo with its whole metadata ``meta`` (`output_metadata`) and, with
    ``save_crops``, its faces' crops."""
    images.write_png(target, result.photo, meta, overwrite)
    if save_crops:
        for face, face_crop in zip(result.faces, result.crops):
            images.write_png(
                crop_path(target, face.index),
                face_crop,
                metadata.crop(target.name, face.index),
                overwrite,
            )


def output_metadata(meta: dict, result: PhotoResult, size: int) -> tuple[dict, str | None]:
    """(the metadata of ``result``'s output: ``meta`` and its faces, why recover with a
    model of crop ``size`` would refuse it or None). A refused one is not written: what
    anonymize writes, recover reads back (`metadata.photo_refusal`)."""
    full = {**meta, **metadata.photo_fields(result.photo.shape, result.faces)}
    return full, metadata.photo_refusal(full, result.photo.shape, size)


@dataclasses.dataclass
class Photo:
    """A photo's own part of its `face_batches.Item`: where it came from, its output's
    metadata, the faces left alone as too small, and the detections recovery left unverified."""

    source: Path
    meta: dict
    too_small: list[float]
    unverified: int = 0
    unverified_why: str = ""


def run_photos(
    plan: Plan,
    sources: list[Path],
    prepare: Callable[[Path, np.ndarray], face_batches.Item | images.Skipped],
    step: Callable,
    faces: photos.PhotoFaces,
    batch_size: int,
    report: Report,
    desc: str,
    save_crops: bool,
    overwrite: bool | Callable[[Path], bool],
    made: Callable[[face_batches.Done, PhotoResult], None] = lambda done, result: None,
    max_pixels: int = images.MAX_PIXELS,
) -> Report:
    """Runs ``sources`` (of ``plan``) through the model: ``prepare(source, photo)`` gives
    each decoded photo's `face_batches.Item` (its tag a `Photo`) or a Skipped; faces are
    batched across photos by ``step`` in batches of ``batch_size``; ``made`` sees each
    photo as it is done, before it is written. Photos are decoded and encoded on worker
    threads; one of more than ``max_pixels`` is skipped unread. ``overwrite`` may be
    per target. Adds to and returns ``report``."""
    read = functools.partial(images.read_photo_noted, max_pixels=max_pixels)

    def items():
        for source, read_photo in tqdm(
            pipeline.read_ahead(sources, read, depth=4, cost=decoded_bytes, budget=AHEAD_BYTES),
            total=len(sources),
            unit="photo",
            desc=desc,
        ):
            report.photos += 1
            if isinstance(read_photo, ValueError):
                report.skipped.append(images.Skipped(source, str(read_photo)))
                continue
            photo, note = read_photo
            report.notes += [note] if note else []
            item = prepare(source, photo)
            if isinstance(item, images.Skipped):
                report.skipped.append(item)
                continue
            # The photo is ours alone; its faces' results are let go once pasted unless written.
            yield dataclasses.replace(item, in_place=True, keep_results=save_crops)

    with pipeline.Writer(max_pending=4, budget=BEHIND_BYTES) as writer:
        for done in face_batches.processed(items(), faces, step, batch_size):
            photo: Photo = done.item.tag
            result = photo_result(done, photo.too_small)
            result.unverified, result.unverified_why = photo.unverified, photo.unverified_why
            meta, refusal = output_metadata(photo.meta, result, faces.size)
            if refusal is not None:  # not expected: faces.photos hides what no record holds
                report.skipped.append(
                    images.Skipped(
                        photo.source, f"not written: recover would refuse its metadata ({refusal})"
                    )
                )
                continue
            made(done, result)
            report.notes += photo_notes(photo.source, result, photo.meta)
            target = plan.targets[photo.source]
            replace = overwrite(target) if callable(overwrite) else overwrite
            writer.submit(
                functools.partial(write_photo, target, result, meta, save_crops, replace),
                result.photo.nbytes,
            )
            report.written.append(target)
            report.faces += len(result.faces)
            report.faces_found += result.found
            report.faces_hidden += len(result.hidden)
            report.faces_left += len(result.too_small)
            report.unverified += result.unverified
    return report
