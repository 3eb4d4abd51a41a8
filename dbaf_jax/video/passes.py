"""A clip's two passes: the first (`find_tracks`) detects the faces of its frames (in
tiles when a frame is larger than the detector looks at whole, `detectors.tiling`, as a
photo is) and links them into tracks, keeping only landmarks; the second (`rewrite`)
crops those faces, runs the model on batches gathered across frames and tracks, pastes
them back and encodes the frames as they complete. Each stage holds a bounded number of frames (`FRAME_BYTES`).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Callable, Iterator

import jax
import numpy as np

from dbaf_jax.core import pipeline
from dbaf_jax.core.errors import InputError
from dbaf_jax.faces import photos
from dbaf_jax.faces.detectors import tiling
from dbaf_jax.inference import face_batches
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.storage import atomic_files
from dbaf_jax.video import clip, track_ledger, tracks
from dbaf_jax.video.settings import ClipRunSettings

# Frames waiting for their faces are bounded by this many per batch of faces.
FRAMES_PER_BATCH = 4
# Frames detected together on an accelerator (`Detector.detect_many`): fewer, larger
# device calls. On a CPU one at a time: batching measured 3-20% slower there
# (benchmarks/speed/detect_frames.py, docs/video.md).
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


Placed = track_ledger.Placed


def find_tracks(
    faces: photos.PhotoFaces, source: Path, info: clip.ClipInfo, sigma: float
) -> tuple[list[tracks.Track], Placed, int, tracks.Tracker, str | None]:
    """First pass: the clip's tracks, their smoothed transforms, its frame count, the
    tracker (its unusable detections and the faces left), and a note when fewer frames
    decoded than the container declares (`clip.shortfall`)."""
    tracker = tracks.Tracker(float(info.rate), faces.min_face_size, faces.hide_doubtful)
    # Frames larger than the detector looks at in its own pixels go to it in tiles, as
    # photos do: a 4K frame shrunk to CenterFace's 1920 x 1088 loses its small faces.
    detector = tiling.Tiled(faces.detector, faces.tile)
    count, times = 0, []
    together = 1 if jax.default_backend() == "cpu" else DETECT_FRAMES
    for chunk in pipeline.chunks(
        pipeline.in_background(clip.frames(source, info), frames_within(2 * DETECT_FRAMES, info)),
        together,
    ):
        for found in detector.detect_many([frame.pixels for frame in chunk]):
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


def track_keys(anonymizer: FaceAnonymizer, seed: bytes, placed: Placed) -> dict[int, np.ndarray]:
    if not placed:
        return {}
    numbers = [number for number, _, _ in placed]
    return dict(zip(numbers, np.asarray(anonymizer.face_keys(seed, numbers))))


@dataclasses.dataclass
class FacePass:
    """What the second pass does to a clip: each track's transforms (``placed``) and key
    (``track_keys``, by track number), ``step(crops, keys)`` (the model), the frames the
    first pass counted, the boxes the fallback hides (``hidden[frame]``), the regions each
    face may change (``regions[frame]`` in `tracks.by_frame` order; None: anywhere under
    its mask), the ledger's ``recorder``, which sees each frame as made, and ``verify``,
    called with the finished clip's temporary file before anything of it is kept
    (an exception: nothing written)."""

    placed: Placed
    track_keys: dict[int, np.ndarray]
    step: Callable
    frame_count: int = 0
    hidden: dict[int, list[np.ndarray]] | None = None
    regions: dict[int, list[track_ledger.Region]] | None = None
    recorder: track_ledger.Recorder | None = None
    verify: Callable[[Path], None] | None = None


def processed(
    anonymizer: FaceAnonymizer,
    faces: photos.PhotoFaces,
    frames: Iterator[clip.Frame],
    work: FacePass,
    batch_size: int,
) -> Iterator[np.ndarray]:
    """The frames (H, W, 3) uint8 with their faces processed as ``work`` says, in order.
    Faces are batched across frames and tracks (`face_batches`), at most
    `FRAMES_PER_BATCH` frames per face of a batch waiting."""
    hidden, regions, recorder = work.hidden or {}, work.regions or {}, work.recorder
    track_keys = work.track_keys
    by_frame = tracks.by_frame(work.placed)
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
        items(), faces, work.step, size, FRAMES_PER_BATCH * size, FRAME_BYTES
    ):
        if recorder is not None:
            recorder.observe(done.item.tag, done.pixels, done.item.faces, done.item.crops)
        yield done.pixels


def rewrite(
    anonymizer: FaceAnonymizer,
    faces: photos.PhotoFaces,
    source: Path,
    target: Path,
    info: clip.ClipInfo,
    work: FacePass,
    settings: ClipRunSettings,
    tags: dict[str, str] | None = None,
) -> None:
    """Second pass: writes ``target``, the clip ``source`` with its faces processed as
    ``work`` says, encoded as ``settings`` asks, its container carrying ``tags``; the
    ledger's entries (``work.recorder``) are written before the clip is in place."""
    encoding, recorder, frame_count = settings.encoding, work.recorder, work.frame_count
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
                for pixels in processed(anonymizer, faces, source_frames(), work, settings.batch):
                    encoder.submit(functools.partial(writer.write, pixels, originals.pop(0).pts))
                    written += 1
            if written != frame_count:
                raise InputError(
                    f"{source}: decoded {written} frames, not the {frame_count} of the first pass"
                )
            writer.finish()
            if work.verify is not None:
                work.verify(tmp)
            if (
                recorder is not None
            ):  # before the clip is in place: no clip is published without its ledger entries
                recorder.write()
        except BaseException:
            writer.close()
            raise

    atomic_files.write_file(target, write, settings.overwrite)
