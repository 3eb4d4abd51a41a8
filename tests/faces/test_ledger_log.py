"""The face ledger as an append-only log (dbaf_jax/faces/ledger.py): each run's entries
are there whole or not at all, a torn last line is skipped by readers and removed before
the next append, and whether the ledger can be written is checked before any work. A
full disk is simulated (a write that stops after some bytes with ENOSPC) and, where the
machine lets a process mount a private file system, real (a 64 KiB tmpfs)."""

import errno
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dbaf_jax.core.errors import OutputWriteError
from dbaf_jax.faces import ledger
from tests.paths import can_mount_tmpfs


def entries(count, first=0):
    """``count`` photo entries with key indices from ``first``."""
    rng = np.random.default_rng(first)
    return [
        ledger.Entry(
            first + i, 1.5, (0.1 + 0.01 * i, 0.3), 0.05, rng.uniform(0, 1, ledger.GRID**2 * 3), 0.2
        )
        for i in range(count)
    ]


def indices(path, notes=None):
    return [entry.index for entry in ledger.read(path, notes)]


def test_a_write_cut_short_by_a_full_disk_leaves_the_ledger_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "me.key.faces.jsonl"
    ledger.append(path, entries(2))
    before = path.read_bytes()
    real_write = os.write
    taken = []

    def fills_up(fd, data):  # the ledger's disk takes 100 bytes, then is full
        if os.readlink(f"/proc/self/fd/{fd}") != str(path):
            return real_write(fd, data)
        room = 100 - sum(taken)
        if room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        taken.append(real_write(fd, bytes(data[:room])))
        return taken[-1]

    monkeypatch.setattr(os, "write", fills_up)
    with pytest.raises(OutputWriteError, match="No space left on device") as error:
        ledger.append(path, entries(300, first=10))  # two lines, one write
    assert str(path) in str(error.value)
    monkeypatch.undo()
    assert path.read_bytes() == before  # nothing of the failed run, no torn line
    ledger.append(path, entries(1, first=5))
    assert indices(path) == [0, 1, 5]


def test_a_torn_last_line_is_skipped_said_once_and_removed_before_the_next_append(tmp_path):
    path = tmp_path / "me.key.faces.jsonl"
    ledger.append(path, entries(2))
    whole = path.read_bytes()
    with open(path, "ab") as file:  # what an older version left when the disk filled mid-line
        file.write(ledger._lines(entries(1, first=7))[:300])
    notes = []
    assert indices(path, notes) == [0, 1]
    assert len(notes) == 1 and "line 2 is torn" in notes[0] and str(path) in notes[0]
    ledger.append(path, entries(1, first=9))
    assert path.read_bytes().startswith(whole) and indices(path) == [0, 1, 9]
    with open(path, "ab") as file:
        file.write(b'[{"index":')
    note = ledger.check_appendable(path, 1)
    assert "removed a torn last line (10 bytes" in note
    assert indices(path) == [0, 1, 9] and path.read_bytes().endswith(b"\n")


def test_a_ledger_of_one_torn_line_is_emptied(tmp_path):
    path = tmp_path / "me.key.faces.jsonl"
    path.write_bytes(b"x" * (3 * ledger.TAIL_CHUNK + 5))  # longer than one look back
    assert indices(path) == []
    ledger.append(path, entries(1, first=4))
    assert indices(path) == [4]


def test_a_ledger_that_cannot_be_written_is_refused_before_work(tmp_path, monkeypatch):
    folder = tmp_path / "me.key.faces.jsonl"
    folder.mkdir()
    with pytest.raises(OutputWriteError, match="Is a directory") as error:
        ledger.check_appendable(folder, 1)
    assert str(folder) in str(error.value)
    absent = tmp_path / "new.key.faces.jsonl"
    assert (
        ledger.check_appendable(absent, 10) is None and not absent.exists()
    )  # probed, not left behind
    nowhere = tmp_path / "missing" / "k.key.faces.jsonl"
    with pytest.raises(OutputWriteError, match="No such file or directory"):
        ledger.check_appendable(nowhere, 1)
    fifo = tmp_path / "fifo.faces.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OutputWriteError, match="not a regular file|No such device"):
        ledger.check_appendable(fifo, 1)

    class Full:
        f_bavail, f_frsize = 3, 4096

    monkeypatch.setattr(os, "fstatvfs", lambda fd: Full)
    with pytest.raises(
        OutputWriteError,
        match=r"No space left on device: 12288 bytes free, about 20480 needed for 10 entries",
    ):
        ledger.check_appendable(tmp_path / "k.key.faces.jsonl", 10)


FULL_DISK = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from tests.faces.test_ledger_log import entries, indices
    from dbaf_jax.core.errors import OutputWriteError
    from dbaf_jax.faces import ledger
    path = Path("/mnt/me.key.faces.jsonl")
    ledger.append(path, entries(2))
    before = path.read_bytes()
    (Path("/mnt") / "filler").write_bytes(b"0" * (64 * 1024 - 3 * 4096))  # leaves a few pages
    try:
        ledger.append(path, entries(40, first=10))
        print("appended")
    except OutputWriteError as err:
        print("refused:", err)
    assert path.read_bytes() == before, "the failed append left bytes behind"
    (Path("/mnt") / "filler").unlink()
    ledger.append(path, entries(1, first=5))
    print(indices(path))
""")


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(
    not can_mount_tmpfs("/mnt", "size=64k"),
    reason="this machine does not let a process mount a private file system",
)
def test_a_real_full_disk_leaves_every_earlier_entry_readable(tmp_path):
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK)
    command = (
        f"mount -t tmpfs -o size=64k tmpfs /mnt && exec '{sys.executable}' '{script}' '{ROOT}'"
    )
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", command],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert (
        lines[0].startswith("refused: /mnt/me.key.faces.jsonl: cannot append")
        and "No space left on device" in lines[0]
    ), lines
    assert lines[1] == "[0, 1, 5]"


@pytest.mark.skipif(
    not can_mount_tmpfs("/mnt", "ro"),
    reason="this machine does not let a process mount a private file system",
)
def test_a_read_only_disk_is_refused_before_work():
    command = (
        f"mount -t tmpfs -o ro tmpfs /mnt && exec '{sys.executable}' -c "
        "'from pathlib import Path; from dbaf_jax.faces import ledger; ledger.check_appendable(Path(\"/mnt/k.key.faces.jsonl\"), 1)'"
    )
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", command],
        capture_output=True,
        text=True,
    )
    assert (
        result.returncode == 1
        and "/mnt/k.key.faces.jsonl: the key file's face ledger cannot be written (Read-only file system)"
        in result.stderr
    ), result.stderr
