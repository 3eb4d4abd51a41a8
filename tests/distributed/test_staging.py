"""The staging folder of a Ray run (`dbaf_jax.distributed.staging`) and the move into place
it uses (`atomic_files.place`): an output is put in place whole, never over an existing
one unless asked, and a killed run's staging folder is removed by the next run, not a
running one's."""

import os
import subprocess
import sys

import pytest

from dbaf_jax.core.errors import OutputExistsError
from dbaf_jax.distributed import staging
from dbaf_jax.storage import atomic_files
from tests.paths import REPO


def test_a_staged_output_is_put_in_place_under_its_own_name(tmp_path):
    out = tmp_path / "out"
    with staging.Staging(out) as stage:
        staged = stage.path(out / "sub" / "a.png")
        assert staged.parent != out / "sub" and stage.root in staged.parents
        staged.parent.mkdir(parents=True)
        staged.write_bytes(b"made")
        assert stage.commit(staged, overwrite=False) == out / "sub" / "a.png"
        assert (out / "sub" / "a.png").read_bytes() == b"made" and not staged.exists()
        root = stage.root
    assert not root.exists()  # closing removes what was not committed
    assert sorted(p.name for p in out.iterdir()) == ["sub"]


def test_an_existing_output_is_replaced_only_when_asked(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.png").write_bytes(b"earlier")
    with staging.Staging(out) as stage:
        staged = stage.path(out / "a.png")
        staged.write_bytes(b"new")
        with pytest.raises(OutputExistsError, match="a.png exists already"):
            stage.commit(staged, overwrite=False)
        assert (out / "a.png").read_bytes() == b"earlier" and staged.exists()
        stage.commit(staged, overwrite=True)
    assert (out / "a.png").read_bytes() == b"new"


def test_place_without_hard_links_still_refuses_an_existing_name(tmp_path, monkeypatch):
    done, target = tmp_path / "done", tmp_path / "target"
    done.write_bytes(b"x")

    def no_links(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    atomic_files.place(done, target)
    assert target.read_bytes() == b"x" and not done.exists()
    done.write_bytes(b"y")
    with pytest.raises(OutputExistsError):
        atomic_files.place(done, target)
    assert target.read_bytes() == b"x"


def test_a_killed_runs_staging_folder_is_removed_and_a_running_ones_kept(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    killed = out / f"{staging.PREFIX}0123456789abcdef"
    (killed / "sub").mkdir(parents=True)
    (killed / "sub" / "face.png").write_bytes(b"pixels")
    (killed / staging.LOCK).write_bytes(b"")
    # A run still going holds its lock from another process.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from dbaf_jax.distributed.staging import Staging; "
            "s = Staging(Path(sys.argv[1])); print(s.root, flush=True); sys.stdin.read()",
            str(out),
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        running = holder.stdout.readline().strip()
        notes = staging.clear_stale(out)
    finally:
        holder.stdin.close()
        holder.wait()
    assert not killed.exists()
    assert notes == [
        f"{running}: the staging folder of a Ray run still going; left as it is",
        f"removed {killed}, the staging folder an interrupted Ray run left (it may hold faces)",
    ] or notes == [
        f"removed {killed}, the staging folder an interrupted Ray run left (it may hold faces)",
        f"{running}: the staging folder of a Ray run still going; left as it is",
    ]
    assert os.path.isdir(running)
