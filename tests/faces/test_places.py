"""What anonymize writes of a photo, recover takes (faces/places.py, metadata.photo_refusal,
photos.find): photos and clips are held to one set of bounds (`places`), a photo's
detections are merged into one per face even with one detector, faces no record can
hold are hidden rather than recorded, an honest crowd is neither refused nor merged, and a
low-confidence detection lying on an anonymized face is not pixelated over it (its
recovery needs those pixels) while one that only touches it is. End to end through
anonymize_photo_folder and recover_photo_folder with the invertible test double, and on
tests/data's real photos with the default detector."""

import numpy as np
import pytest
from PIL import Image

from convert.centerface import main as convert_centerface
from convert.common import run
from dbaf_jax.core.errors import InputError
from dbaf_jax.faces import align, metadata, paste, photos, places
from dbaf_jax.faces.detectors import ensemble, registry
from dbaf_jax.faces.detectors.base import Detections
from dbaf_jax.inference.photo_folders import anonymize_photo_folder, recover_photo_folder
from dbaf_jax.inference.run import Run
from dbaf_jax.inference.settings import FolderRunSettings
from dbaf_jax.storage import images, keys
from fixtures.invertible_double import InvertibleDouble
from tests.face_helpers import landmarks_at
from tests.paths import DATA

SIZE = 128
PASSWORD = "places"
RECORD = keys.KeyRecord(salt="7c" * keys.SALT_BYTES)
SETTINGS = FolderRunSettings(batch_size=4)


class Fixed:
    """A detector that finds the same faces in every image."""

    name = "fixed"

    def __init__(self, found: Detections):
        self.found = found

    def detect(self, image):
        return self.found

    def detect_many(self, images):
        return [self.found for _ in images]


def found(*faces) -> Detections:
    """Detections of faces (x, y, side, sure), or (x, y, side, sure, box) with a box of
    its own; else the box is the face's side around its centre."""
    boxes, marks, sure = [], [], []
    for x, y, side, is_sure, *box in faces:
        boxes.append(box[0] if box else [x - side / 2, y - side / 2, x + side / 2, y + side / 2])
        marks.append(landmarks_at(x, y, side))
        sure.append(is_sure)
    return Detections(
        np.asarray(boxes, np.float32).reshape(-1, 4),
        np.ones(len(boxes), np.float32),
        np.asarray(marks, np.float32).reshape(-1, 5, 2),
        np.asarray(sure, bool),
    )


def scene() -> np.ndarray:
    """(380, 570, 3) uint8: smooth colour waves of a 75-95 px period, so that the test
    double's round trip through two resamplings restores a face within a level."""
    y, x = np.mgrid[0:380, 0:570].astype(np.float64)
    waves = [np.sin(x / 12 + c) * np.cos(y / 15 - c) for c in (0.0, 1.3, 2.6)]
    return np.stack([128 + 60 * wave for wave in waves], axis=-1).astype(np.uint8)


def written_and_recovered(tmp_path, detections: Detections):
    """anonymize_photo_folder on the `scene` with ``detections`` as its faces, then
    recover_photo_folder from the output's metadata: (the anonymize report, the output's
    pixels, the recover report, the recovered pixels, the original's)."""
    (tmp_path / "in").mkdir(parents=True)
    original = scene()
    Image.fromarray(original).save(tmp_path / "in" / "scene.png")
    double = InvertibleDouble(SIZE)
    finder = photos.PhotoFaces(Fixed(detections), SIZE)
    made = anonymize_photo_folder(
        Run("anonymize", double, finder, PASSWORD, RECORD, settings=SETTINGS),
        tmp_path / "in",
        tmp_path / "out",
    )
    from_metadata = photos.PhotoFaces(None, SIZE, hide_doubtful=False)
    back = recover_photo_folder(
        Run("recover", double, from_metadata, PASSWORD, settings=SETTINGS),
        tmp_path / "out",
        tmp_path / "back",
    )
    return (
        made,
        images.read_photo(tmp_path / "out" / "scene.png"),
        back,
        images.read_photo(tmp_path / "back" / "scene.png"),
        original,
    )


def error_at(pixels: np.ndarray, original: np.ndarray, x: int, y: int) -> float:
    """Mean absolute difference of ``pixels`` from ``original`` within 15 px of (x, y)."""
    window = (slice(y - 15, y + 15), slice(x - 15, x + 15))
    return float(np.abs(pixels[window].astype(int) - original[window]).mean())


def test_recorded_faces_and_sidecars_take_the_same_places():
    """One set of bounds: up to `places.STACK` faces at one place, no face under 8 px or
    centred beyond the edge; the photo's check and the clip's sidecar name the same faces."""
    shape = (380, 570, 3)
    near = [(200, 150), (230, 150), (215, 176), (214, 160)]  # each within 48 px of the others
    transforms = [
        photos.AlignedFace(i, align.alignment_transform(landmarks_at(x, y, 60), 256), 256)
        for i, (x, y) in enumerate(near)
    ]
    sides, centres = places.face_places(np.stack([f.transform for f in transforms]), 256)
    assert places.at_one_place(sides[None], centres[None])[0][:3, :3].sum() == 6
    fields = metadata.photo_fields(shape, transforms[: places.STACK])
    assert len(metadata.recorded_faces(fields, shape, 256)) == places.STACK
    with pytest.raises(InputError, match="overlaps 3 other faces"):
        metadata.recorded_faces(metadata.photo_fields(shape, transforms), shape, 256)
    tiny = align.alignment_transform(landmarks_at(300, 200, 4), 256)
    beyond = align.alignment_transform(landmarks_at(-40, 200, 60), 256)
    assert places.unrecordable(
        np.stack([transforms[0].transform, tiny, beyond]), 256, shape
    ).tolist() == [
        False,
        True,
        True,
    ]


def test_the_metadata_anonymize_would_write_is_held_to_what_recover_reads():
    """`metadata.photo_refusal` reads the metadata as recover does (JSON written and parsed
    back, then its checks): None for an honest record and for a recovery's output, the
    reason for faces recover would refuse."""
    shape = (380, 570, 3)
    meta = metadata.anonymization(RECORD, "0123456789abcdef")

    def face(i, x, y, side):
        return photos.AlignedFace(i, align.alignment_transform(landmarks_at(x, y, side), 256), 256)

    honest = [face(0, 100, 100, 60), face(1, 300, 100, 60)]
    assert (
        metadata.photo_refusal({**meta, **metadata.photo_fields(shape, honest)}, shape, 256) is None
    )
    stacked = [face(i, 200 + i, 150, 60) for i in range(places.STACK + 1)]
    refused = metadata.photo_refusal({**meta, **metadata.photo_fields(shape, stacked)}, shape, 256)
    assert refused is not None and "overlaps 3 other faces" in refused
    tiny = metadata.photo_refusal(
        {**meta, **metadata.photo_fields(shape, [face(0, 100, 100, 4)])}, shape, 256
    )
    assert tiny is not None and "below the 8 px" in tiny
    recovered = {**metadata.recovery(metadata.check_anonymization(meta), "image")}
    assert (
        metadata.photo_refusal({**recovered, **metadata.photo_fields(shape, stacked)}, shape, 256)
        is None
    )


def test_one_detectors_two_detections_of_one_face_are_one_face():
    """A lone detector's two boxes of one face (its suppression kept both) are merged as a
    clip's frames are: one face, nothing hidden; and sure when either is (here the
    low-band box is the larger, so it would not count as lying on the face)."""
    blank = np.zeros((380, 570, 3), np.uint8)
    for twice in (
        found((200, 150, 60, True), (203, 148, 64, True)),
        found((200, 150, 60, True), (203, 148, 70, False)),
    ):
        faces = photos.PhotoFaces(Fixed(twice), SIZE).find(blank)
        assert len(faces.faces) == 1 and not faces.to_hide


def test_an_honest_crowd_is_written_and_recovers(tmp_path):
    """Three people's faces within half a crop's side of each other (too far apart to be
    one face): anonymized as three faces, written, and recover takes the metadata and
    restores them (the old rule, no two at one place, refused such a photo). Not as well
    as a face alone: each paste's feathered edge lies over its neighbours (measured: 2-6
    levels of mean error at their centres, 0.1-0.3 alone, 26-28 anonymized)."""
    crowd_places = [(200, 150, 60, True), (232, 150, 60, True), (216, 178, 60, True)]
    crowd = found(*crowd_places)
    made, anonymized, back, recovered, original = written_and_recovered(tmp_path, crowd)
    assert made.status == 0 and made.faces == 3 and made.faces_hidden == 0
    assert back.status == 0 and back.faces == 3
    for x, y, _, _ in crowd_places:
        assert error_at(recovered, original, x, y) < error_at(anonymized, original, x, y) / 3


def test_faces_no_record_can_hold_are_hidden_and_the_rest_recovers(tmp_path):
    """A face centred beyond the photo's edge and one whose crop is under 8 px are hidden
    by the fallback, not recorded; the output recovers."""
    faces = found((250, 150, 60, True), (-45, 200, 60, True), (450, 300, 4, True))
    found_faces = photos.PhotoFaces(Fixed(faces), SIZE).find(np.zeros((380, 570, 3), np.uint8))
    assert len(found_faces.faces) == 1 and len(found_faces.unusable) == 2
    made, anonymized, back, recovered, original = written_and_recovered(tmp_path, faces)
    assert made.faces == 1 and made.faces_hidden == 2 and back.status == 0 and back.faces == 1
    assert (
        error_at(anonymized, original, 250, 150) > 20 > 5 > error_at(recovered, original, 250, 150)
    )


def test_a_low_band_detection_on_an_anonymized_face_is_not_pixelated_over_it(tmp_path):
    """A low-band box on the lower part of a sure face (a detection the merge did not join:
    its landmarks are a smaller face's) is that face: not hidden, so recovery restores the
    face as if it had not been found; a low-band box that only touches the face is hidden."""
    face = (250, 150, 60, True)
    on = (250, 165, 30, False, [232, 140, 268, 180])  # 36 x 40, all inside the face's box
    touching = (290, 150, 40, False, [270, 130, 310, 170])  # half of it on the face's box
    assert ensemble.on_faces(
        np.array([on[4], touching[4]], float), np.array([[220, 120, 280, 180]], float)
    ).tolist() == [True, False]
    alone = written_and_recovered(tmp_path / "alone", found(face))
    with_on = written_and_recovered(tmp_path / "on", found(face, on))
    assert with_on[0].faces == 1 and with_on[0].faces_hidden == 0
    np.testing.assert_array_equal(with_on[1], alone[1])  # the output: the face as if found alone
    np.testing.assert_array_equal(with_on[3], alone[3])
    assert error_at(with_on[3], with_on[4], 250, 150) < 1
    with_touching = written_and_recovered(tmp_path / "touching", found(face, touching))
    assert with_touching[0].faces_hidden == 1
    hidden = paste.hide(alone[1], np.array(touching[4], float))
    np.testing.assert_array_equal(with_touching[1], hidden)  # pixelated after the paste


@pytest.mark.slow  # the default detector on tests/data's seven photos
def test_every_real_photo_is_recorded_as_recover_reads_it(tmp_path):
    """On tests/data's photos the default detector's faces, as anonymize finds them, make
    metadata recover takes: no face at a place with more than two others, none too small or
    centred beyond the edge."""
    run(convert_centerface, ["--out", str(tmp_path)])
    detector, _ = registry.build(tmp_path)
    faces = photos.PhotoFaces(detector, 256)
    meta = metadata.anonymization(RECORD, "0123456789abcdef")
    counted = 0
    for path in sorted(DATA.glob("*.jpg")):
        photo = images.read_photo(path)
        found_faces = faces.find(photo)
        counted += len(found_faces.faces)
        fields = metadata.photo_fields(photo.shape, found_faces.faces)
        assert metadata.photo_refusal({**meta, **fields}, photo.shape, 256) is None, path.name
    assert counted >= 50


def test_a_photo_whose_record_recover_would_refuse_is_not_written(tmp_path, monkeypatch):
    """The last guard behind `photos.find`: were four faces found at one place (here the
    merge into one detection per face is turned off), the photo is named as skipped, with
    why, and nothing of it is written; the folder's exit status says so."""
    monkeypatch.setattr(photos.ensemble, "merge", lambda found: found[0])
    near = [(200, 150), (230, 150), (215, 176), (214, 160)]
    (tmp_path / "in").mkdir()
    Image.fromarray(scene()).save(tmp_path / "in" / "scene.png")
    finder = photos.PhotoFaces(Fixed(found(*[(x, y, 60, True) for x, y in near])), SIZE)
    made = anonymize_photo_folder(
        Run("anonymize", InvertibleDouble(SIZE), finder, PASSWORD, RECORD, settings=SETTINGS),
        tmp_path / "in",
        tmp_path / "out",
    )
    assert [s.path.name for s in made.skipped] == ["scene.png"]
    assert "recover would refuse its metadata" in made.skipped[0].reason
    assert "overlaps 3 other faces" in made.skipped[0].reason
    assert not (tmp_path / "out" / "scene.png").exists() and made.status == 3
