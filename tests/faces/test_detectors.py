"""The detector seam on real photos: dlib's landmarks mapped to MTCNN's five points,
CenterFace's five points in the order alignment reads them, the ensemble (one face
found by both detectors is one face; a small face beside a large one stays its own),
the registry (each detector reads its own weights folder, only those chosen load, a
missing optional detector is named, never passed over), recall against the hand-labelled
faces of tests/data/faces_labelled.json (the default finds the faces MTCNN and dlib
found, and at least the recall docs/photos.md gives), and the low-confidence band hidden
by pixelation and counted, in photos and in video tracks."""

import importlib.util
import shutil
import subprocess
import sys

import numpy as np
import pytest

from convert.centerface import main as convert_centerface
from convert.common import run
from convert.mtcnn import main as convert_mtcnn
from dbaf_jax.core.errors import ConfigError, ModelDirectoryError
from dbaf_jax.faces import paste, photos
from dbaf_jax.faces.detectors import centerface, dlib_detectors, mtcnn, registry
from dbaf_jax.faces.detectors.base import Detections, overlap_of_smaller
from dbaf_jax.faces.detectors.ensemble import merge
from dbaf_jax.inference import face_batches
from dbaf_jax.inference.anonymizer import photo_result
from dbaf_jax.storage import images
from dbaf_jax.video import tracks
from fixtures import labelled
from tests.paths import DATA, REPO

# Measured with benchmarks/studies/detector_recall.py (docs/photos.md): labelled faces the
# default finds (anonymized or hidden), those it anonymizes, its sure false alarms; and
# the default before CenterFace (MTCNN and dlib's HOG, with their bands).
DEFAULT_FOUND = 54
DEFAULT_ANONYMIZED = 53
DEFAULT_SURE_ALARMS = 1
BEFORE_FOUND = 49


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """A folder holding every converted detector (mtcnn/, centerface/)."""
    out = tmp_path_factory.mktemp("detectors")
    run(convert_mtcnn, ["--out", str(out)])
    run(convert_centerface, ["--out", str(out)])
    return out


@pytest.fixture(scope="module")
def mtcnn_dir(weights):
    return weights / "mtcnn"


@pytest.fixture(scope="module")
def default(weights):
    detector, notes = registry.build(weights)
    assert notes == [] and detector.name == "centerface"
    return detector


@pytest.fixture(scope="module")
def before(weights):
    return registry.build(weights, ["mtcnn", "dlib-hog"])[0]


@pytest.fixture(scope="module")
def today(weights):
    return registry.build(weights, ["mtcnn"], low_band=False)[0]


def photo(name):
    return images.read_photo(DATA / name)


def test_dlib_points_are_mtcnns_five(today):
    """On a portrait, dlib's 68 points mapped to eye centres, nose tip and mouth corners
    land within 4% of the face's width of MTCNN's own five, in MTCNN's order."""
    image = photo("jf.jpg")
    theirs = dlib_detectors.DlibDetector("hog", 1).detect(image)
    ours = today.detect(image)
    assert len(theirs.boxes) == len(ours.boxes) == 1
    width = ours.boxes[0, 2] - ours.boxes[0, 0]
    assert np.linalg.norm(theirs.landmarks[0] - ours.landmarks[0], axis=-1).max() < 0.04 * width
    full = dlib_detectors.DlibDetector("hog", 1, all_68=True).detect(image)
    assert full.landmarks.shape == (1, 68, 2)
    np.testing.assert_allclose(dlib_detectors.five_points(full.landmarks), theirs.landmarks)


def test_unavailable_names_the_missing_package(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "dlib" else find_spec(name)
    )
    assert (
        dlib_detectors.DlibDetector.unavailable()
        == f"dlib is not installed ({dlib_detectors.INSTALL_HINT})"
    )


def test_a_face_found_by_both_detectors_is_one_face(today):
    """office4.jpg: every face both detectors find comes out once, with MTCNN's
    landmarks; the merged count is MTCNN's plus the faces only dlib found."""
    image = photo("office4.jpg")
    first, second = today.detect(image), dlib_detectors.DlibDetector("hog", 2).detect(image)
    merged = merge([first, second])
    both = [
        i
        for i, box in enumerate(first.boxes)
        if (overlap_of_smaller(box, second.boxes) >= 0.5).any()
    ]
    assert len(both) >= 8  # the two detectors agree on most of the twelve faces (9 measured)
    only_second = sum(
        not (overlap_of_smaller(box, first.boxes) >= 0.5).any() for box in second.boxes
    )
    assert len(merged.boxes) == len(first.boxes) + only_second
    for i in both:
        same = np.flatnonzero(overlap_of_smaller(first.boxes[i], merged.boxes) >= 0.5)
        assert len(same) == 1
        np.testing.assert_array_equal(merged.landmarks[same[0]], first.landmarks[i])


def found(boxes, sure):
    boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
    return Detections(
        boxes,
        np.ones(len(boxes), np.float32),
        np.zeros((len(boxes), 5, 2), np.float32),
        np.asarray(sure, bool),
    )


def test_merge_keeps_a_small_face_beside_a_large_one_and_is_sure_if_either_is():
    large = found([[100, 100, 200, 200]], [False])
    near = found(
        [[110, 105, 205, 210], [150, 150, 170, 170]], [True, True]
    )  # the same face, and a small one inside its box
    merged = merge([large, near])
    np.testing.assert_array_equal(merged.boxes, [[100, 100, 200, 200], [150, 150, 170, 170]])
    np.testing.assert_array_equal(merged.sure, [True, True])
    np.testing.assert_array_equal(merge([large, found([], [])]).sure, [False])


def test_centerface_points_are_mtcnns_five_in_order(today, default):
    """On a portrait, CenterFace's five points are in the order faces.align reads (eyes,
    nose, mouth corners, image left first): each is nearest to MTCNN's point of the same
    rank, within 12% of the face's width (CenterFace's eye lies lower than MTCNN's by
    9.8% here: docs/photos.md)."""
    image = photo("jf.jpg")
    ours, theirs = default.detect(image), today.detect(image)
    assert len(ours.boxes) == len(theirs.boxes) == 1 and ours.sure.all()
    distances = np.linalg.norm(ours.landmarks[0][:, None] - theirs.landmarks[0][None], axis=-1)
    np.testing.assert_array_equal(distances.argmin(axis=1), np.arange(5))
    assert distances.diagonal().max() < 0.12 * (theirs.boxes[0, 2] - theirs.boxes[0, 0])


def test_registry_names_what_did_not_run(weights, monkeypatch):
    with pytest.raises(
        ConfigError, match="expected names from centerface, mtcnn, dlib-hog, dlib-cnn"
    ):
        registry.parse_names("mtcnn,retinaface")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "dlib" else find_spec(name)
    )
    monkeypatch.setattr(registry, "DEFAULT", ("centerface", "dlib-hog"))
    detector, notes = registry.build(weights)
    assert detector.name == "centerface" and notes == [
        f"detector dlib-hog not run: dlib is not installed ({dlib_detectors.INSTALL_HINT}); "
        "faces only it would find are not looked for"
    ]
    with pytest.raises(
        ConfigError, match="--detectors dlib-hog: cannot run: dlib is not installed"
    ):
        registry.build(weights, ["mtcnn", "dlib-hog"])


def test_each_detector_reads_its_own_folder_and_only_the_chosen_load(weights, tmp_path):
    """dlib-hog alone needs no weights; MTCNN alone needs no centerface/; a chosen
    detector without its folder is one error naming the command that writes it."""
    assert registry.build(tmp_path, ["dlib-hog"])[0].name == "dlib-hog"
    shutil.copytree(weights / "mtcnn", tmp_path / "mtcnn")
    assert isinstance(registry.build(tmp_path, ["mtcnn"])[0], mtcnn.MTCNN)
    with pytest.raises(
        ModelDirectoryError,
        match=rf"{tmp_path / 'centerface'}: no weights for the centerface face detector "
        rf"\(python -m convert.centerface --out {tmp_path} writes them",
    ):
        registry.build(tmp_path)
    assert isinstance(registry.build(weights, ["centerface"])[0], centerface.CenterFaceDetector)


def test_the_weights_folder_is_the_one_holding_the_detectors(weights, tmp_path):
    assert registry.weights_dir(tmp_path) == registry.weights_dir("elsewhere", tmp_path)
    for wrong in (weights / "mtcnn", weights / "centerface"):
        with pytest.raises(
            ModelDirectoryError, match=rf"pass the folder that holds it \({weights}\)"
        ):
            registry.weights_dir(tmp_path, wrong)
    with pytest.raises(ModelDirectoryError, match="no such folder"):
        registry.weights_dir(tmp_path, tmp_path / "absent")


def test_dlib_models_import_without_the_pkg_resources_warning():
    """face_recognition_models warns that pkg_resources is deprecated when imported (a
    fresh interpreter shows it); through `trained_models`, as the detector and the
    evaluation's recogniser import it, nothing is printed."""
    plain = subprocess.run(
        [sys.executable, "-c", "import face_recognition_models"], capture_output=True, text=True
    )
    assert "pkg_resources is deprecated" in plain.stderr
    quiet = subprocess.run(
        [
            sys.executable,
            "-c",
            "from dbaf_jax.faces.detectors import dlib_detectors; dlib_detectors.DlibDetector('hog');"
            "from dbaf_jax.evaluation import dlib_recognition; dlib_recognition.provenance()",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


@pytest.mark.slow  # every detector over tests/data's photos: 58 s on 2 cores
def test_default_finds_what_the_detectors_before_it_found_and_its_measured_recall(default, before):
    """Against the labelled faces: the default finds at least the measured 54 of 55
    (anonymizing 53) with one sure false alarm, among them every labelled face that MTCNN
    and dlib's HOG with their bands (the default before it: 49) found, and office5.jpg's
    two smallest labelled faces (9 and 7 px wide)."""
    labels = labelled.labelled()
    totals = {"found": 0, "anonymized": 0, "alarms_sure": 0, "before": 0}
    for name, boxes in labels.items():
        image = photo(name)
        ours, theirs = (labelled.score(boxes, d.detect(image)) for d in (default, before))
        assert not (theirs["found"] & ~ours["found"]).any(), name
        for key in ("found", "anonymized"):
            totals[key] += int(ours[key].sum())
        totals["alarms_sure"] += ours["alarms_sure"]
        totals["before"] += int(theirs["found"].sum())
        if name == "office5.jpg":
            assert ours["found"][:2].all()
    assert totals["before"] == BEFORE_FOUND
    assert totals["found"] >= DEFAULT_FOUND and totals["anonymized"] >= DEFAULT_ANONYMIZED
    assert totals["alarms_sure"] <= DEFAULT_SURE_ALARMS


def test_the_low_band_is_pixelated_and_counted(default):
    """office5.jpg (one detection in the default's low band) through the photo path with
    a stand-in model step (the negative of each crop): the low band's detections are not
    given to the model but hidden by the fallback (a flat box) and counted in the photo's
    result."""
    image = photo("office5.jpg")
    faces = photos.PhotoFaces(default, 64)
    found_faces = faces.find(image)
    assert found_faces.doubtful and found_faces.faces
    assert found_faces.found == len(default.detect(image).boxes)
    item = face_batches.Item(
        image,
        found_faces.faces,
        faces.crops(image, found_faces.faces),
        np.zeros((len(found_faces.faces), 1), np.float32),
        None,
        found_faces.to_hide,
    )
    (done,) = face_batches.processed([item], faces, lambda crops, keys: -crops, 8)
    result = photo_result(done, found_faces.too_small)
    assert len(result.hidden) == len(found_faces.unusable) + len(found_faces.doubtful) and len(
        result.faces
    ) == len(found_faces.faces)
    for box in found_faces.doubtful:
        x1, y1, x2, y2 = box.astype(int)
        region = result.photo[y1 + 1 : y2, x1 + 1 : x2]
        assert len({tuple(p) for p in region.reshape(-1, 3)}) <= paste.HIDE_CELLS**2
    recovering = photos.PhotoFaces(default, 64, hide_doubtful=False).find(image)
    assert (
        not recovering.doubtful
        and len(recovering.faces) + len(recovering.unusable) == found_faces.found
    )


def test_video_tracks_hide_the_low_band():
    tracker = tracks.Tracker(25.0)
    points = np.array([[40, 50], [60, 50], [50, 60], [42, 70], [58, 70]], np.float32)
    detections = Detections(
        np.array([[30, 35, 70, 80], [130, 35, 170, 80]], np.float32),
        np.ones(2, np.float32),
        np.stack([points, points + [100, 0]]),
        np.array([True, False]),
    )
    tracker.add(detections)
    assert len(tracker.tracks()) == 1 and [b.tolist() for b in tracker.hidden()[0]] == [
        [130, 35, 170, 80]
    ]
    recovering = tracks.Tracker(25.0, hide_doubtful=False)
    recovering.add(detections)
    assert len(recovering.tracks()) == 2 and not recovering.hidden()


def test_mtcnn_sure_threshold_splits_but_keeps_the_run(today, mtcnn_dir):
    """A sure threshold at the run's own O-net threshold marks every detection sure and
    changes none: the default thresholds stay facenet-pytorch's run."""
    image = photo("office3.jpg")
    split = mtcnn.MTCNN.load(mtcnn_dir, sure_threshold=mtcnn.THRESHOLDS[2]).detect(image)
    plain = today.detect(image)
    np.testing.assert_array_equal(split.boxes, plain.boxes)
    assert split.sure.all() and plain.sure is None
