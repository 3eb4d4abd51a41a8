"""One detection per face however many detectors run (dbaf_jax/faces/detectors/ensemble.py):
detections are one face when their boxes overlap and their landmarks agree relative to
the face's size. On real photos and the frames of a real clip, where MTCNN's boxes take
in the forehead and dlib's stop at the brows, every face both find comes out once, and
nothing either finds is lost; on made-up detections, a third detector's boxes of another
extent join too, a face beside or behind another stays its own, and one detector's two
boxes of one face are one."""

import numpy as np
import pytest

from convert.common import run
from convert.mtcnn import main as convert_mtcnn
from dbaf_jax.faces.detectors import registry
from dbaf_jax.faces.detectors.base import Detections, overlap_of_smaller
from dbaf_jax.faces.detectors.ensemble import merge, same_face
from dbaf_jax.storage import images
from dbaf_jax.video import clip
from fixtures import labelled
from tests.face_helpers import landmarks_at
from tests.paths import DATA
from tests.video_clips import pan_frames

CLIP = DATA / "table_two_people_cut.mp4"  # 4 frames of a real clip, 1280x960


@pytest.fixture(scope="module")
def detectors(tmp_path_factory):
    """MTCNN and dlib's HOG as the default runs them (their low bands on)."""
    out = tmp_path_factory.mktemp("ensemble")
    run(convert_mtcnn, ["--out", str(out)])
    return [
        registry.DETECTORS["mtcnn"].build(out / "mtcnn", True),
        registry.DETECTORS["dlib-hog"].build(None, True),
    ]


def eyes(found: Detections) -> np.ndarray:
    """(N, 2) the midpoints of each detection's eyes."""
    return found.landmarks[:, :2].mean(1)


def inside(point: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    return (
        (boxes[:, 0] <= point[0])
        & (point[0] <= boxes[:, 2])
        & (boxes[:, 1] <= point[1])
        & (point[1] <= boxes[:, 3])
    )


def iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
    return float(w * h / (area(a) + area(b) - w * h))


def of_face(label: np.ndarray, found: Detections) -> np.ndarray:
    """Which detections are of the labelled face ``label`` (4,): their box covers it (as
    benchmarks/studies/detector_recall.py counts) and their eyes lie inside it."""
    covers = overlap_of_smaller(label, found.boxes) >= labelled.MATCH_OVERLAP
    return covers & np.array([bool(inside(e, label[None])[0]) for e in eyes(found)], bool)


def frames():
    """The real clip's frames, and a frame of a pan over office4.jpg whose corner cuts a
    face (MTCNN puts its eyes above the frame, dlib inside it)."""
    info = clip.probe(CLIP)
    real = [(f"{CLIP.name}#{f.index}", f.pixels) for f in clip.frames(CLIP, info)]
    return real + [("pan over office4.jpg#4", pan_frames(24, "office4.jpg", travel=1.0)[4])]


@pytest.mark.slow  # MTCNN and dlib on three photos and four 1280x960 frames (about 30 s)
def test_one_detection_per_face_on_real_photos_and_frames(detectors):
    """Each labelled face of office1/4/5.jpg has at most one merged detection, one when
    either detector found it, sure when either was; in no photo or frame does a merged
    detection's eye midpoint lie inside another's box (two detections of one face would).
    Among the faces both detectors find, their boxes differ (IoU under 0.75 on most)."""
    labels = labelled.labelled()
    differing = both = 0
    named = [
        (name, images.read_photo(DATA / name))
        for name in ("office1.jpg", "office4.jpg", "office5.jpg")
    ]
    for name, image in named + frames():
        found = [detector.detect(image) for detector in detectors]
        merged = merge(found)
        for i, point in enumerate(eyes(merged)):
            others = np.delete(merged.boxes, i, axis=0)
            assert not inside(point, others).any(), (name, merged.boxes[i])
        for label in labels.get(name, []):
            mine = [of_face(label, f) for f in found]
            assert of_face(label, merged).sum() == any(m.any() for m in mine), (name, label)
            if of_face(label, merged).any():
                sure = merged.confident()[of_face(label, merged)][0]
                assert sure == any((f.confident() & m).any() for f, m in zip(found, mine))
            if all(m.any() for m in mine):
                both += 1
                first, second = (f.boxes[m][0] for f, m in zip(found, mine))
                differing += iou(first, second) < 0.75
    assert both >= 20 and differing >= both // 2, (both, differing)


def made(*faces) -> Detections:
    """Detections of faces given as (x, y, side, box top, box width, sure) or with a last
    box scale: the box ``width`` * ``scale`` of the side wide, from ``top`` * ``scale``
    of it above the centre to half of it below; the landmarks of a face ``side`` wide."""

    def rectangle(x, y, s, top, w, sure, scale=1.0):
        s = s * scale
        return [x - w * s / 2, y - top * s, x + w * s / 2, y + s / 2]

    return Detections(
        np.array([rectangle(*face) for face in faces], np.float32).reshape(-1, 4),
        np.ones(len(faces), np.float32),
        np.array([landmarks_at(x, y, s) for x, y, s, *_ in faces], np.float32).reshape(-1, 5, 2),
        np.array([face[5] for face in faces], bool),
    )


def test_any_number_of_detectors_give_one_detection_per_face():
    """Three detectors' boxes of two faces side by side, each with its own extent (one
    takes in the forehead, one stops at the brows, one over twice as large and lower:
    boxes alone would not join it), landmarks a little apart: two faces, the first
    detector's boxes, sure when any detector was."""
    rng = np.random.default_rng(0)
    jitter = lambda: rng.normal(0, 1.0, 2)  # noqa: E731
    faces = [(100, 100, 40), (150, 104, 44)]
    forehead = made(*[(x, y, s, 0.55, 1.0, False) for x, y, s in faces])
    brows = made(
        *[
            (x + jitter()[0], y + jitter()[1], s, 0.3, 0.85, i == 1)
            for i, (x, y, s) in enumerate(faces)
        ]
    )
    larger = made(
        *[(x + jitter()[0], y + jitter()[1], s, 0.6, 1.0, False, 2.3) for x, y, s in faces]
    )
    merged = merge([forehead, brows, larger])
    assert len(merged.boxes) == 2
    order = np.argsort(merged.boxes[:, 0])
    np.testing.assert_array_equal(merged.boxes[order], forehead.boxes)
    assert merged.confident()[order].tolist() == [False, True]
    assert len(merge([merged])) == len(merged)  # merging again changes nothing


def test_a_face_behind_another_and_a_lone_detectors_duplicates():
    """A small face whose box lies inside a large face's box (landmarks elsewhere) stays
    its own; one detector's two boxes of one face (its suppression kept both) are one."""
    large, small = (100, 100, 80, 0.5, 1.0, True), (125, 95, 24, 0.5, 1.0, False)
    assert len(merge([made(large), made(small)]).boxes) == 2
    twice = made((100, 100, 40, 0.5, 1.0, False), (101, 99, 42, 0.3, 0.9, True))
    (sure,) = merge([twice]).confident()
    assert sure
    assert same_face(twice.boxes, twice.landmarks).all()


def test_detections_without_usable_landmarks_join_by_their_boxes_across_detectors():
    """Landmarks that are not finite say nothing: such a detection is one face with
    another detector's when the boxes alone say so, never with its own detector's."""
    lost = made((100, 100, 40, 0.5, 1.0, False))
    lost = lost._replace(landmarks=np.full_like(lost.landmarks, np.nan))
    seen = made((102, 101, 40, 0.4, 0.9, True))
    assert len(merge([seen, lost]).boxes) == 1
    both = Detections(
        np.concatenate([seen.boxes, lost.boxes]),
        np.ones(2, np.float32),
        np.concatenate([seen.landmarks, lost.landmarks]),
        np.array([True, False]),
    )
    assert len(merge([both]).boxes) == 2
