"""Kill -9 at random points, resume, and get the uninterrupted run's result bit for bit.

``launch.py`` on the tiny stage-1 config (4 steps, a checkpoint after every step) runs
in a subprocess that is SIGKILLed at points drawn from a seed: while a checkpoint of a
given step is being written (its Orbax temporary directory exists), just after one is
committed, between steps (once a step's metrics are logged), or while the final
model directory is being exported. The same command is then re-run until it finishes,
as a user would, and the final checkpoint (train state, step, RNG, data position) and
the exported networks must equal those of one uninterrupted run exactly.

Every process start costs a JAX import and compilation (cached on disk after the first
start, which compiles for a few minutes), so the suite runs 2 trials (`TRIALS`) of 2
kills each (`KILLS_PER_TRIAL`): 5 starts of launch.py, 7.5 minutes on a shared 2-core
CPU. ``DBAF_RESUME_FUZZ_TRIALS=N`` runs more trials and ``DBAF_RESUME_FUZZ_SEED``
draws other kill points (seed 0 in the suite: logged 4 then export; saving 3 then
saving 4).
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from dbaf_jax.storage import model_directory
from dbaf_jax.train import checkpoints, initialization, loop
from tests.paths import REPO

STEPS = 4
TRIALS = int(os.environ.get("DBAF_RESUME_FUZZ_TRIALS", "2"))
KILLS_PER_TRIAL = 2
SEED = int(os.environ.get("DBAF_RESUME_FUZZ_SEED", "0"))
POLL_S = 0.002
RUN_TIMEOUT_S = 900
ARGS = [
    "--config",
    str(REPO / "configs" / "stage1.py") + ":tiny",
    "--config.num_steps",
    str(STEPS),
    "--config.checkpoint_every",
    "1",
    "--config.keep_checkpoints",
    str(STEPS + 1),
    "--config.sample_every",
    "0",
    "--config.eval_every",
    "0",
    "--config.batch_size",
    "2",
    "--config.data.synthetic_size",
    "4",  # two steps per epoch: resumes cross an epoch boundary
    "--config.log_every",
    "1",
]


def environment(cache: Path) -> dict[str, str]:
    """One CPU device (not the 8 the other tests force) and a shared compilation cache."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(
        JAX_PLATFORMS="cpu",
        JAX_COMPILATION_CACHE_DIR=str(cache),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
    )
    return env


def times_logged(workdir: Path, step: int) -> int:
    """How many runs so far logged ``step``'s metrics (a resumed run logs a step again)."""
    metrics = workdir / "metrics" / loop.METRICS_FILE
    lines = metrics.read_text().splitlines() if metrics.is_file() else []
    return sum(1 for line in lines if line.endswith("}") and json.loads(line)["step"] == step)


def reached(point: tuple[str, int], workdir: Path, logged_before: int) -> bool:
    """Whether the run in ``workdir`` has reached the kill ``point`` (kind, step)."""
    kind, step = point
    ckpt = workdir / checkpoints.CHECKPOINT_DIR
    if kind == "logged":
        return times_logged(workdir, step) > logged_before
    if kind == "saving":
        return ckpt.is_dir() and any(
            p.name.startswith(f"{step}.orbax-checkpoint-tmp") for p in ckpt.iterdir()
        )
    if kind == "saved":
        return (ckpt / str(step) / checkpoints.ORBAX_STEP_METADATA).is_file()
    export = workdir / initialization.MODEL_EXPORT
    return export.is_dir() and any(
        p.name.endswith(model_directory.PARTIAL_SUFFIX) for p in export.iterdir()
    )


def launch(workdir: Path, env: dict[str, str], kill_at: tuple[str, int] | None = None) -> bool:
    """Runs launch.py; with ``kill_at``, SIGKILLs it there. True if it was killed there."""
    process = subprocess.Popen(
        [sys.executable, str(REPO / "launch.py"), "--workdir", str(workdir), *ARGS],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + RUN_TIMEOUT_S
    logged_before = times_logged(workdir, kill_at[1]) if kill_at else 0
    try:
        while process.poll() is None and time.monotonic() < deadline:
            if kill_at is not None and reached(kill_at, workdir, logged_before):
                process.send_signal(signal.SIGKILL)
                process.wait()
                return True
            time.sleep(POLL_S)
        if process.poll() is None:
            process.kill()
            pytest.fail(f"launch.py ran past {RUN_TIMEOUT_S} s")
    finally:
        stderr = process.stderr.read().decode(errors="replace")
        process.stderr.close()
    assert process.returncode == 0, stderr[-3000:]
    return False


def kill_points(rng: random.Random) -> list[tuple[str, int]]:
    """``KILLS_PER_TRIAL`` points at distinct steps in run order, so that each is reached
    by the run resumed after the one before: within a step the loop logs its metrics,
    then starts the checkpoint's write, which Orbax commits later; after the last step
    comes the export."""
    steps = sorted(rng.sample(range(1, STEPS + 2), KILLS_PER_TRIAL))
    return [
        ("export", s) if s > STEPS else (rng.choice(("logged", "saving", "saved")), s)
        for s in steps
    ]


def final_result(workdir: Path) -> dict[str, np.ndarray]:
    """The last checkpoint's state leaves and metadata, and the exported networks' hashes."""
    step_dir = workdir / checkpoints.CHECKPOINT_DIR / str(STEPS)
    with ocp.StandardCheckpointer() as checkpointer:
        state = checkpointer.restore(step_dir / "state")
    result = {
        jax.tree_util.keystr(k): np.asarray(v)
        for k, v in jax.tree_util.tree_leaves_with_path(state)
    }
    meta = json.loads((step_dir / "meta" / "metadata").read_text())
    result["meta"] = np.array(json.dumps(meta, sort_keys=True))
    export = workdir / initialization.MODEL_EXPORT
    result["model.json"] = np.array((export / model_directory.MODEL_FILE).read_text())
    for network in sorted(p for p in export.iterdir() if p.is_dir()):
        info = model_directory.read_info(network)
        result[f"export/{network.name}"] = np.array(info[model_directory.HASH_FIELD])
    return result


@pytest.mark.long
def test_random_kills_resume_to_the_uninterrupted_result(tmp_path):
    """`TRIALS` trials (2 unless DBAF_RESUME_FUZZ_TRIALS says otherwise) of 2 SIGKILLs each."""
    env = environment(tmp_path / "jax_cache")
    launch(tmp_path / "uninterrupted", env)
    expected = final_result(tmp_path / "uninterrupted")
    assert len(expected) > 10 and int(json.loads(str(expected["meta"]))["step"]) == STEPS

    rng = random.Random(SEED)
    for trial in range(TRIALS):
        workdir = tmp_path / f"trial{trial}"
        points = kill_points(rng)
        for point in points:
            assert launch(workdir, env, kill_at=point), (
                f"trial {trial}: the run ended before {point}"
            )
        launch(workdir, env)  # resumed to the end
        actual = final_result(workdir)
        assert actual.keys() == expected.keys(), (trial, points)
        for name, value in expected.items():
            np.testing.assert_array_equal(
                actual[name], value, err_msg=f"trial {trial}, kills {points}: {name}"
            )
