"""The web page's jobs (dbaf_jax/web/jobs.py) without a server: names from the browser,
kinds, bounds, the private folder, sessions, expiry and the folders killed servers left."""

import os
import stat
import subprocess
import sys

import pytest

from dbaf_jax.web import jobs
from dbaf_jax.web.jobs import LimitError, Limits, NotFound
from dbaf_jax.web.store import ROOT_PREFIX, JobStore, remove_stale_roots


@pytest.mark.parametrize(
    "given, shown",
    [
        ("photo.jpg", "photo.jpg"),
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\me\\face.png", "face.png"),
        ("bad\x00name\n.png", "badname.png"),
        ("..", "file1"),
        ("", "file1"),
        ("x" * 300 + ".png", "x" * (jobs.MAX_NAME - 4) + ".png"),
    ],
)
def test_display_names(given, shown):
    assert jobs.display_name(given, "file1") == shown


def test_kinds_by_suffix():
    assert [
        jobs.kind_of(name, "recover") for name in ("a.JPG", "b.mp4", "b.mp4.dbaf.json", "c.txt")
    ] == ["photo", "clip", "sidecar", "other"]
    assert jobs.kind_of("b.mp4.dbaf.json", "anonymize") == "other"


def write(upload, *chunks):
    try:
        for chunk in chunks:
            upload.write(chunk)
    except LimitError as err:
        upload.close(False, str(err))
        raise
    upload.close(True)


def test_private_folders_and_bounds(tmp_path):
    store = JobStore(Limits(file_bytes=10, job_bytes=15, files=3, jobs=1), tmp_path)
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    session = store.new_session()
    job = store.create(session, "anonymize")
    with pytest.raises(LimitError, match="holds 1 runs already"):
        store.create(session, "anonymize")
    entry = job.new_entry("a.png", None)
    write(job.upload(entry), b"12345", b"678")
    assert (
        entry.stored.read_bytes() == b"12345678"
        and stat.S_IMODE(entry.stored.stat().st_mode) == 0o600
    )
    big = job.new_entry("b.png", None)
    with pytest.raises(LimitError, match="b.png: the run would hold more than 15 bytes"):
        write(job.upload(big), b"1234", b"5678")
    assert big.state == "skipped" and big.stored is None and not (job.folder / "in" / "1").exists()
    other = job.new_entry("notes.txt", None)
    write(job.upload(other), b"x")
    assert (
        other.state == "skipped"
        and "not a photo" in other.message
        and not (job.folder / "in" / "2").exists()
    )
    with pytest.raises(LimitError, match="at most 3 files per run"):
        job.new_entry("c.png", 1)
    job.state = "queued"
    with pytest.raises(LimitError, match="has started"):
        job.new_entry("d.png", 1)


def test_runs_are_found_only_with_their_session_and_deleted(tmp_path):
    store = JobStore(Limits(keep_seconds=60), tmp_path)
    mine, theirs = store.new_session(), store.new_session()
    job = store.create(mine, "recover")
    with pytest.raises(NotFound, match="^no such run$"):
        store.get(job.id, theirs)
    assert store.get(job.id, mine) is job
    assert store.expire(job.touched + 30) == []
    assert store.expire(job.touched + 61) == [job.id] and not job.folder.exists()
    with pytest.raises(NotFound, match=r"this run's files were deleted \(not used for 1 minutes\)"):
        store.get(job.id, mine)
    with pytest.raises(NotFound, match="^no such run$"):
        store.get(job.id, theirs)  # the reason too is for its own session only
    running = store.create(mine, "anonymize")
    running.state = "running"
    assert store.expire(running.touched + 1e6) == []  # never under a run
    store.close()
    assert not store.root.exists()


def test_folders_of_killed_servers_are_removed(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f"{ROOT_PREFIX}{dead.stdout.strip()}-abc"
    (stale / "job").mkdir(parents=True)
    alive = tmp_path / f"{ROOT_PREFIX}{os.getpid()}-def"
    alive.mkdir()
    assert remove_stale_roots(tmp_path) == [stale]
    assert not stale.exists() and alive.exists()
