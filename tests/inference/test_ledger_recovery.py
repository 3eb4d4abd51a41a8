"""Recovery without metadata, end to end with the real MTCNN on real photos: the
invertible test double (tests/invertible_double.py) anonymizes with a key file, the
photos are shared (metadata stripped, JPEG 90 and 75, rescaled by 0.5), and recovery
with the key file alone restores faces it verifies against the face ledger and changes
no pixel outside the faces anonymization changed; the never-anonymized originals stay
exactly as they were (fixtures/ledger_sharing.py, which the ledger study
benchmarks/studies/ledger_recovery.py prints)."""

import shutil

import pytest

from convert.common import run
from convert.mtcnn import main as convert_mtcnn
from fixtures.ledger_sharing import measure
from tests.paths import DATA

# One fixture (the real MTCNN through every sharing case) serves the three tests.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ledger")
    run(convert_mtcnn, ["--out", str(tmp / "model")])
    photos = tmp / "photos"
    photos.mkdir()
    for name in ("office3.jpg", "jf.jpg"):
        shutil.copy(DATA / name, photos / name)
    return measure(sorted(photos.iterdir()), tmp / "model" / "mtcnn", tmp / "work")


def test_no_pixel_changes_outside_the_anonymized_faces(rows):
    assert {row.changed_outside for row in rows} == {0}


def test_the_never_anonymized_originals_are_left_alone(rows):
    controls = [row for row in rows if row.transform.startswith("control")]
    assert controls and all(row.found > 0 and row.verified == 0 for row in controls)


def test_shared_faces_are_found_verified_and_restored(rows):
    by_case = {(row.photo, row.transform): row for row in rows}
    for case in ("metadata stripped", "JPEG 90", "JPEG 75", "rescaled 0.5"):
        assert by_case["jf.jpg", case].restored == 1, case
    for case in ("metadata stripped", "JPEG 90", "JPEG 75"):
        assert by_case["office3.jpg", case].restored >= 2, case
    assert all(row.restored <= row.verified <= row.found for row in rows)
