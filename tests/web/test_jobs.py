"""The web page's jobs (dbaf_jax/web/jobs.py) without a server: names from the browser,
kinds, bounds, the private folder, sessions, expiry and the folders killed servers left."""

import io
import os
import stat
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from dbaf_jax.storage import file_kinds
from dbaf_jax.web import jobs
from dbaf_jax.web.jobs import LimitError, Limits, NotFound, UnknownSession
from dbaf_jax.web.store import ROOT_PREFIX, JobStore, remove_stale_roots
from tests.web_serving import pixel_bomb

CLIENT = "127.0.0.1"


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


def test_kinds_by_suffix_as_the_command_line_takes_them():
    names = ("a.JPG", "b.tif", "c.GIF", "d.mp4", "d.mp4.dbaf.json", "e.txt", "f")
    assert [jobs.kind_of(name) for name in names] == [
        "photo",
        "photo",
        "photo",
        "clip",
        "sidecar",
        "unknown",
        "unknown",
    ]


def test_a_file_of_no_known_suffix_is_a_photo_by_its_header_or_skipped(tmp_path):
    store = JobStore(Limits(), tmp_path)
    job = store.create(store.new_session(CLIENT), "anonymize")
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buffer, format="TIFF")
    photo, text = job.new_entry("scan", None), job.new_entry("notes.txt", None)
    write(job.upload(photo), buffer.getvalue())
    write(job.upload(text), b"not a photo")
    assert photo.kind == "photo" and photo.stored.read_bytes() == buffer.getvalue()
    assert photo.stored.name == "input"  # no suffix of the browser's choosing on disk
    assert (text.kind, text.state, text.stored) == ("other", "skipped", None)
    assert text.message == f"notes.txt: {file_kinds.UNKNOWN_TYPE}"
    assert not (job.folder / "in" / "1").exists()


def test_a_photo_over_the_pixel_limit_is_refused_by_its_first_bytes_and_never_stored(tmp_path):
    """The hostile trial's 164 KB PNG of 13000 x 13000 pixels, as the server streams it (64
    KB chunks), under any name (a photo's suffix, or none): refused by the header in its
    first chunk with the command line's line naming the page's limit; not a byte of it
    on disk, while it arrives or after. A photo within the limit is stored whole."""
    store = JobStore(Limits(), tmp_path)
    job = store.create(store.new_session(CLIENT), "anonymize")
    bomb = pixel_bomb()
    chunks = [bomb[i : i + (64 << 10)] for i in range(0, len(bomb), 64 << 10)]
    for name in ("bomb.png", "bomb"):
        entry = job.new_entry(name, None)
        upload = job.upload(entry)
        for chunk in chunks:
            upload.write(chunk)
            assert not [p for p in job.folder.rglob("*") if p.is_file()]
        upload.close(True)
        line = (
            f"{name}: 13000 x 13000 = 169,000,000 pixels, over the limit of 120,000,000 "
            "(the server's --max-pixels): not decoded"
        )
        assert upload.refusal == entry.message == line
        assert (entry.state, entry.stored, entry.size) == ("skipped", None, 0)
    assert not (job.folder / "in").exists()
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((30, 40, 3), np.uint8)).save(buffer, format="PNG")
    small = job.new_entry("small.png", None)
    write(job.upload(small), buffer.getvalue()[:20], buffer.getvalue()[20:])  # header split
    assert small.stored.read_bytes() == buffer.getvalue() and small.state == "uploaded"
    tight = JobStore(Limits(pixels=1199), tmp_path)
    tight_job = tight.create(tight.new_session(CLIENT), "anonymize")
    upload = tight_job.upload(tight_job.new_entry("small.png", None))
    upload.write(buffer.getvalue())
    upload.close(True)
    assert "40 x 30 = 1,200 pixels, over the limit of 1,199" in upload.refusal


def test_sizes_over_a_limit_are_told_apart_from_it():
    assert jobs.over_the_limit(5000, 1000) == "4.9 KB is over the limit of 1000 bytes"
    assert jobs.over_the_limit((1 << 30) + 1, 1 << 30) == (
        "1,073,741,825 bytes is over the limit of 1,073,741,824 bytes"
    )


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
    session = store.new_session(CLIENT)
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
        and "unknown type" in other.message
        and not (job.folder / "in" / "2").exists()
    )
    with pytest.raises(LimitError, match="at most 3 files per run"):
        job.new_entry("c.png", 1)
    job.state = "queued"
    with pytest.raises(LimitError, match="has started"):
        job.new_entry("d.png", 1)


def test_runs_are_found_only_with_their_session_and_deleted(tmp_path):
    store = JobStore(Limits(keep_seconds=60), tmp_path)
    mine, theirs = store.new_session(CLIENT), store.new_session(CLIENT)
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
    running = store.create(store.new_session(CLIENT), "anonymize")
    running.state = "running"
    assert store.expire(running.touched + 1e6) == []  # never under a run
    store.close()
    assert not store.root.exists()


def test_empty_runs_expire_in_minutes_and_finished_ones_are_kept_longer(tmp_path):
    store = JobStore(Limits(open_seconds=300, keep_seconds=3600), tmp_path)
    session = store.new_session(CLIENT)
    empty, done = store.create(session, "anonymize"), store.create(session, "anonymize")
    done.state = "done"
    now = max(empty.touched, done.touched)
    assert store.expire(now + 299) == []
    assert store.expire(now + 301) == [empty.id] and not empty.folder.exists()
    with pytest.raises(NotFound, match=r"deleted \(not started within 5 minutes\)"):
        store.get(empty.id, session)
    assert store.expire(now + 3601) == [done.id]


def test_sessions_are_never_evicted_but_bounded_per_client_and_expire(tmp_path):
    store = JobStore(Limits(sessions=2, keep_seconds=60), tmp_path)
    first, second = store.new_session(CLIENT), store.new_session(CLIENT)
    with pytest.raises(LimitError, match=f"2 pages of this server are open from {CLIENT} already"):
        store.new_session(CLIENT)
    store.new_session("192.0.2.1")  # another client has its own bound
    job = store.create(first, "anonymize")  # the first session still works
    job.state = "done"
    store.end_session(second)  # its page has gone: the slot is free again
    with pytest.raises(UnknownSession, match="reload the page"):
        store.create(second, "anonymize")
    third = store.new_session(CLIENT)
    # Unused for keep_seconds: a session without a job goes; one holding a job stays as long as its job.
    later = job.touched + 61
    assert store.expire(later) == [job.id]
    store.expire(later)
    for session in (first, third):
        with pytest.raises(UnknownSession):
            store.create(session, "anonymize")


def test_a_closed_page_takes_its_runs_along_once_they_have_finished(tmp_path):
    store = JobStore(Limits(), tmp_path)
    session = store.new_session(CLIENT)
    waiting, running = store.create(session, "anonymize"), store.create(session, "recover")
    running.state = "running"
    store.end_session(session)
    assert not waiting.folder.exists() and running.folder.exists()
    running.state = "done"
    assert store.expire() == [running.id] and not running.folder.exists()


def test_a_deleted_runs_files_stay_until_its_last_download_ends(tmp_path):
    store = JobStore(Limits(), tmp_path)
    job = store.create(store.new_session(CLIENT), "anonymize")
    store.begin_download(job)
    store.begin_download(job)
    store.delete(job, "every result was downloaded")
    with pytest.raises(NotFound, match="every result was downloaded"):
        store.begin_download(job)  # no new download of a deleted run
    store.end_download(job)
    assert job.folder.exists()
    store.end_download(job)
    assert not job.folder.exists()


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
