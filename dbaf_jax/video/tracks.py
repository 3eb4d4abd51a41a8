"""Face tracks over a clip: detections linked by ByteTrack (`supervision`), gaps
filled, landmarks smoothed, one alignment transform per track and frame.

A track's number (0, 1, ... in order of first appearance) chooses its key
(`keys.face_seed`), so a person keeps one anonymized face while in view and nobody's
key changes when someone else enters or leaves. Frames a track misses between two
detections (a blink of the detector, a brief occlusion) get linearly interpolated
landmarks, so the face is still anonymized there. A detection ByteTrack leaves
unmatched becomes a track of its own: a face is never left as it was. A detection
whose landmarks cannot be aligned (as for photos, `faces.photos.usable_side`), or,
when anonymizing, of the detectors' low-confidence band, is not tracked; its box is kept per frame (`Tracker.unusable`) for the irreversible
fallback (`faces.paste.hide`), and faces the user asked to leave (``min_face_size``)
are counted (`Tracker.left`).

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
from dbaf_jax.faces.detectors.base import Detections
from dbaf_jax.faces.photos import usable_side

DEFAULT_SIGMA = 2.0  # frames
CONTINUE_IOU = 0.3  # see Tracker._identity
LOST_SECONDS = 1.0  # a track missing this long ends; the person gets a new track (and key) after


@dataclasses.dataclass
class Track:
    """Face ``number``'s landmarks (T, 5, 2) on frames ``first`` .. ``first + T - 1``
    (detected or interpolated), and which of those frames were detected."""

    number: int
    first: int
    landmarks: np.ndarray
    detected: np.ndarray

    @property
    def last(self) -> int:
        return self.first + len(self.landmarks) - 1


class Tracker:
    """Feeds one frame's detections at a time (`add`), then gives the tracks (`tracks`)."""

    def __init__(self, frame_rate: float, min_face_size: float = 0.0, hide_doubtful: bool = True):
        self.min_face_size = min_face_size
        self.hide_doubtful = (
            hide_doubtful  # low-confidence detections: hidden (anonymizing), else tracked as faces
        )
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", FutureWarning
            )  # deprecated for the trackers package (pyproject.toml pins supervision)
            self._tracker = self._bytetrack(frame_rate)
        self._seen: dict[
            object, dict[int, np.ndarray]
        ] = {}  # tracker id -> frame -> landmarks (5, 2)
        self._order: list[object] = []
        self._alias: dict[int, object] = {}  # ByteTrack id -> the track it continues
        self._unmatched: list[
            tuple[object, np.ndarray]
        ] = []  # the last frame's unmatched faces and their boxes
        self._frame = 0
        self.unusable: dict[
            int, list[np.ndarray]
        ] = {}  # frame -> (4,) boxes of faces the model cannot take or low-confidence ones
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
        keep = []
        for i, (points, sure) in enumerate(zip(found.landmarks, found.confident())):
            side = usable_side(points)
            if side is None or (self.hide_doubtful and not sure):
                self.unusable.setdefault(self._frame, []).append(
                    np.asarray(found.boxes[i], np.float64)
                )
            elif side < self.min_face_size:
                self.left += 1
            else:
                keep.append(i)
        boxes = np.asarray(found.boxes, np.float32)[keep].reshape(-1, 4)
        detections = sv.Detections(
            xyxy=boxes,
            confidence=np.asarray(found.probs, np.float32)[keep],
            data={"row": np.arange(len(keep))},
        )
        tracked = self._tracker.update_with_detections(detections)
        rows = tracked.data.get("row", ())  # an empty result carries no data
        matched = set()
        for tracker_id, row in zip(tracked.tracker_id, rows):
            self._note(self._identity(int(tracker_id), boxes[row]), found.landmarks[keep[row]])
            matched.add(int(row))
        unmatched = []
        for row, index in enumerate(keep):
            if row not in matched:  # never left unanonymized: a track of its own ...
                identity = ("unmatched", self._frame, row)
                self._note(identity, found.landmarks[index])
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

    def _note(self, tracker_id: object, landmarks: np.ndarray) -> None:
        if tracker_id not in self._seen:
            self._seen[tracker_id] = {}
            self._order.append(tracker_id)
        self._seen[tracker_id][self._frame] = np.asarray(landmarks, np.float64)

    def tracks(self) -> list[Track]:
        """The tracks, numbered in order of first appearance, gaps interpolated."""
        return [_filled(number, self._seen[tid]) for number, tid in enumerate(self._order)]


def _filled(number: int, seen: dict[int, np.ndarray]) -> Track:
    frames = np.asarray(sorted(seen))
    points = np.stack([seen[f] for f in frames]).reshape(len(frames), -1)
    span = np.arange(frames[0], frames[-1] + 1)
    filled = np.stack(
        [np.interp(span, frames, points[:, j]) for j in range(points.shape[1])], axis=1
    )
    return Track(number, int(frames[0]), filled.reshape(len(span), 5, 2), np.isin(span, frames))


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
