"""Anonymize a clip with per-track keys, and recover it: what the video commands call.

The clip is read twice and never held whole: the first pass detects the faces of
its frames (`DETECT_FRAMES` at a time on an accelerator) and links them into tracks
(`tracks.Tracker`), keeping only landmarks; the tracks are then filled and smoothed
and give every face of every frame its transform.
The second pass crops those faces, runs the model on batches gathered across frames
and tracks (each face with its track's key), pastes them back through the mask and
encodes the frames as they complete, before any lossy step of ours. Decoding runs ahead
on a thread of its own, encoding behind on another, and a batch's frames are pasted
while the next batch computes (`dbaf_jax.pipeline`). The output is
written to a hidden temporary file renamed into place when whole
(`images.write_file`) with a copy of the sidecar in its container metadata, then the
sidecar file beside it. Recovery reads the sidecar (the file, else the container's
copy; or, with a key file and neither, re-detects and re-tracks the anonymized clip and
recovers the tracks the key file's face ledger verifies, `track_ledger`) and changes
only the pixels under the faces' masks.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path
from typing import Callable, Iterator

import jax
import numpy as np

from dbaf_jax import images, keys, metadata, output_folder, pipeline
from dbaf_jax.errors import InputError, ModelMismatchError, printable
from dbaf_jax.faces import ledger, photos
from dbaf_jax.inference import face_batches
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.inference.planning import check_outputs
from dbaf_jax.inference.report import EXIT_FACES_LEFT, EXIT_SKIPPED
from dbaf_jax.video import clip, sidecar, track_ledger, tracks

# Frames waiting for their faces are bounded by this many per batch of faces.
FRAMES_PER_BATCH = 4
# Frames detected together on an accelerator (`Detector.detect_many`): fewer, larger
# device calls. On a CPU one at a time: batching measured 3-20% slower there
# (benchmarks/detect_frames.py, docs/video.md).
DETECT_FRAMES = 8
# Frames decoded ahead of the model and frames waiting for the encoder, each on a thread
# of its own (`pipeline`): the device is not left idle while the host decodes or encodes.
DECODE_AHEAD = 16
ENCODE_BEHIND = 16
# Each of those three bounds (frames waiting for a batch, decoded ahead, waiting for the
# encoder) also holds at most this many bytes of frames: 4K frames are 25 MB each.
FRAME_BYTES = 256 << 20


def frames_within(bound: int, info: clip.ClipInfo) -> int:
    """``bound`` frames, fewer for large frames (`FRAME_BYTES`), at least 2."""
    return max(2, min(bound, FRAME_BYTES // (info.width * info.height * 3)))


@dataclasses.dataclass
class VideoReport:
    written: list[Path] = dataclasses.field(default_factory=list)
    frames: int = 0
    tracks: int = 0
    faces: int = 0  # faces processed over all frames
    interpolated: int = 0  # of those, on frames where their track was not detected
    hidden: int = 0  # detections the model cannot take, pixelated (irreversible)
    left: int = 0  # detections below --min-face-size, left as they were
    notes: list[str] = dataclasses.field(default_factory=list)
    unverified: int = 0  # recovery without a sidecar: re-detected tracks the face ledger did not verify, left as they were
    short: bool = False  # the clip decoded fewer frames than its container declares (`clip.shortfall`, a note says so)

    @property
    def status(self) -> int:
        """The command's exit status: as for photos, `report.EXIT_SKIPPED` when part of the
        clip was not there to process, `report.EXIT_FACES_LEFT` when a face was left as it was."""
        return EXIT_SKIPPED if self.short else EXIT_FACES_LEFT if self.left else 0

    def summary(self) -> str:
        return (
            f"{self.written[0] if self.written else 'nothing written'}: processed {self.faces} face(s) in {self.frames} frame(s), "
            f"{self.tracks} track(s) ({self.interpolated} interpolated); {self.hidden} face(s) hidden by the fallback (pixelated,"
            f" irreversible), {self.left} left as they were (--min-face-size)"
            + (
                f"; {self.unverified} re-detected track(s) not verified as anonymized, left as they were"
                if self.unverified
                else ""
            )
        )

    def print(self, out=None) -> None:
        out = out or sys.stderr
        for note in self.notes:
            print(printable(f"note: {note}"), file=out)
        print(printable(self.summary()), file=out)
        for path in self.written:
            print(printable(f"wrote {path}"), file=out)


Placed = track_ledger.Placed


def find_tracks(
    faces: photos.PhotoFaces, source: Path, info: clip.ClipInfo, sigma: float
) -> tuple[list[tracks.Track], Placed, int, tracks.Tracker, str | None]:
    """First pass: the clip's tracks, their smoothed transforms, its frame count, the
    tracker (its unusable detections and the faces left), and a note when fewer frames
    decoded than the container declares (`clip.shortfall`)."""
    tracker = tracks.Tracker(float(info.rate), faces.min_face_size, faces.hide_doubtful)
    count, times = 0, []
    together = 1 if jax.default_backend() == "cpu" else DETECT_FRAMES
    for chunk in pipeline.chunks(
        pipeline.in_background(clip.frames(source, info), frames_within(2 * DETECT_FRAMES, info)),
        together,
    ):
        for found in faces.detector.detect_many([frame.pixels for frame in chunk]):
            tracker.add(found)
        count += len(chunk)
        times = [times[0] if times else chunk[0].pts, chunk[-1].pts]
    found = tracker.tracks()
    short = clip.shortfall(source, info, count, *(times or [None, None]))
    return (
        found,
        [(t.number, t.first, tracks.transforms(t, faces.size, sigma)) for t in found],
        count,
        tracker,
        short,
    )


def _track_keys(anonymizer: FaceAnonymizer, seed: bytes, placed: Placed) -> dict[int, np.ndarray]:
    if not placed:
        return {}
    numbers = [number for number, _, _ in placed]
    return dict(zip(numbers, np.asarray(anonymizer.face_keys(seed, numbers))))


def _processed(
    anonymizer: FaceAnonymizer,
    faces: photos.PhotoFaces,
    frames: Iterator[clip.Frame],
    placed: Placed,
    track_keys: dict[int, np.ndarray],
    step: Callable,
    batch_size: int,
    hidden: dict[int, list[np.ndarray]] | None = None,
    regions: dict[int, list[track_ledger.Region]] | None = None,
    recorder: track_ledger.Recorder | None = None,
) -> Iterator[np.ndarray]:
    """The frames (H, W, 3) uint8 with their faces processed by ``step(crops, keys)``, in
    order, each face's changes within ``regions[frame]`` (in `tracks.by_frame` order;
    None: anywhere under its mask), the boxes ``hidden[frame]`` hidden by the fallback
    (`paste.hide`); ``recorder`` sees each frame as made. Faces are batched across frames
    and tracks (`face_batches`), at most `FRAMES_PER_BATCH` frames per face of a batch
    waiting."""
    hidden, regions = hidden or {}, regions or {}
    by_frame = tracks.by_frame(placed)
    size = anonymizer.padded_size(batch_size)

    def items() -> Iterator[face_batches.Item]:
        for frame in frames:
            here = [
                photos.AlignedFace(number, transform, faces.size)
                for number, transform in by_frame.get(frame.index, [])
            ]
            face_keys = np.stack([track_keys[face.index] for face in here]) if here else None
            yield face_batches.Item(
                frame.pixels,
                here,
                faces.crops(frame.pixels, here),
                face_keys,
                regions.get(frame.index),
                hidden.get(frame.index, []),
                frame.index,
            )

    for done in face_batches.processed(
        items(), faces, step, size, FRAMES_PER_BATCH * size, FRAME_BYTES
    ):
        if recorder is not None:
            recorder.observe(done.item.tag, done.pixels, done.item.faces, done.item.crops)
        yield done.pixels


def _rewrite(
    anonymizer,
    faces,
    source: Path,
    target: Path,
    info: clip.ClipInfo,
    encoding: clip.Encoding,
    placed: Placed,
    track_keys,
    step,
    batch_size: int,
    frame_count: int,
    overwrite: bool,
    hidden: dict[int, list[np.ndarray]] | None = None,
    tags: dict[str, str] | None = None,
    regions: dict[int, list[track_ledger.Region]] | None = None,
    recorder: track_ledger.Recorder | None = None,
) -> None:
    format, codec = clip.muxer(target), encoding.codec_for(target)
    originals: list[clip.Frame] = []  # the frame being written: its time

    def source_frames() -> Iterator[clip.Frame]:
        for frame in pipeline.in_background(
            clip.frames(source, info), frames_within(DECODE_AHEAD, info)
        ):
            originals.append(frame)
            yield frame

    def write(tmp: Path) -> None:
        writer = clip.Writer(source, tmp, format, info, encoding, codec, tags)
        try:
            written = 0
            with pipeline.Writer(
                frames_within(ENCODE_BEHIND, info), workers=1
            ) as encoder:  # one worker: frames in order
                for pixels in _processed(
                    anonymizer,
                    faces,
                    source_frames(),
                    placed,
                    track_keys,
                    step,
                    batch_size,
                    hidden,
                    regions,
                    recorder,
                ):
                    encoder.submit(functools.partial(writer.write, pixels, originals.pop(0).pts))
                    written += 1
            if written != frame_count:
                raise InputError(
                    f"{source}: decoded {written} frames, not the {frame_count} of the first pass"
                )
            writer.finish()
            if (
                recorder is not None
            ):  # before the clip is in place: no clip is published without its ledger entries
                recorder.write()
        except BaseException:
            writer.close()
            raise

    images.write_file(target, write, overwrite)


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


def _count(placed: Placed) -> int:
    return sum(len(stack) for _, _, stack in placed)


def anonymize_video(
    anonymizer: FaceAnonymizer,
    faces: photos.PhotoFaces,
    password: str,
    source: str | Path,
    target: str | Path,
    batch_size: int,
    overwrite: bool = False,
    record: keys.KeyRecord | None = None,
    encoding: clip.Encoding = clip.Encoding(),
    sigma: float = tracks.DEFAULT_SIGMA,
    face_ledger: Path | None = None,
) -> VideoReport:
    """Anonymizes every tracked face of the clip ``source`` into ``target`` (same size,
    rate, rotation, audio) and writes ``target``'s sidecar. ``record``: a key file's
    (else a fresh salt); ``face_ledger`` (with a key file: `ledger.ledger_path`) gets
    the tracks' entries that recovery without a sidecar verifies faces against
    (`track_ledger`)."""
    source, target = Path(source), Path(target)
    side = sidecar.path_for(target)
    notes = _prepare_outputs(source, [target, side], overwrite)
    if face_ledger is not None:
        # Before any frame is read, then again with its entries counted.
        notes += [note for note in [ledger.check_appendable(face_ledger, 1)] if note]
    notes += [faces.describe(), *faces.notes]  # which detectors ran
    info = clip.probe(source)
    found, placed, count, tracker, short = find_tracks(faces, source, info, sigma)
    record = record or keys.new_key_record()
    track_keys = _track_keys(anonymizer, keys.derive_seed(password, record), placed)
    recorded = sidecar.content(
        metadata.anonymization(record, anonymizer.fingerprint),
        info.upright_shape,
        count,
        faces.size,
        placed,
    )
    try:  # the bounds recovery holds a sidecar to (a crowd denser than one face per 32x32 px breaks them)
        sidecar.check(recorded)
    except ValueError as err:
        notes.append(
            f"{target}: its sidecar breaks the bounds recover_video holds sidecars to ({err}), so recover_video will "
            "refuse it: the clip is anonymized but cannot be recovered"
        )
    tag = sidecar.as_tag(recorded) if clip.holds_tags(target) else None
    recorder = (
        track_ledger.Recorder(placed, float(info.rate), faces.crops, face_ledger)
        if face_ledger is not None
        else None
    )
    if recorder is not None:
        notes += [
            note for note in [ledger.check_appendable(face_ledger, len(recorder.wanted))] if note
        ]
    _rewrite(
        anonymizer,
        faces,
        source,
        target,
        info,
        encoding,
        placed,
        track_keys,
        _anonymize_step(anonymizer),
        batch_size,
        count,
        overwrite,
        tracker.unusable,
        {sidecar.TAG: tag} if tag else None,
        recorder=recorder,
    )
    sidecar.write(side, recorded, overwrite)
    report = VideoReport(
        [target, side],
        count,
        len(found),
        _count(placed),
        sum(int((~t.detected).sum()) for t in found),
        sum(map(len, tracker.unusable.values())),
        tracker.left,
        notes,
        short=short is not None,
    )
    report.notes += [short] if short else []
    if tag is None:
        where = (
            f"the {clip.muxer(target)} container cannot hold it"
            if not clip.holds_tags(target)
            else "it is too long for a container tag"
        )
        report.notes.append(
            f"{target}: the sidecar is only in {side} ({where}): keep the two together to recover the clip"
        )
    if not found and not tracker.unusable and not tracker.left:
        report.notes.append(
            f"{source}: no face found in {count} frame(s); the clip was re-encoded unchanged"
        )
    return report


def recover_video(
    anonymizer: FaceAnonymizer,
    faces: photos.PhotoFaces,
    password: str,
    source: str | Path,
    target: str | Path,
    batch_size: int,
    overwrite: bool = False,
    record: keys.KeyRecord | None = None,
    sidecar_path: str | Path | None = None,
    encoding: clip.Encoding = clip.Encoding(),
    sigma: float = tracks.DEFAULT_SIGMA,
    ignore_model_mismatch: bool = False,
    redetect: bool = False,
    face_ledger: list[ledger.Entry] | None = None,
) -> VideoReport:
    """Recovers the anonymized clip ``source`` into ``target``: at the sidecar's places
    (default ``source`` + `sidecar.SUFFIX`, else the container's copy). Without a
    sidecar, ``record`` (a key file's) lets detection and tracking find the faces
    again: with ``face_ledger`` (the key file's) only the tracks it verifies are
    recovered (`track_ledger`); without one, only with ``redetect``, every track found
    (a face never anonymized is overwritten too)."""
    source, target = Path(source), Path(target)
    notes = _prepare_outputs(source, [target], overwrite)
    info = clip.probe(source)
    side = Path(sidecar_path) if sidecar_path is not None else sidecar.path_for(source)
    regions, unverified = None, 0
    in_file = sidecar_path is not None or side.exists()
    tag = None if in_file else clip.read_tag(source, sidecar.TAG)
    if in_file or tag is not None:
        limit = sidecar.max_bytes(
            info.upright_shape, clip.packet_count(source)
        )  # refused by size before it is parsed
        recorded, where = (
            (sidecar.read(side, limit), side)
            if tag is None
            else (sidecar.from_tag(tag, source, limit), f"{source} (its container's sidecar)")
        )
        if recorded.made.fingerprint != anonymizer.fingerprint and not ignore_model_mismatch:
            raise ModelMismatchError(
                f"{where}: made by the model {recorded.made.fingerprint}, not {anonymizer.fingerprint} (--ignore-model-mismatch to go on)"
            )
        if recorded.shape != info.upright_shape or recorded.size != faces.size:
            raise InputError(
                f"{where}: records a {recorded.shape} clip and {recorded.size}-pixel crops, not this clip's {info.upright_shape} and the model's {faces.size}"
            )
        record, placed, count = record or recorded.made.record, recorded.tracks, recorded.frames
        tracked = len(placed)
    elif record is not None:
        if face_ledger is None and not redetect:
            raise InputError(
                f"{source}: no sidecar ({side}, or in the container's metadata) and no face ledger beside the key file, so the faces "
                "could only be found again by detection, which cannot tell an anonymized face from one that never was; "
                "pass --recover-redetected to recover every face found"
            )
        found, placed, count, _, _ = find_tracks(
            faces, source, info, sigma
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
    track_keys = _track_keys(anonymizer, keys.derive_seed(password, record), placed)
    _rewrite(
        anonymizer,
        faces,
        source,
        target,
        info,
        encoding,
        placed,
        track_keys,
        _recover_step(anonymizer),
        batch_size,
        count,
        overwrite,
        regions=regions,
    )
    report = VideoReport(
        [target], count, tracked, _count(placed), notes=notes, unverified=unverified
    )
    if regions is not None and not placed:  # the ledger was asked and verified nothing
        report.notes.append(
            f"{source}: no face found again matched the key file's face ledger; the clip was re-encoded unchanged"
        )
    return report
