"""``anonymize`` and ``recover`` with ``--ray`` on a local Ray cluster against the same
commands on one machine: a folder of real photos and a cut of a real clip, with a
corrupt photo and a truncated clip beside them, the tempered tiny DBAF model of the
photo tests and the real CenterFace (the default detector).

Every Ray test of the suite is in this file: one ``ray.init(num_cpus=2)`` serves them
all (a pytest-xdist worker takes a whole file, ``--dist loadfile``), with a compilation
cache its workers share, so that a restarted actor loads its programs instead of
compiling them again.
"""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import psutil
import pytest
import ray
from PIL import Image

from dbaf_jax import commands
from dbaf_jax.commands import anonymize, new_key, recover
from dbaf_jax.distributed.staging import PREFIX
from dbaf_jax.faces import ledger
from dbaf_jax.inference.report import EXIT_SKIPPED
from tests.cli_helpers import command_line, photo_model
from tests.paths import DATA, REPO

pytestmark = pytest.mark.slow  # a model conversion, Ray's start, and both runs of each case
PHOTOS = ["office1.jpg", "office3.jpg", "jf.jpg"]
CLIP = "table_two_people_cut.mp4"  # 4 frames of a real clip, 1280x960, two people at a table
# Every run: the default detector, CenterFace (photo_model converts its weights; with MTCNN
# and dlib's HOG beside it the file took half as much CPU again), and one face per model
# call, so that outputs are put in place one by one (the kill tests stop runs between two). The
# model's program has the batch's shape, and XLA:CPU's rounding may differ by one 8-bit
# level between shapes: runs compared bit for bit take the same batch size.
OPTIONS = ["--detectors", "centerface", "--batch-size", "1"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The one local Ray cluster of the test run, 2 CPUs. Its processes take this
    process's environment when it starts: a compilation cache of their own, which every
    worker of every driver shares (this process keeps compiling afresh), and Ray's
    memory monitor off."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DBAF_JAX_CACHE_DIR", str(tmp_path_factory.mktemp("xla_cache")))
        # No memory monitor: on a CI machine the tests beside these fill its memory too, and
        # Ray would kill these workers and retry them without end (docs/distributed.md).
        environment.setenv("RAY_memory_monitor_refresh_ms", "0")
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=256 << 20,
        )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def ws(cluster, tmp_path_factory):
    """The model, one copy of a key file per run (each its own ledger), and the folders:
    ``in`` (the photos, the clip, a JPEG cut short and the clip cut short) and
    ``photos`` (the photos alone)."""
    tmp = tmp_path_factory.mktemp("ray_runs")
    photo_model(tmp)
    commands.run_main(new_key.main, ["--out", str(tmp / "run.key")])
    for name in ("one", "ray", "killed_actor", "killed_driver"):
        shutil.copy(tmp / "run.key", tmp / f"{name}.key")
    for folder in ("in", "photos"):
        (tmp / folder).mkdir()
        for name in PHOTOS:
            shutil.copy(DATA / name, tmp / folder / name)
    shutil.copy(DATA / CLIP, tmp / "in" / CLIP)
    jpeg = (DATA / "office5.jpg").read_bytes()
    (tmp / "in" / "broken.jpg").write_bytes(jpeg[: len(jpeg) * 2 // 5])
    clip = (DATA / CLIP).read_bytes()
    (tmp / "in" / "short.mp4").write_bytes(clip[: len(clip) * 9 // 10])  # its first frame only
    return tmp


def run(command, ws, source, target, key, *extra):
    untrained = (
        ["--untrained-mode"] if command is recover else []
    )  # the reference records latent recovery
    argv = command_line(ws, source, target, "--key-file", ws / key, *OPTIONS, *untrained, *extra)
    return command.main(argv)


def printed(report, *folders):
    """The report as the command prints it, each of ``folders`` written as its index."""
    out = io.StringIO()
    report.print(out)
    text = out.getvalue()
    for number, folder in enumerate(folders):
        text = text.replace(str(folder), f"<{number}>")
    return text


def files(folder):
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def ledger_lines(key_file):
    """The ledger's lines, each clip's run id (random per run) written as one name."""
    lines = ledger.ledger_path(key_file).read_bytes().split(b"\n")
    assert lines[-1] == b""  # no torn line
    same = []
    for line in lines[:-1]:
        entries = json.loads(line)
        same.append(
            json.dumps([entry | ({"clip": "run"} if "clip" in entry else {}) for entry in entries])
        )
    return Counter(same)


@pytest.fixture(scope="module")
def one_machine(ws):
    return run(anonymize, ws, ws / "in", ws / "out_one", "one.key")


@pytest.fixture(scope="module")
def on_ray(ws, one_machine):
    return run(anonymize, ws, ws / "in", ws / "out_ray", "ray.key", "--ray", "--ray-actors", "2")


def test_two_cpu_actors_write_the_one_machine_bytes_ledger_summary_and_status(
    ws, one_machine, on_ray
):
    assert one_machine.status == on_ray.status == EXIT_SKIPPED
    assert printed(on_ray, ws / "out_ray", ws / "in") == printed(
        one_machine, ws / "out_one", ws / "in"
    )
    assert [item.path.name for item in on_ray.skipped] == ["broken.jpg"]
    assert "image file is truncated" in on_ray.skipped[0].reason
    (short,) = [clip for clip in on_ray.clips if clip.written[0].name == "short.mp4"]
    assert short.short and short.frames == 1
    made, expected = files(ws / "out_ray"), files(ws / "out_one")
    assert (
        sorted(made)
        == sorted(expected)
        == sorted(
            [
                "office1.png",
                "office3.png",
                "jf.png",
                CLIP,
                f"{CLIP}.dbaf.json",
                "short.mp4",
                "short.mp4.dbaf.json",
            ]
        )
    )
    assert [name for name in made if made[name] != expected[name]] == []
    assert ledger_lines(ws / "ray.key") == ledger_lines(ws / "one.key")
    assert on_ray.faces == one_machine.faces > 0


def test_ray_recovery_restores_what_one_machine_recovery_restores(ws, one_machine, on_ray):
    for name in ("one", "ray"):
        shutil.copytree(ws / f"out_{name}", ws / f"back_in_{name}")
        with Image.open(ws / f"out_{name}" / "office3.png") as img:  # shared: its metadata lost
            img.convert("RGB").save(ws / f"back_in_{name}" / "office3_shared.jpg", quality=95)
    by_one = run(recover, ws, ws / "back_in_one", ws / "back_one", "one.key")
    by_ray = run(
        recover, ws, ws / "back_in_ray", ws / "back_ray", "ray.key", "--ray", "--ray-actors", "2"
    )
    assert printed(by_ray, ws / "back_ray", ws / "back_in_ray") == printed(
        by_one, ws / "back_one", ws / "back_in_one"
    )
    assert by_ray.status == by_one.status
    made, expected = files(ws / "back_ray"), files(ws / "back_one")
    assert "office3_shared.png" in made and "short.mp4" in made
    assert sorted(made) == sorted(expected)
    assert [name for name in made if made[name] != expected[name]] == []


def model_actors():
    """The processes of the Ray Data model actors (their titles name the actor class)."""
    found = set()
    for process in psutil.process_iter(["pid", "cmdline"]):
        if any("PhotoModel" in part for part in process.info["cmdline"] or []):
            found.add(process.info["pid"])
    return found


def wait_for_output(folder, alive, seconds=600):
    """Until a PNG is in place in ``folder`` (while ``alive()``)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and alive():
        if any(folder.glob("*.png")):
            return True
        time.sleep(0.02)
    return False


def leftovers(folder):
    return [
        p for p in folder.rglob("*") if p.name.startswith(PREFIX) or p.name.endswith(".partial")
    ]


def test_an_actor_killed_mid_run_leaves_no_duplicate_nor_partial(ws, one_machine):
    before = model_actors()
    out = ws / "out_killed_actor"
    result = {}
    runner = threading.Thread(
        target=lambda: result.update(
            report=run(
                anonymize,
                ws,
                ws / "photos",
                out,
                "killed_actor.key",
                "--ray",
                "--ray-actors",
                "1",
            )
        )
    )
    runner.start()
    assert wait_for_output(out, runner.is_alive)
    (killed,) = model_actors() - before
    os.kill(killed, signal.SIGKILL)  # Ray restarts the actor and runs its batch again
    restarted = set()
    while runner.is_alive():
        restarted |= model_actors() - before - {killed}
        runner.join(0.1)
    report = result["report"]
    assert restarted and report.status == 0 and len(report.written) == len(PHOTOS)
    made, expected = files(out), files(ws / "out_one")
    assert sorted(made) == ["jf.png", "office1.png", "office3.png"]
    assert [name for name in made if made[name] != expected[name]] == []
    photo_lines = +Counter(
        {line: n for line, n in ledger_lines(ws / "one.key").items() if '"clip"' not in line}
    )
    assert ledger_lines(ws / "killed_actor.key") == photo_lines
    assert leftovers(out) == []


def test_a_killed_driver_reruns_with_resume_without_redoing_finished_outputs(
    ws, one_machine, cluster
):
    out = ws / "out_killed_driver"
    argv = command_line(
        ws,
        ws / "photos",
        out,
        "--key-file",
        ws / "killed_driver.key",
        *OPTIONS,
        "--ray-actors",
        "1",
    )
    address = cluster.get_runtime_context().gcs_address
    before = model_actors()
    driver = subprocess.Popen(
        [sys.executable, "-m", "dbaf_jax.commands.anonymize", *argv, f"--ray={address}"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_for_output(out, lambda: driver.poll() is None)
    finally:
        driver.kill()
        driver.wait()
    while model_actors() - before:  # Ray ends the dead driver's actors
        time.sleep(0.1)
    finished = {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in out.glob("*.png")}
    assert 0 < len(finished) < len(PHOTOS), "the driver was to be killed mid-run"
    report = anonymize.main([*argv, "--ray", "--resume"])
    assert report.status == 0 and sorted(report.kept) == sorted(finished)
    assert {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in finished} == finished
    assert any("staging folder an interrupted Ray run left" in note for note in report.notes)
    made, expected = files(out), files(ws / "out_one")
    assert sorted(made) == ["jf.png", "office1.png", "office3.png"]
    assert [name for name in made if made[name] != expected[name]] == []
    photo_lines = {line for line in ledger_lines(ws / "one.key") if '"clip"' not in line}
    assert set(ledger_lines(ws / "killed_driver.key")) == photo_lines
    assert leftovers(out) == []


def test_a_folder_the_workers_cannot_see_stops_the_run_before_any_work(ws, cluster, capsys):
    """``/proc/self/fd/N`` is the input folder for the driver, which holds that descriptor,
    and nothing for the workers: a folder only the driver's machine mounts."""
    held = os.open(ws / "photos", os.O_RDONLY | os.O_DIRECTORY)
    only_here = f"/proc/self/fd/{os.dup2(held, 900)}"
    try:
        argv = command_line(ws, only_here, ws / "out_unseen", *OPTIONS, "--ray")
        status = commands.exit_status(anonymize.main, argv)
    finally:
        os.close(900)
        os.close(held)
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert status == 1 and line.startswith(
        f"error: {only_here}: no such folder here (seen from the Ray node "
    )
    assert not (ws / "out_unseen").exists() or list((ws / "out_unseen").iterdir()) == []
