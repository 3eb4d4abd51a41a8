"""The face ledger in anonymize runs with a key file (photos and clips), end to end with
the real MTCNN and the invertible test double: whether the ledger can be written is
checked before any photo or frame is processed, and a write that still fails (a full
disk, simulated) is one error naming the ledger and its reason, with no output written
without its entries and the outputs already complete kept."""

import dataclasses
import errno
import functools
import os
import shutil

import numpy as np
import pytest

from dbaf_jax.core.errors import OutputWriteError
from dbaf_jax.faces import ledger, ledger_match
from dbaf_jax.inference.photo_folders import anonymize_photo_folder
from dbaf_jax.inference.run import Run
from dbaf_jax.inference.settings import FolderRunSettings
from dbaf_jax.storage import keys
from dbaf_jax.video import runner, sidecar
from dbaf_jax.video.settings import ClipRunSettings
from tests.invertible_double import double_with_mtcnn
from tests.paths import DATA
from tests.video_clips import pan_frames, write_clip

PASSWORD = "ledger faults"
RECORD = keys.KeyRecord(salt="5a" * keys.SALT_BYTES)
BATCH = ClipRunSettings(batch_size=4)


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ledger_runs")
    double, faces = double_with_mtcnn(tmp)
    (tmp / "photos").mkdir()
    for name in ("jf.jpg", "office3.jpg", "office5.jpg"):
        shutil.copy(DATA / name, tmp / "photos" / name)
    write_clip(tmp / "pan.mp4", pan_frames(6, travel=0.3), audio_streams=0)
    return tmp, double, faces


class Untouchable:
    """A face finder that fails the test if a photo or frame reaches it."""

    size = 128

    def __getattr__(self, name):
        raise AssertionError(f"faces.{name} used: work began before the ledger was checked")


def key_file(folder):
    folder.mkdir(parents=True, exist_ok=True)
    return keys.write_key_file(folder / "me.key", RECORD)


def test_an_unwritable_ledger_is_refused_before_any_photo_or_frame(ws, tmp_path):
    tmp, double, _ = ws
    ledger.ledger_path(key_file(tmp_path)).mkdir()  # the ledger's path is a folder
    run = Run(
        "anonymize",
        double,
        Untouchable(),
        PASSWORD,
        RECORD,
        ledger_file=ledger.ledger_path(tmp_path / "me.key"),
    )
    with pytest.raises(OutputWriteError, match="Is a directory") as error:
        anonymize_photo_folder(run, tmp / "photos", tmp_path / "out")
    assert (
        str(ledger.ledger_path(tmp_path / "me.key")) in str(error.value)
        and not (tmp_path / "out").exists()
    )
    with pytest.raises(OutputWriteError, match="Is a directory"):
        runner.anonymize_video(
            dataclasses.replace(run, settings=BATCH), tmp / "pan.mp4", tmp_path / "anon.mp4"
        )
    assert (
        not (tmp_path / "anon.mp4").exists()
        and not sidecar.path_for(tmp_path / "anon.mp4").exists()
    )


def fill_disk_after(monkeypatch, path, room):
    """os.write to ``path`` takes ``room`` bytes in all, then fails with ENOSPC."""
    real_write, taken = os.write, []

    def write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}") != str(path):
            return real_write(fd, data)
        left = room - sum(taken)
        if left <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        taken.append(real_write(fd, bytes(data[:left])))
        return taken[-1]

    monkeypatch.setattr(os, "write", write)


@pytest.mark.slow  # 13 s
def test_a_photo_whose_entries_cannot_be_written_is_not_written(ws, tmp_path, monkeypatch):
    """The disk fills after the first photo's entries: that photo's output is kept with
    them; the second photo's entries fail, so it is not written; one error names the
    ledger, its reason and the photo; the ledger holds the first photo's entries only."""
    tmp, double, faces = ws
    path = ledger.ledger_path(key_file(tmp_path))
    (tmp_path / "in").mkdir()
    for name in ("jf.jpg", "office3.jpg"):
        shutil.copy(tmp / "photos" / name, tmp_path / "in" / name)
    real_append, appended = ledger.append, []

    def append_then_full(where, entries):  # the first photo's entries go in, then the disk is full
        real_append(where, entries)
        appended.append(len(entries))
        fill_disk_after(monkeypatch, path, 0)

    monkeypatch.setattr(ledger, "append", append_then_full)
    with pytest.raises(OutputWriteError, match="No space left on device") as error:
        anonymize_photo_folder(
            Run(
                "anonymize",
                double,
                faces,
                PASSWORD,
                RECORD,
                ledger_file=path,
                settings=FolderRunSettings(batch_size=1),
            ),
            tmp_path / "in",
            tmp_path / "out",
        )
    message = str(error.value)
    assert str(path) in message and "office3.jpg" in message and "were not written" in message, (
        message
    )
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["jf.png"]
    assert len(ledger.read(path)) == appended[0] >= 1 and path.read_bytes().endswith(b"\n")


def test_a_clip_whose_entries_cannot_be_written_is_not_published(ws, tmp_path, monkeypatch):
    """The ledger's disk fills during the clip (after the checks): the clip and its sidecar
    are not written, the error names the ledger and the reason, the ledger is as before."""
    tmp, double, faces = ws
    path = ledger.ledger_path(key_file(tmp_path))
    ledger.append(
        path, ledger_match.entries((10, 10), [0], [np.eye(2, 3)], np.zeros((1, 64, 64, 3)))
    )
    before = path.read_bytes()
    fill_disk_after(monkeypatch, path, 100)
    anonymize_clip = functools.partial(
        runner.anonymize_video,
        Run("anonymize", double, faces, PASSWORD, RECORD, ledger_file=path, settings=BATCH),
        tmp / "pan.mp4",
        tmp_path / "anon.mp4",
    )
    with pytest.raises(OutputWriteError, match="No space left on device") as error:
        anonymize_clip()
    assert str(path) in str(error.value) and str(tmp_path / "anon.mp4") in str(error.value)
    assert (
        not (tmp_path / "anon.mp4").exists()
        and not sidecar.path_for(tmp_path / "anon.mp4").exists()
    )
    assert path.read_bytes() == before
    monkeypatch.undo()
    report = anonymize_clip()
    assert report.faces > 0 and len(ledger.read(path)) > 1
