"""launch.py refuses what it would silently drop or change (issue 21, docs/reliability.md):
an argument it does not use, and a resume with another configuration than the one the
workdir was trained with, unless --allow_config_change (then logged)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from configs.dbaf import stage1
from dbaf_jax.core.errors import ConfigError
from dbaf_jax.train import run_config
from tests.paths import REPO


def launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "launch.py", "--config", "configs/dbaf/stage1.py:tiny", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


def test_a_boolean_written_with_a_space_is_refused_not_dropped(tmp_path):
    # absl reads `--config.data.synthetic False` as True plus a stray `False`.
    result = launch(
        "--workdir",
        str(tmp_path / "w"),
        "--config.data.synthetic",
        "False",
        "--config.data.dir",
        str(tmp_path),
    )
    [line] = error_lines(result)
    assert "unused argument(s) False" in line and "--config.FIELD=VALUE" in line
    assert not (tmp_path / "w").exists()  # refused before anything was made


def trained_workdir(workdir: Path, config) -> Path:
    """A workdir as a run leaves it: its stored configuration and a checkpoint to resume."""
    run_config.check_and_store(workdir, config)
    (workdir / "checkpoints" / "1").mkdir(parents=True)
    return workdir


def test_resuming_with_another_configuration_is_refused_naming_the_field(tmp_path):
    workdir = trained_workdir(tmp_path / "w", stage1.get_config("tiny"))
    stored = (workdir / run_config.CONFIG_FILE).read_text()
    [line] = error_lines(launch("--workdir", str(workdir), "--config.loss.rec=5.0"))
    assert "loss.rec 3.5 -> 5.0;" in line and "--allow_config_change" in line, line
    assert (workdir / run_config.CONFIG_FILE).read_text() == stored


def test_an_intended_change_is_logged_and_stored(tmp_path):
    workdir = trained_workdir(tmp_path / "w", stage1.get_config("tiny"))
    changed_config = stage1.get_config("tiny")
    changed_config.loss.rec = changed_config.loss.rec + 1.5
    with pytest.raises(ConfigError, match="loss.rec"):
        run_config.check_and_store(workdir, changed_config)
    changed = run_config.check_and_store(workdir, changed_config, allow_change=True)
    assert list(changed) == ["loss.rec"]
    assert (
        json.loads((workdir / run_config.CONFIG_FILE).read_text())["loss"]["rec"]
        == changed_config.loss.rec
    )
    history = [
        json.loads(line) for line in (workdir / run_config.HISTORY_FILE).read_text().splitlines()
    ]
    assert [h["event"] for h in history] == ["start", "resume"]
    assert history[1]["changed"] == {
        "loss.rec": [changed_config.loss.rec - 1.5, changed_config.loss.rec]
    }
    assert (
        run_config.check_and_store(workdir, changed_config) == {}
    )  # the new one is now the stored one


def test_a_run_that_never_saved_a_checkpoint_takes_new_settings(tmp_path):
    config = stage1.get_config("tiny")
    run_config.check_and_store(tmp_path, config)
    config.batch_size = config.batch_size * 2
    assert run_config.check_and_store(tmp_path, config) == {}
    assert (
        json.loads((tmp_path / run_config.CONFIG_FILE).read_text())["batch_size"]
        == config.batch_size
    )


def test_a_damaged_stored_configuration_is_named(tmp_path):
    (tmp_path / run_config.CONFIG_FILE).write_text("[1, 2")
    with pytest.raises(ConfigError, match=f"{tmp_path / run_config.CONFIG_FILE}: cannot read"):
        run_config.check_and_store(tmp_path, stage1.get_config("tiny"))
