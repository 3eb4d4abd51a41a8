"""Face tracks over a clip: detections linked by ByteTrack (`supervision`), gaps
filled, landmarks smoothed, one alignment transform per track and frame.

A track's number (0, 1, ... in order of first appearance) chooses its key
(`keys.face_seed`), so a person keeps one anonymized face while in view and nobody's
key changes when someone else enters or leaves. Frames a track misses between two
detections (a blink of the detector, a brief occlusion) get linearly interpolated
landmarks and boxes, so the face is still anonymized there. A detection ByteTrack
leaves unmatched becomes a track of its own: a face is never left as it was.

One face, one track: each frame's detections are first merged by the detectors' rule
(`ensemble.merge`: one detection per face, whichever detector found it), and two
tracks are joined into one when they are never detected on the same frame and, on a
frame where one of them is detected, the two are one face by that rule
(`ensemble.same_face` on their landmarks and boxes there): a face whose box moved too
far for ByteTrack between frames, or that ByteTrack left unmatched for a frame,
continues its track instead of lying under it as a second one with another key.

Reversible where sure: detections of the detectors' low-confidence band are tracked
with the others. When anonymizing, a track that is sure on any frame is a face, given
its key on every frame of it; a track never sure (``hide_doubtful``) is not numbered
and its box is hidden on each of its frames by the irreversible fallback
(`faces.paste.hide`), as a photo's low-band detection is, except on frames where it lies
on a face anonymized there (`ensemble.on_faces`: that face or part of it, whose recovery
needs its pixels). A detection whose landmarks cannot be aligned (as for photos,
`faces.photos.usable_side`) is not tracked: its box is hidden on its frame; faces the
user asked to leave (``min_face_size``) are counted (`Tracker.left`), those of the low
band among them hidden. `Tracker.hidden` gives every box the fallback hides, by frame.

Smoothing: every track's landmarks (T, 5, 2) are filtered along time with a centred
Gaussian of ``sigma`` frames (`scipy.ndimage.gaussian_filter1d`, edges repeated),
before the FFHQ alignment transform is computed from them. Both passes are available
because the clip is read twice (tracks first, faces second), so the filter has no lag;
the box mask lives in crop coordinates and so moves with the smoothed transform.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Iterable

import numpy as np
from scipy.ndimage import gaussian_filter1d

with warnings.catch_warnings():
    warnings.simplefilter(
        "ignore", UserWarning
    )  # "OpenCV is not installed": its NumPy path is used
    import supervision as sv

from dbaf_jax.faces import align
from dbaf_jax.faces.detectors import ensemble
from dbaf_jax.faces.detectors.base import Detections
from dbaf_jax.faces.photos import usable_side

DEFAULT_SIGMA = 2.0  # frames
CONTINUE_IOU = 0.3  # see Tracker._identity
LOST_SECONDS = 1.0  # a track missing this long ends; the person gets a new track (and key) after


@dataclasses.dataclass
class Track:
    """Face ``number``'s landmarks (T, 5, 2) and boxes (T, 4) on frames ``first`` ..
    ``first + T - 1`` (detected or interpolated), which of those frames were detected,
    and on which it was detected sure (T,) (by a detector's sure band)."""

    number: int
    first: int
    landmarks: np.ndarray
    detected: np.ndarray
    boxes: np.ndarray
    sure: np.ndarray

    @property
    def last(self) -> int:
        return self.first + len(self.landmarks) - 1


@dataclasses.dataclass(frozen=True)
class _Seen:
    """One detection of a track: landmarks (5, 2), box (4,), sure."""

    landmarks: np.ndarray
    box: np.ndarray
    sure: bool


class Tracker:
    """Feeds one frame's detections at a time (`add`), then gives the faces' tracks
    (`tracks`) and the boxes the fallback hides (`hidden`)."""

    def __init__(self, frame_rate: float, min_face_size: float = 0.0, hide_doubtful: bool = True):
        self.min_face_size = min_face_size
        self.hide_doubtful = (
            hide_doubtful  # never-sure tracks: hidden (anonymizing), else faces (recovering)
        )
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", FutureWarning
            )  # deprecated for the trackers package (pyproject.toml pins supervision)
            self._tracker = self._bytetrack(frame_rate)
        self._seen: dict[object, dict[int, _Seen]] = {}  # tracker id -> frame -> detection
        self._order: list[object] = []
        self._alias: dict[int, object] = {}  # ByteTrack id -> the track it continues
        self._unmatched: list[
            tuple[object, np.ndarray]
        ] = []  # the last frame's unmatched faces and their boxes
        self._frame = 0
        # frame -> (4,) boxes of detections that are not tracked but hidden: sure ones
        # (landmarks that cannot be aligned) and those of the low band (too small as well)
        self.unusable: dict[int, list[np.ndarray]] = {}
        self.doubtful: dict[int, list[np.ndarray]] = {}
        self.left = 0  # detections below min_face_size, left as they were by the user's choice

    @staticmethod
    def _bytetrack(frame_rate: float):
        return sv.ByteTrack(
            track_activation_threshold=0.0,  # every detection kept starts a track
            lost_track_buffer=int(LOST_SECONDS * 30),  # ByteTrack counts it in frames at 30 fps
            minimum_matching_threshold=0.8,
            frame_rate=max(1, int(round(frame_rate))),
            minimum_consecutive_frames=1,
        )

    def add(self, found: Detections) -> None:
        """The next frame's detections."""
        found = ensemble.merge([found])  # one detection per face, also from a lone detector
        keep = []
        for i, (points, sure) in enumerate(zip(found.landmarks, found.confident())):
            side = usable_side(points)
            if side is not None and side >= self.min_face_size:
                keep.append(i)
            elif side is not None and (sure or not self.hide_doubtful):
                self.left += 1
            else:
                untracked = self.unusable if sure or not self.hide_doubtful else self.doubtful
                untracked.setdefault(self._frame, []).append(np.asarray(found.boxes[i], np.float64))
        boxes = np.asarray(found.boxes, np.float32)[keep].reshape(-1, 4)
        detections = sv.Detections(
            xyxy=boxes,
            # Every kept detection is a face to track; the detectors' scores are not on one
            # scale (dlib's are margins), and which are sure is this module's concern.
            confidence=np.ones(len(keep), np.float32),
            data={"row": np.arange(len(keep))},
        )
        tracked = self._tracker.update_with_detections(detections)
        rows = tracked.data.get("row", ())  # an empty result carries no data
        sure = found.confident()
        matched = set()
        for tracker_id, row in zip(tracked.tracker_id, rows):
            index = keep[row]
            self._note(
                self._identity(int(tracker_id), boxes[row]),
                _Seen(found.landmarks[index], found.boxes[index], bool(sure[index])),
            )
            matched.add(int(row))
        unmatched = []
        for row, index in enumerate(keep):
            if row not in matched:  # never left unanonymized: a track of its own ...
                identity = ("unmatched", self._frame, row)
                self._note(
                    identity, _Seen(found.landmarks[index], found.boxes[index], bool(sure[index]))
                )
                unmatched.append((identity, boxes[row]))
        self._unmatched = unmatched  # ... which ByteTrack's next frame may continue
        self._frame += 1

    def _identity(self, tracker_id: int, box: np.ndarray) -> object:
        """ByteTrack confirms a new face only on its second frame; a new id that overlaps a
        face left unmatched on the frame before continues that face's track."""
        if tracker_id not in self._alias:
            self._alias[tracker_id] = tracker_id
            if tracker_id not in self._seen:
                for identity, previous in self._unmatched:
                    if sv.box_iou_batch(box[None], previous[None])[0, 0] >= CONTINUE_IOU:
                        self._alias[tracker_id] = identity
                        break
        return self._alias[tracker_id]

    def _note(self, tracker_id: object, seen: _Seen) -> None:
        if tracker_id not in self._seen:
            self._seen[tracker_id] = {}
            self._order.append(tracker_id)
        self._seen[tracker_id][self._frame] = seen

    def _all(self) -> list[Track]:
        """Every track, joined (`joined`) and in order of first appearance, numbered in that order."""
        faces = joined([self._seen[tid] for tid in self._order])
        return [_filled(number, seen) for number, seen in enumerate(faces)]

    def _is_face(self, track: Track) -> bool:
        return bool(track.sure.any()) or not self.hide_doubtful

    def tracks(self) -> list[Track]:
        """The faces' tracks (sure on some frame; every track when not ``hide_doubtful``),
        numbered 0, 1, ... in order of first appearance, gaps interpolated."""
        faces = [track for track in self._all() if self._is_face(track)]
        return [dataclasses.replace(track, number=number) for number, track in enumerate(faces)]

    def hidden(self, faces: dict[int, np.ndarray] | None = None) -> dict[int, list[np.ndarray]]:
        """Frame -> the (4,) boxes (x1, y1, x2, y2) the fallback hides there: detections
        that are not tracked (`unusable`, `doubtful`) and the boxes of tracks never sure, on
        every frame of each (interpolated ones included), but for a low-band box lying on
        a face anonymized on its frame (`ensemble.on_faces`; ``faces``: frame -> (M, 4)
        boxes of the faces anonymized there, None: none), which is that face or part of it."""
        faces = faces or {}
        low = {frame: list(found) for frame, found in self.doubtful.items()}
        for track in self._all():
            if not self._is_face(track):
                for offset, box in enumerate(track.boxes):
                    low.setdefault(track.first + offset, []).append(box)
        boxes = {frame: list(found) for frame, found in self.unusable.items()}
        for frame, found in low.items():
            on_face = ensemble.on_faces(
                np.reshape(found, (-1, 4)), faces.get(frame, np.zeros((0, 4)))
            )
            boxes.setdefault(frame, []).extend(box for box, on in zip(found, on_face) if not on)
        return {frame: found for frame, found in boxes.items() if found}


def _filled(number: int, seen: dict[int, _Seen]) -> Track:
    frames = np.asarray(sorted(seen))
    span = np.arange(frames[0], frames[-1] + 1)

    def interpolated(values: np.ndarray) -> np.ndarray:
        flat = values.reshape(len(frames), -1)
        return np.stack([np.interp(span, frames, flat[:, j]) for j in range(flat.shape[1])], 1)

    points = np.stack([seen[f].landmarks for f in frames]).astype(np.float64)
    boxes = np.stack([seen[f].box for f in frames]).astype(np.float64)
    detected = np.isin(span, frames)
    sure = np.zeros(len(span), bool)
    sure[frames - frames[0]] = [seen[f].sure for f in frames]
    return Track(
        number,
        int(frames[0]),
        interpolated(points).reshape(len(span), 5, 2),
        detected,
        interpolated(boxes),
        sure,
    )


def joined(tracks: list[dict[int, _Seen]]) -> list[dict[int, _Seen]]:
    """``tracks`` (each: frame -> detection) with the tracks of one face joined (module
    doc), in order of first appearance. Two tracks (or joined groups) join when no frame
    has a detection of both and on some frame, with at least one of them detected there,
    their landmarks and boxes (interpolated where not detected) are one face."""
    filled = [_filled(i, seen) for i, seen in enumerate(tracks)]
    group = list(range(len(tracks)))
    frames_of = [set(seen) for seen in tracks]  # each group's detected frames (at its root)

    def root(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    present: dict[int, list[int]] = {}
    for i, track in enumerate(filled):
        for frame in range(track.first, track.last + 1):
            present.setdefault(frame, []).append(i)
    for frame in sorted(present):
        here = present[frame]
        if len(here) < 2:
            continue
        at = [frame - filled[i].first for i in here]
        same = ensemble.same_face(
            np.stack([filled[i].boxes[k] for i, k in zip(here, at)]),
            np.stack([filled[i].landmarks[k] for i, k in zip(here, at)]),
        )
        detected = [bool(filled[i].detected[k]) for i, k in zip(here, at)]
        for a, b in zip(*np.nonzero(np.triu(same, 1))):
            if not (detected[a] or detected[b]):
                continue
            first, second = root(here[a]), root(here[b])
            if first == second or frames_of[first] & frames_of[second]:
                continue
            first, second = min(first, second), max(first, second)
            group[second] = first
            frames_of[first] |= frames_of[second]
    merged: dict[int, dict[int, _Seen]] = {}
    for i, seen in enumerate(tracks):
        merged.setdefault(root(i), {}).update(seen)
    return sorted(merged.values(), key=min)


def smoothed(landmarks: np.ndarray, sigma: float) -> np.ndarray:
    """``landmarks`` (T, 5, 2) filtered along time by a Gaussian of ``sigma`` frames (0: as they are)."""
    if sigma <= 0 or len(landmarks) < 2:
        return landmarks
    return gaussian_filter1d(landmarks, sigma, axis=0, mode="nearest")


def transforms(track: Track, size: int, sigma: float = DEFAULT_SIGMA) -> np.ndarray:
    """The track's frame-to-crop transforms (T, 2, 3) from its smoothed landmarks."""
    return np.stack(
        [align.alignment_transform(points, size) for points in smoothed(track.landmarks, sigma)]
    )


def by_frame(
    placed: Iterable[tuple[int, int, np.ndarray]],
) -> dict[int, list[tuple[int, np.ndarray]]]:
    """(track number, first frame, transforms (T, 2, 3)) -> frame -> [(track number, transform)]."""
    faces: dict[int, list[tuple[int, np.ndarray]]] = {}
    for number, first, stack in placed:
        for offset, transform in enumerate(stack):
            faces.setdefault(first + offset, []).append((number, transform))
    return faces
