"""Face tracks (dbaf_jax/video/tracks.py) from made-up detections: one face is one track
(a face whose box jumps between detectors, or that ByteTrack leaves unmatched for a
frame, continues its track), a track sure on any frame is a face on every frame of it
(its low-band frames anonymized with its key), a track never sure is hidden on every
frame of it, interpolated ones included."""

import numpy as np

from dbaf_jax.faces.detectors.base import Detections
from dbaf_jax.video import tracks
from tests.face_helpers import landmarks_at

SIDE = 40.0


def points(x: float, y: float, side: float = SIDE) -> np.ndarray:
    return landmarks_at(x, y, side)


def box(x: float, y: float, side: float = SIDE, top: float = 0.5) -> np.ndarray:
    """A box around the face at (x, y): ``top`` of its side above the centre (0.5:
    MTCNN's, which takes in the forehead; 0.3: dlib's, which stops at the brows)."""
    return np.array([x - side / 2, y - top * side, x + side / 2, y + side / 2], np.float32)


def frame(*faces) -> Detections:
    """One frame's detections: each face as (x, y, sure), (x, y, sure, top) or
    (x, y, sure, top, box side)."""
    if not faces:
        return Detections(
            np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros((0, 5, 2), np.float32)
        )
    return Detections(
        np.stack([box(f[0], f[1], *(f[4:5] or [SIDE]), *f[3:4]) for f in faces]),
        np.ones(len(faces), np.float32),
        np.stack([points(f[0], f[1]) for f in faces]),
        np.array([f[2] for f in faces]),
    )


def tracked(frames, hide_doubtful=True) -> tracks.Tracker:
    tracker = tracks.Tracker(12.0, hide_doubtful=hide_doubtful)
    for found in frames:
        tracker.add(found)
    return tracker


def test_a_track_sure_on_one_frame_is_a_face_on_every_frame():
    """A face sure on one frame of ten (the low band on the others) is one track,
    anonymized on all ten; a face never sure is hidden on each of its frames, the frame
    it was missed on included (its box interpolated), and gets no number."""
    frames = []
    for t in range(10):
        faces = [(60 + 3 * t, 100, t == 4)]
        if t != 5:
            faces.append((220, 100 + t, False))
        frames.append(frame(*faces))
    tracker = tracked(frames)
    (face,) = tracker.tracks()
    assert (face.number, face.first, face.last) == (0, 0, 9)
    assert face.detected.all() and face.sure.tolist() == [t == 4 for t in range(10)]
    hidden = tracker.hidden()
    assert sorted(hidden) == list(range(10)) and all(len(boxes) == 1 for boxes in hidden.values())
    np.testing.assert_allclose(hidden[5][0], box(220, 105), atol=1e-4)  # interpolated
    recovering = tracked(frames, hide_doubtful=False)
    assert len(recovering.tracks()) == 2 and not recovering.hidden()


def test_a_face_whose_box_jumps_between_detectors_stays_one_track():
    """One face at one place, found by one detector on even frames (a tall box) and by
    the other on odd ones (a box cut at the brows), and missed on frame 5: one track."""
    frames = [
        frame() if t == 5 else frame((100, 100, True, 0.5 if t % 2 else 0.3)) for t in range(8)
    ]
    (face,) = tracked(frames).tracks()
    assert (face.first, face.last, int(face.detected.sum())) == (0, 7, 7)


def test_tracks_of_one_face_are_joined_and_two_faces_are_not():
    """A face whose box on frame 4 is three times as large (another detector's, its
    landmarks where they were) is left unmatched by ByteTrack and would lie under its
    own track's interpolated frame as a second track with another key; it is joined
    into that track. A second face beside it (its own places, detected on the same
    frames) stays a track of its own, and so does a face where the first one's
    interpolated frame is not."""
    frames = [
        frame((100 + 2 * t, 100, True, 0.5, 3 * SIDE if t == 4 else SIDE), (250, 150, True))
        for t in range(8)
    ]
    found = tracked(frames).tracks()
    assert [(t.first, t.last) for t in found] == [(0, 7), (0, 7)]
    assert found[0].detected.all() and found[1].detected.all()
    np.testing.assert_allclose(found[0].landmarks[4], points(108, 100))
    frames[4] = frame((180, 100, True, 0.5, 3 * SIDE), (250, 150, True))
    found = tracked(frames).tracks()
    assert [(t.first, t.last) for t in found] == [(0, 7), (0, 7), (4, 4)]
    assert found[0].detected.tolist() == [True] * 4 + [False] + [True] * 3


def test_two_detections_of_one_face_on_a_frame_are_one():
    """A lone detector's two boxes of one face (its suppression kept both) are one face:
    one track, sure when either is."""
    doubled = Detections(
        np.stack([box(100, 100), box(101, 99, top=0.3)]),
        np.ones(2, np.float32),
        np.stack([points(100, 100), points(101.5, 99)]),
        np.array([False, True]),
    )
    (face,) = tracked([doubled] * 3).tracks()
    assert face.sure.all() and (face.first, face.last) == (0, 2)


def test_a_low_band_track_on_an_anonymized_face_is_not_hidden_there():
    """A never-sure track lying on a sure face (a box on its lower part, landmarks of a
    smaller face: not merged) is that face or part of it: on the frames where that face
    is anonymized its box is not hidden; where the face is not (the runner left it out),
    or for a low-band box that only touches it, the fallback hides it."""
    frames = []
    for t in range(6):
        face, on, touching = (100, 100 + t, 40.0), (100, 112 + t, 18.0), (128, 100 + t, 24.0)
        frames.append(
            Detections(
                np.stack([box(*face), box(*on), box(*touching)]),  # on: wholly inside the face's
                np.ones(3, np.float32),
                np.stack([points(*face), points(*on), points(*touching)]),
                np.array([True, False, False]),
            )
        )
    tracker = tracked(frames)
    (face,) = tracker.tracks()
    everywhere = tracker.hidden()
    assert all(len(everywhere[t]) == 2 for t in range(6))
    faces = {t: face.boxes[t][None] for t in range(6) if t != 3}
    hidden = tracker.hidden(faces)
    assert sorted(hidden) == list(range(6))
    for t in range(6):
        kept = [np.round(b).tolist() for b in hidden[t]]
        assert np.round(box(128, 100 + t, 24.0)).tolist() in kept
        assert (np.round(box(100, 112 + t, 18.0)).tolist() in kept) == (t == 3), t
