"""Anonymize a clip with per-track keys, and recover it: what the video commands call,
with the run (`inference.run.Run`: model, face finder, password, key record, face
ledger, settings) and their source and target.

The clip is read twice and never held whole: the first pass detects the faces of
its frames (`passes.DETECT_FRAMES` at a time on an accelerator) and links them into tracks
(`tracks.Tracker`), keeping only landmarks; the tracks are then filled and smoothed
and give every face of every frame its transform.
The second pass crops those faces, runs the model on batches gathered across frames
and tracks (each face with its track's key), pastes them back through the mask and
encodes the frames as they complete, before any lossy step of ours. Decoding runs ahead
on a thread of its own, encoding behind on another, and a batch's frames are pasted
while the next batch computes (`dbaf_jax.core.pipeline`; both passes in `passes`). The output is
written to a hidden temporary file renamed into place when whole
(`atomic_files.write_file`) with a copy of the sidecar in its container metadata, then the
sidecar file beside it. The tracks are recorded as a sidecar can hold them
(`sidecar.recordable`), and the sidecar is held to what recovery accepts
(`sidecar.accepted`, `sidecar.check_use`) before the second pass and, with the clip as
written and its container's copy, before the clip is put in place: a clip that recovery
would refuse is never written, and the run fails naming why. A clip that is already an
output of anonymize (its sidecar beside it or in its container) is refused unless asked
(``allow_anonymized_input``). Recovery reads the sidecar (the file, else the container's
copy; or, with a key file and neither, re-detects and re-tracks the anonymized clip and
recovers the tracks the key file's face ledger verifies, `track_ledger`) and changes
only the pixels under the faces' masks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import jax
import numpy as np

from dbaf_jax.core.errors import InputError
from dbaf_jax.faces import ledger, metadata
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.inference.planning import check_outputs
from dbaf_jax.inference.run import Run
from dbaf_jax.storage import keys, output_folder
from dbaf_jax.video import clip, sidecar, track_ledger, tracks
from dbaf_jax.video.passes import FacePass, Placed, find_tracks, rewrite, track_keys
from dbaf_jax.video.report import VideoReport
from dbaf_jax.video.settings import ClipRunSettings


def _anonymize_step(anonymizer: FaceAnonymizer):
    return lambda crops, face_keys: anonymizer.anonymize_async(crops, jax.numpy.asarray(face_keys))[
        0
    ]


def _recover_step(anonymizer: FaceAnonymizer):
    return lambda crops, face_keys: anonymizer.recover_async(crops, jax.numpy.asarray(face_keys))


def _prepare_outputs(source: Path, targets: list[Path], overwrite: bool) -> list[str]:
    """Checks, before any work, that ``targets`` are video names (the first) that do not
    replace ``source`` and do not exist unless ``overwrite``; removes the temporaries
    killed runs left beside them, a note each."""
    clip.muxer(targets[0])
    if any(target.resolve() == source.resolve() for target in targets):
        raise InputError(
            f"{targets[0]}: the output would replace the input {source}; choose another output name"
        )
    check_outputs(targets, overwrite)
    return [
        note
        for target in targets
        for note in output_folder.clear_stale_temporaries(target.parent, target.name)
    ]


def anonymized_clip(source: Path) -> str | None:
    """Why anonymize refuses the clip ``source`` unless asked: a sidecar lies beside it or
    its container holds one (an output of anonymize: anonymizing it again would leave a
    clip whose sidecar recovers nothing). None otherwise, and for a clip that cannot be
    opened (the run names it when it reads it)."""
    try:
        ours = sidecar.path_for(source).exists() or clip.read_tag(source, sidecar.TAG) is not None
    except InputError:
        return None
    if not ours:
        return None
    return (
        f"{source}: already an output of anonymize (it has a sidecar); anonymizing it again would leave a clip whose "
        "sidecar recovers nothing, so it is not processed (pass --allow-anonymized-input to anonymize it again)"
    )


def _recoverable(
    target: Path,
    text: str,
    tag: str | None,
    shape: tuple[int, int],
    limit: int,
    anonymizer: FaceAnonymizer,
    size: int,
) -> None:
    """InputError naming ``target`` when recover_video would refuse its sidecar ``text``
    or the container's copy ``tag`` for a clip of upright ``shape`` whose sidecar can take
    ``limit`` bytes: `sidecar.accepted` and `sidecar.check_use`, as recovery calls them."""
    try:
        made = [sidecar.accepted(text, f"{target}: its sidecar", limit)]
        if tag is not None:
            made.append(sidecar.from_tag(tag, target, limit))
        for recorded in made:
            sidecar.check_use(recorded, str(target), anonymizer.fingerprint, shape, size)
    except InputError as err:
        raise InputError(
            f"{target}: not written: recover_video would refuse its sidecar ({err}), so the clip could not be recovered"
        ) from None


def _as_recorded(
    found: list[tracks.Track], tracked: Placed, tracker: tracks.Tracker, shape, size: int
) -> tuple[Placed, dict[int, list[np.ndarray]], int]:
    """The tracks as the sidecar records them (`sidecar.recordable`), the boxes the
    fallback hides by frame (the tracker's, but for low-band boxes lying on a face
    recorded there, and those of faces no sidecar can record), and how many recorded
    faces were interpolated."""
    runs, unplaced = sidecar.recordable(tracked, [t.detected for t in found], shape, size)
    placed = [
        (run.number, tracked[run.track][1] + run.start, tracked[run.track][2][run.start : run.stop])
        for run in runs
    ]
    recorded: dict[int, list[np.ndarray]] = {}  # frame -> the boxes of the faces anonymized there
    for run in runs:
        track = found[run.track]
        for offset in range(run.start, run.stop):
            recorded.setdefault(track.first + offset, []).append(track.boxes[offset])
    hidden = tracker.hidden({frame: np.stack(boxes) for frame, boxes in recorded.items()})
    for index, offset in unplaced:
        track = found[index]
        hidden.setdefault(track.first + offset, []).append(track.boxes[offset])
    interpolated = sum(
        int((~found[run.track].detected[run.start : run.stop]).sum()) for run in runs
    )
    return placed, hidden, interpolated


def _count(placed: Placed) -> int:
    return sum(len(stack) for _, _, stack in placed)


def _held_sidecar(
    anonymizer: FaceAnonymizer,
    record: keys.KeyRecord,
    info: clip.ClipInfo,
    count: int,
    size: int,
    placed: Placed,
    target: Path,
) -> tuple[str, str | None, Callable[[Path], None]]:
    """The sidecar of ``target``: (its text, the copy its container holds: None when the
    container cannot hold it or it is too long for a tag, the check of the clip as
    written). Held to what recovery accepts before the second pass, with the frames
    counted; the check holds the clip as written (its size, its packets, its
    container's copy read back) before it is put in place."""
    shape = info.upright_shape
    recorded = sidecar.content(
        metadata.anonymization(record, anonymizer.fingerprint), shape, count, size, placed
    )
    tag = sidecar.as_tag(recorded) if clip.holds_tags(target) else None
    text = sidecar.text(recorded)
    _recoverable(target, text, tag, shape, sidecar.max_bytes(shape, count), anonymizer, size)

    def written(clip_file: Path) -> None:
        made = clip.probe(clip_file).upright_shape
        copy = clip.read_tag(clip_file, sidecar.TAG) if tag is not None else None
        if copy != tag:
            raise InputError(f"{target}: not written: its container did not keep the sidecar")
        limit = sidecar.clip_limit(clip_file, made)
        _recoverable(target, text, copy, made, limit, anonymizer, size)

    return text, tag, written


def _anonymized_report(
    source: Path,
    target: Path,
    in_container: bool,
    count: int,
    found: list[tracks.Track],
    placed: Placed,
    interpolated: int,
    hidden: dict[int, list[np.ndarray]],
    tracker: tracks.Tracker,
    notes: list[str],
    short: str | None,
) -> VideoReport:
    """What anonymize did to the clip, its notes: a short clip, a sidecar only in its
    file (``in_container`` False), a clip without a face."""
    side = sidecar.path_for(target)
    report = VideoReport(
        [target, side],
        count,
        len(found),
        _count(placed),
        interpolated,
        sum(map(len, hidden.values())),
        tracker.left,
        notes,
        short=short is not None,
    )
    report.notes += [short] if short else []
    if not in_container:
        where = (
            f"the {clip.muxer(target)} container cannot hold it"
            if not clip.holds_tags(target)
            else "it is too long for a container tag"
        )
        report.notes.append(
            f"{target}: the sidecar is only in {side} ({where}): keep the two together to recover the clip"
        )
    if not found and not hidden and not tracker.left:
        report.notes.append(
            f"{source}: no face found in {count} frame(s); the clip was re-encoded unchanged"
        )
    return report


def anonymize_video(run: Run, source: str | Path, target: str | Path) -> VideoReport:
    """Anonymizes every tracked face of the clip ``source`` into ``target`` (same size,
    rate, rotation, audio) with ``run`` and writes ``target``'s sidecar, as the run's
    settings ask (`ClipRunSettings.of_run`). The run's record: a key file's (else a
    fresh salt); its ``ledger_file`` (with a key file: `ledger.ledger_path`) gets the
    tracks' entries that recovery without a sidecar verifies faces against
    (`track_ledger`)."""
    anonymizer, face_ledger = run.anonymizer, run.ledger_file
    settings = ClipRunSettings.of_run(run.settings)
    source, target = Path(source), Path(target)
    side = sidecar.path_for(target)
    refused = None if settings.allow_anonymized_input else anonymized_clip(source)
    if refused is not None:
        raise InputError(refused)
    notes = _prepare_outputs(source, [target, side], settings.overwrite)
    if face_ledger is not None:
        # Before any frame is read, then again with its entries counted.
        notes += [note for note in [ledger.check_appendable(face_ledger, 1)] if note]
    faces = run.finder  # after the checks that need no model
    notes += [faces.describe(), *faces.notes]  # which detectors ran
    info = clip.probe(source)
    found, tracked, count, tracker, short = find_tracks(faces, source, info, settings.sigma)
    placed, hidden, interpolated = _as_recorded(
        found, tracked, tracker, info.upright_shape, faces.size
    )
    record = run.record or keys.new_key_record()
    keyed = track_keys(anonymizer, keys.derive_seed(run.password, record), placed)
    text, tag, written = _held_sidecar(anonymizer, record, info, count, faces.size, placed, target)
    recorder = (
        track_ledger.Recorder(placed, float(info.rate), faces.crops, face_ledger)
        if face_ledger is not None
        else None
    )
    if recorder is not None:
        notes += [
            note for note in [ledger.check_appendable(face_ledger, len(recorder.wanted))] if note
        ]
    work = FacePass(
        placed,
        keyed,
        _anonymize_step(anonymizer),
        count,
        hidden,
        recorder=recorder,
        verify=written,
    )
    rewrite(
        anonymizer, faces, source, target, info, work, settings, {sidecar.TAG: tag} if tag else None
    )
    sidecar.write(side, text, settings.overwrite)
    return _anonymized_report(
        *(source, target, tag is not None, count, found, placed, interpolated, hidden, tracker),
        notes,
        short,
    )


def recover_video(
    run: Run, source: str | Path, target: str | Path, sidecar_path: str | Path | None = None
) -> VideoReport:
    """Recovers the anonymized clip ``source`` into ``target`` with ``run``, as its
    settings ask (`ClipRunSettings.of_run`): at the sidecar's places (``sidecar_path``,
    default ``source`` + `sidecar.SUFFIX`, else the container's copy). Without a
    sidecar, the run's record (a key file's) lets detection and tracking find the faces
    again: with its ``face_ledger`` (the key file's) only the tracks it verifies are
    recovered (`track_ledger`); without one, only with ``settings.redetect``, every
    track found (a face never anonymized is overwritten too)."""
    anonymizer, record, face_ledger = run.anonymizer, run.record, run.face_ledger
    settings = ClipRunSettings.of_run(run.settings)
    source, target = Path(source), Path(target)
    notes = _prepare_outputs(source, [target], settings.overwrite)
    info = clip.probe(source)
    side = Path(sidecar_path) if sidecar_path is not None else sidecar.path_for(source)
    regions, unverified = None, 0
    given = side if sidecar_path is not None or side.exists() else None
    found_sidecar = sidecar.of_clip(source, info.upright_shape, given)
    faces = run.finder  # after the checks that need no model
    if found_sidecar is not None:
        recorded, where = found_sidecar
        sidecar.check_use(
            recorded,
            where,
            anonymizer.fingerprint,
            info.upright_shape,
            faces.size,
            settings.ignore_model_mismatch,
        )
        record, placed, count = record or recorded.made.record, recorded.tracks, recorded.frames
        tracked = len(placed)
    elif record is not None:
        if face_ledger is None and not settings.redetect:
            raise InputError(
                f"{source}: no sidecar ({side}, or in the container's metadata) and no face ledger beside the key file, so the faces "
                "could only be found again by detection, which cannot tell an anonymized face from one that never was; "
                "pass --recover-redetected to recover every face found"
            )
        found, placed, count, _, _ = find_tracks(
            faces, source, info, settings.sigma
        )  # what the fallback hid stays hidden
        tracked = len(found)
        if face_ledger is not None:
            verified = track_ledger.verify(
                face_ledger,
                placed,
                clip.frames(source, info),
                faces.crops,
                faces.size,
                info.upright_shape,
            )
            placed, regions, unverified = verified.placed, verified.regions, verified.unverified
    else:
        raise InputError(
            f"{source}: no sidecar ({side}, or in the container's metadata); give the key file (--key-file) to find the faces again"
        )
    keyed = track_keys(anonymizer, keys.derive_seed(run.password, record), placed)
    work = FacePass(placed, keyed, _recover_step(anonymizer), count, regions=regions)
    rewrite(anonymizer, faces, source, target, info, work, settings)
    report = VideoReport(
        [target], count, tracked, _count(placed), notes=notes, unverified=unverified
    )
    if regions is not None and not placed:  # the ledger was asked and verified nothing
        report.notes.append(
            f"{source}: no face found again matched the key file's face ledger; the clip was re-encoded unchanged"
        )
    return report
