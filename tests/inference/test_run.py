"""The run object (`dbaf_jax.inference.run`): what `Run.start` reads and in which order,
which ledger the runners get, recovery's mode, note and warning, the password kept out
of the repr; one `Model.load` reading model.json once and hashing each weight file
once; and a job's reports counted together as data (`Report.add`, `Report.add_clip`,
`Report.lines`), as the web page counts its files."""

import dataclasses
import io
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from convert.common import run
from convert.mtcnn import main as convert_mtcnn
from dbaf_jax.core.errors import ConfigError, InputError
from dbaf_jax.faces import ledger
from dbaf_jax.inference.aligned_folders import recover_folder
from dbaf_jax.inference.photo_folders import recover_photo_folder
from dbaf_jax.inference.recovery_modes import UNTRAINED_FLAG
from dbaf_jax.inference.report import EXIT_FACES_LEFT, EXIT_SKIPPED, Report
from dbaf_jax.inference.run import Model, Run
from dbaf_jax.inference.settings import FaceFinding, FolderRunSettings, RunSettings
from dbaf_jax.storage import keys, model_directory
from dbaf_jax.storage.images import Skipped
from dbaf_jax.video.report import VideoReport
from tests.cli_helpers import PASSWORD
from tests.evaluation_models import build_tiny_model


def never_loaded():
    pytest.fail("the model was loaded before the key file was read")


def test_a_bad_key_file_fails_before_the_model_loads(tmp_path):
    key_file = tmp_path / "dbaf.key"
    key_file.write_text("{not a key file")
    with pytest.raises(InputError, match="dbaf.key"):
        Run.start("anonymize", PASSWORD, never_loaded, key_file=key_file)
    with pytest.raises(ValueError, match="operation"):
        Run.start("reveal", PASSWORD, never_loaded)


def key_file_with_torn_ledger(folder: Path) -> tuple[Path, keys.KeyRecord]:
    """A key file whose face ledger holds one entry and a torn last line."""
    record = keys.new_key_record()
    key_file = keys.write_key_file(folder / "dbaf.key", record)
    entry = ledger.Entry(3, 1.5, (0.25, 0.5), 0.125, np.full(ledger.GRID**2 * 3, 0.5))
    ledger.append(ledger.ledger_path(key_file), [entry])
    with open(ledger.ledger_path(key_file), "a") as file:
        file.write('[{"index": 4')  # a write cut short
    return key_file, record


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The tempered tiny model (it records latent recovery), with MTCNN's weights in it."""
    folder = build_tiny_model(tmp_path_factory.mktemp("run"))
    run(convert_mtcnn, ["--out", str(folder)])
    return folder


@pytest.fixture(scope="module")
def model(model_dir):
    """The model without face finders."""
    return Model.load(model_dir, finding=None)


@pytest.mark.slow  # a model converted and loaded: about 15 s on 2 cores
def test_anonymize_and_recover_runs_of_one_key_file(model, tmp_path):
    key_file, record = key_file_with_torn_ledger(tmp_path)
    settings = FolderRunSettings(batch_size=2)
    anonymize = Run.start("anonymize", PASSWORD, model, settings, key_file)
    assert anonymize.record == record and anonymize.settings is settings
    assert anonymize.ledger_file == ledger.ledger_path(key_file)  # appended to
    assert anonymize.key_file == key_file and anonymize.face_ledger is None
    assert anonymize.notes == () and anonymize.recovery is None and anonymize.faces is None
    assert PASSWORD not in repr(anonymize)
    fresh = keys.new_key_record()
    assert Run.start("anonymize", PASSWORD, model, record=fresh).record == fresh
    assert Run.start("anonymize", PASSWORD, model).ledger_file is None

    # Recovery: the mode the model was not trained for is refused, naming the flag ...
    with pytest.raises(ConfigError, match=UNTRAINED_FLAG):
        Run.start("recover", PASSWORD, model, key_file=key_file)
    # ... and runs with it, with the warning; the ledger's entries and its torn line said once.
    recover = Run.start("recover", PASSWORD, lambda: model, key_file=key_file, untrained=True)
    assert recover.recovery == "image" and recover.record == record
    assert [entry.index for entry in recover.face_ledger] == [3] and recover.ledger_file is None
    assert recover.notes[0] == "recovery mode: image (photos and clips recover from the image)"
    assert len(recover.notes) == 2 and "line 2 is torn" in recover.notes[1]
    assert len(recover.warnings) == 1 and UNTRAINED_FLAG in recover.warnings[0]
    # Aligned crops recover in the mode the model was trained for, without a warning.
    aligned = Run.start("recover", PASSWORD, model, aligned=True)
    assert aligned.recovery == "latent" and aligned.warnings == () and aligned.face_ledger is None
    # The runners take a run of their kind only, before any work.
    with pytest.raises(TypeError, match="no face finder"):
        recover_photo_folder(aligned, tmp_path, tmp_path / "out")
    with pytest.raises(TypeError, match="FolderRunSettings"):
        recover_folder(
            dataclasses.replace(aligned, settings=RunSettings()), tmp_path, tmp_path / "out"
        )
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a model converted and loaded twice: about 20 s on 2 cores
def test_one_load_reads_model_json_once_and_hashes_each_weight_file_once(model_dir):
    """Issue 44: `Model.load` with both operations' face finders (as the web page loads
    it) reads model.json once and hashes each weight file once, the model's and the
    detector's: the two finders share one detector, and each is the one
    `FaceFinding.load` makes alone."""
    weights = sorted(  # all but the discriminator's (training's alone)
        path
        for path in model_dir.rglob("*")
        if path.is_file() and "variables" in path.parts and "discriminator" not in path.parts
    )
    finding = FaceFinding(detectors="mtcnn")
    with (
        mock.patch.object(
            model_directory, "read_manifest", wraps=model_directory.read_manifest
        ) as manifests,
        mock.patch.object(
            model_directory, "file_sha256", wraps=model_directory.file_sha256
        ) as hashed,
    ):
        loaded = Model.load(model_dir, finding=finding)
    assert [call.args[0] for call in manifests.call_args_list] == [model_dir]
    assert sorted(call.args[0] for call in hashed.call_args_list) == weights
    assert any("mtcnn" in path.parts for path in weights)
    anonymize, recover = loaded.finders["anonymize"], loaded.finders["recover"]
    assert anonymize.detector is recover.detector
    for operation, finder in loaded.finders.items():
        alone = finding.load(loaded.anonymizer, recovering=operation == "recover")
        assert finder.describe() == alone.describe() and finder.hide_doubtful == (
            operation == "anonymize"
        )
        shared = ("detector", "parser")
        assert {k: v for k, v in vars(finder).items() if k not in shared} == {
            k: v for k, v in vars(alone).items() if k not in shared
        }


def test_a_jobs_reports_counted_as_data():
    """Two photo reports and a clip's counted into one report: files, counts and notes
    each once, the clip's line and status; printing is its lines."""
    detectors = "detectors: mtcnn"
    first = Report(written=[Path("a.png")], notes=[detectors], photos=1, faces_found=2, faces=2)
    second = Report(
        skipped=[Skipped(Path("b.jpg"), "b.jpg: not an image")],
        notes=[detectors, "c.jpg: no face found"],
        photos=1,
    )
    clip = VideoReport(written=[Path("d.mp4"), Path("d.mp4.dbaf.json")], frames=6, left=1)
    clip.notes = [detectors]
    total = Report()
    for report in (first, second):
        total.add(report)
    total.add_clip(clip)
    assert total.notes == [detectors, "c.jpg: no face found"]
    assert total.written == [Path("a.png"), Path("d.mp4"), Path("d.mp4.dbaf.json")]
    assert (total.photos, total.faces_found, total.faces, total.clip_outputs) == (2, 2, 2, 2)
    lines = total.lines()
    assert lines[-1].startswith("summary: 2 photo(s) read, 1 written, 1 skipped; 2 face(s) found")
    assert lines[-1].endswith("; 1 clip(s) processed (lines above)")
    assert "clip: d.mp4: processed 0 face(s) in 6 frame(s)" in lines[-2]
    assert lines[:4] == [
        f"note: {detectors}",
        "note: c.jpg: no face found",
        "skipped 1 file(s):",
        "  b.jpg: not an image",
    ]
    assert total.status == EXIT_SKIPPED
    total.skipped.clear()
    assert total.status == EXIT_FACES_LEFT  # the clip's face left as it was
    out = io.StringIO()
    total.print(out)
    assert out.getvalue() == "".join(line + "\n" for line in total.lines())
