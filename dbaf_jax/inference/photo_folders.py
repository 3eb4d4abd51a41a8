"""Folder runs over whole photos: every face found is anonymized with its own key and
pasted back (or hidden by the fallback), and recovered from the photo's metadata, or,
without it, from a key file and its face ledger (`faces.ledger`).

Photos go through the shared pipeline of `photo_pipeline` (decoded ahead, faces
batched across photos, encoded behind). The runners take the run (`run.Run`: the model,
its face finder, the password, the key record and face ledger, the `FolderRunSettings`)
with their source and target folders. ``save_crops`` also writes each processed face as ``NAME.faceN.png``. The folder's
clips go to ``clips`` (`ClipRunner`: the video path, which this layer cannot import)
or, without one, are skipped by name; anonymize skips inputs that are already its
outputs unless ``allow_anonymized_input``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable, Protocol

import numpy as np

from dbaf_jax.core.errors import InputError, OutputExistsError, OutputWriteError
from dbaf_jax.faces import ledger, ledger_match, metadata, photos
from dbaf_jax.inference import face_batches
from dbaf_jax.inference.anonymizer import FaceAnonymizer, PhotoResult
from dbaf_jax.inference.photo_pipeline import Photo, run_photos
from dbaf_jax.inference.planning import (
    Plan,
    anonymized_already,
    checked_anonymizations,
    crop_path,
    plan_outputs,
    plan_photo_outputs,
    saved_crop,
)
from dbaf_jax.inference.report import Report
from dbaf_jax.inference.run import Run
from dbaf_jax.inference.settings import FolderRunSettings
from dbaf_jax.storage import images, keys

LEDGER_CHUNK = (
    64  # faces whose published crops are cut at once for the face ledger (50 MB at 256 px)
)


class ClipRunner(Protocol):
    """The clips of a folder run (`dbaf_jax.video.folders.FolderClips`): checked before
    any work (with ``resume``: the complete ones to keep, with their key records), run
    after the photos into the run's report."""

    def check(self, plan: Plan, resume: bool = False) -> dict[Path, keys.KeyRecord]: ...

    def run(
        self,
        plan: Plan,
        report: Report,
        record: keys.KeyRecord | None = None,
        kept: Iterable[Path] = (),
        redo: bool = False,
    ) -> None: ...


def anonymize_photo_folder(
    run: Run, in_dir: str | Path, out_dir: str | Path, clips: ClipRunner | None = None
) -> Report:
    """Anonymizes every face of every photo below ``in_dir`` into same-size PNGs in
    ``out_dir`` with ``run``: its key record (a key file's) or one fresh salt for the
    run. Its settings: with ``strict``, faces hidden by the fallback make the run's
    `Report.status` EXIT_FALLBACK; ``resume`` continues an interrupted run
    (`resumable_outputs`): complete outputs are kept and counted, the rest made, with the
    earlier run's salt. Its ``ledger_file`` (with a key file: `ledger.ledger_path`) gets
    each photo's anonymized faces, which recovery without metadata needs to tell them
    from any other face."""
    anonymizer, faces, settings, face_ledger = (
        run.anonymizer,
        run.finder,
        run.folder_settings,
        run.ledger_file,
    )
    overwrite, save_crops, resume = settings.overwrite, settings.save_crops, settings.resume
    plan, kept, redo, kept_clips, record = planned_anonymization(
        anonymizer, in_dir, out_dir, settings, run.record, clips
    )
    seed = keys.derive_seed(run.password, record)
    meta = metadata.anonymization(record, anonymizer.fingerprint)

    def prepare(source: Path, photo: np.ndarray) -> face_batches.Item:
        found = faces.find(photo)
        return anonymizer.photo_item(
            photo, seed, faces, found, Photo(source, meta, found.too_small)
        )

    def made(done: face_batches.Done, result: PhotoResult) -> None:
        if (
            face_ledger is not None and result.faces
        ):  # what recovery without metadata may touch (`ledger`)
            try:
                ledger.append(face_ledger, ledger_entries(faces, done, result))
            except (
                OutputWriteError
            ) as err:  # before its output: no photo is written without its entries
                source = done.item.tag.source
                raise OutputWriteError(
                    f"{err}: the faces of {source} are not in it, so it and the photos after it were not written; "
                    "the outputs already written are kept, with their entries (--resume makes the rest)"
                ) from None

    report = Report(
        skipped=list(plan.skipped),
        notes=list(plan.notes),
        strict=settings.strict,
        kept=kept,
        passed_over=list(plan.passed_over),
    )
    if face_ledger is not None:  # before any photo: one entry each at least
        report.notes += [
            note for note in [ledger.check_appendable(face_ledger, len(plan.sources))] if note
        ]
    # Which detectors ran, and any default one that could not.
    report.notes += [faces.describe(), *faces.notes]
    sources = [source for source in plan.sources if plan.targets[source] not in kept]
    run_photos(
        plan,
        sources,
        prepare,
        anonymizer.anonymize_faces,
        faces,
        anonymizer.padded_size(settings.batch),
        report,
        "anonymize",
        save_crops,
        lambda target: overwrite or target in redo,
        made,
        settings.max_pixels,
    )
    if clips is not None:
        clips.run(plan, report, record=record, kept=kept_clips, redo=resume)
    return report


def planned_anonymization(
    anonymizer: FaceAnonymizer,
    in_dir: str | Path,
    out_dir: str | Path,
    settings: FolderRunSettings,
    record: keys.KeyRecord | None,
    clips: ClipRunner | None,
) -> tuple[Plan, list[Path], set[Path], dict[Path, keys.KeyRecord], keys.KeyRecord]:
    """An anonymize run planned before any work (`anonymize_photo_folder`; the Ray
    runs' driver too): (the plan, the complete outputs to keep and the incomplete ones
    to make again with ``settings.resume``, the clips to keep, the run's key record:
    ``record``, else the earlier run's when resuming, else a fresh salt)."""
    if settings.resume and settings.overwrite:
        raise InputError(
            "--resume keeps complete outputs and --overwrite replaces them: pass one of them"
        )
    refuse = (lambda path: None) if settings.allow_anonymized_input else anonymized_already
    if settings.resume:
        plan = plan_outputs(in_dir, out_dir, refuse, videos=clips is not None)
        kept, redo, earlier = resumable_outputs(anonymizer, plan, settings.save_crops)
        kept_clips = clips.check(plan, resume=True) if clips is not None else {}
        records = {r for r in [earlier, *kept_clips.values()] if r is not None}
        if len(records) > 1:
            raise OutputExistsError(
                f"{plan.out_dir}: outputs of {len(records)} runs with different salts; resume needs one run's outputs"
            )
        earlier = next(iter(records), None)
        if record is not None and earlier is not None and earlier != record:
            raise InputError(
                f"{plan.out_dir}: its outputs were made with another salt than the key file's; resume without --key-file or pass --overwrite"
            )
        record = record or earlier
    else:
        plan = plan_photo_outputs(
            in_dir,
            out_dir,
            settings.overwrite,
            settings.save_crops,
            refuse,
            videos=clips is not None,
            resumable=True,
        )
        kept, redo, kept_clips = [], set(), {}
        if clips is not None:
            clips.check(plan)
    return plan, kept, redo, kept_clips, record or keys.new_key_record()


def ledger_entries(
    faces: photos.PhotoFaces, done: face_batches.Done, result: PhotoResult
) -> list[ledger.Entry]:
    """The face ledger's entries of a photo anonymize made (`ledger_match.entries`: each
    face as published, against its original crop's signature, `face_batches.Done.signatures`)."""
    return published_entries(faces, result.photo, result.faces, done.signatures)


def published_entries(
    faces: photos.PhotoFaces,
    photo: np.ndarray,
    aligned: list[photos.AlignedFace],
    original_signatures: list[np.ndarray] | None = None,
) -> list[ledger.Entry]:
    """`ledger_match.entries` of the faces ``aligned`` as ``photo`` shows them, their
    crops cut `LEDGER_CHUNK` at a time (a crowd's crops are never held at once)."""
    made = []
    for start in range(0, len(aligned), LEDGER_CHUNK):
        chunk = aligned[start : start + LEDGER_CHUNK]
        made += ledger_match.entries(
            photo.shape,
            [face.index for face in chunk],
            [face.transform for face in chunk],
            faces.crops(photo, chunk),
            original_signatures=(
                original_signatures[start : start + LEDGER_CHUNK]
                if original_signatures is not None
                else None
            ),
        )
    return made


def resumable_outputs(
    anonymizer: FaceAnonymizer, plan: Plan, save_crops: bool
) -> tuple[list[Path], set[Path], keys.KeyRecord | None]:
    """What an interrupted anonymize run left in ``plan``'s outputs: (the complete
    outputs to keep, the incomplete ones to make again, the run's key record or None).

    Outputs are written atomically, so an existing photo output is whole; it is
    complete when its metadata is this model's anonymization and, with ``save_crops``,
    every face it records has its crop (the crops are written after the photo). An
    existing file that is not this model's output raises OutputExistsError: resuming
    never replaces what another run or tool wrote. Outputs with different salts are
    refused too: one run, one salt."""
    kept, redo, records = [], set(), set()
    for target in plan.targets.values():
        if not target.exists():
            continue
        try:
            made = metadata.read_anonymization(target)
        except InputError:
            made = None
        if made is None or not made.is_photo or made.fingerprint != anonymizer.fingerprint:
            raise OutputExistsError(
                f"{target} exists and is not an output of this model's anonymize run; move it or pass --overwrite"
            )
        records.add(made.record)
        indices = [face.get("index") for face in made.fields["faces"] if isinstance(face, dict)]
        if save_crops and not all(
            crop_path(target, i).exists() for i in indices if isinstance(i, int)
        ):
            redo.add(target)
        else:
            kept.append(target)
    if len(records) > 1:
        raise OutputExistsError(
            f"{plan.out_dir}: outputs of {len(records)} runs with different salts; resume needs one run's outputs"
        )
    return kept, redo, next(iter(records), None)


def recover_photo_folder(
    run: Run, in_dir: str | Path, out_dir: str | Path, clips: ClipRunner | None = None
) -> Report:
    """Recovers the photos of an anonymize run below ``in_dir`` into ``out_dir`` with
    ``run``. A photo's own metadata gives its key record and face transforms. Without
    metadata (e.g. re-encoded after sharing), the run's ``record`` (a key file's) gives
    the key, detection finds candidate faces, and only those that match an entry of its
    ``face_ledger`` (the key file's, `ledger`) are recovered, each with that entry's key
    index; every other detection is left as it is and counted (without a ledger, all of
    them)."""
    anonymizer, faces, settings = run.anonymizer, run.finder, run.folder_settings
    record, face_ledger = run.record, run.face_ledger
    plan = planned_recovery(in_dir, out_dir, settings, clips)
    seeds: dict[keys.KeyRecord, bytes] = {}
    report = Report(
        skipped=list(plan.skipped),
        notes=list(plan.notes),
        operation="recover",
        passed_over=list(plan.passed_over),
    )
    anonymizations = checked_anonymizations(
        anonymizer, plan, report, settings.ignore_model_mismatch
    )

    def prepare(source: Path, photo: np.ndarray) -> face_batches.Item | images.Skipped:
        found = recovery_found(
            faces, source, photo, anonymizations[source], record, face_ledger, anonymizer.input_size
        )
        if isinstance(found, images.Skipped):
            return found
        faces_found, photo_record, tag = found
        if photo_record not in seeds:
            seeds[photo_record] = keys.derive_seed(run.password, photo_record)
        return anonymizer.photo_item(photo, seeds[photo_record], faces, faces_found, tag)

    run_photos(
        plan,
        list(anonymizations),
        prepare,
        anonymizer.recover_faces,
        faces,
        anonymizer.padded_size(settings.batch),
        report,
        "recover",
        settings.save_crops,
        settings.overwrite,
        max_pixels=settings.max_pixels,
    )
    if clips is not None:
        clips.run(plan, report)
    return report


def planned_recovery(
    in_dir: str | Path, out_dir: str | Path, settings: FolderRunSettings, clips: ClipRunner | None
) -> Plan:
    """A recover run planned before any work (`recover_photo_folder`; the Ray runs'
    driver too): the photos and clips to recover, their outputs checked (the crops
    ``save_crops`` wrote passed over)."""
    plan = plan_photo_outputs(
        in_dir,
        out_dir,
        settings.overwrite,
        settings.save_crops,
        pass_over=saved_crop,
        videos=clips is not None,
    )
    if clips is not None:
        clips.check(plan)
    return plan


def verified_candidates(
    faces: photos.PhotoFaces, face_ledger: list[ledger.Entry] | None, photo: np.ndarray
) -> tuple[list[photos.AlignedFace], list, int]:
    """The re-detected faces of ``photo`` that match ``face_ledger`` (with its key
    indices), the region each may change (`ledger_match.region`), and how many did not match."""
    found = faces.find(photo)
    if not found.faces or not face_ledger:
        return [], [], len(found.faces)
    candidates = published_entries(
        faces, photo, [dataclasses.replace(face, index=0) for face in found.faces]
    )
    verified, regions, taken = [], [], set()
    for face, candidate in zip(found.faces, candidates):
        position = ledger_match.match(face_ledger, candidate, taken)
        if position is not None:
            taken.add(position)
            verified.append(
                photos.AlignedFace(face_ledger[position].index, face.transform, face.size)
            )
            regions.append(ledger_match.region(face_ledger[position], photo.shape))
    return verified, regions, len(found.faces) - len(verified)


def recovery_found(
    faces: photos.PhotoFaces,
    source: Path,
    photo: np.ndarray,
    made: metadata.Anonymization | None,
    record: keys.KeyRecord | None,
    face_ledger: list[ledger.Entry] | None,
    input_size: int,
) -> tuple[photos.FoundFaces, keys.KeyRecord, Photo] | images.Skipped:
    """What recovery does to one photo before the model (`recover_photo_folder`; the Ray
    runs' detection tasks too): (its faces, the key record they were anonymized under,
    its `Photo`) from its checked metadata ``made``, or, without metadata, from
    detection verified against ``face_ledger`` under the key file's ``record``; or why
    it is skipped."""
    regions, unverified, why = None, 0, ""
    if made is None:
        if record is None:
            return images.Skipped(
                source,
                f"{source}: no dbaf_jax metadata; pass a key file to find its faces by detection",
            )
        photo_record, meta = record, metadata.detected_recovery(record)
        recorded, regions, unverified = verified_candidates(faces, face_ledger, photo)
        why = (
            "no face ledger beside the key file"
            if face_ledger is None
            else "no match in the key file's face ledger"
        )
    elif not made.is_photo:
        return images.Skipped(
            source, f"{source}: an anonymized aligned crop; recover it with --aligned"
        )
    else:
        try:
            recorded = metadata.recorded_faces(made.fields, photo.shape, input_size)
        except InputError as err:
            return images.Skipped(source, f"{source}: {err}")
        photo_record, meta = made.record, metadata.recovery(made, "image")
    found = photos.FoundFaces(recorded, [], regions=regions)
    return found, photo_record, Photo(source, meta, [], unverified, why)
