"""The one way a command ends on a user's error: one ``error:`` line, exit status 1."""

import importlib
import json
import os
import subprocess
import sys
import tomllib

import pytest

import configs
from configs import stage1 as card_stage1
from configs import stage2 as card_stage2
from configs.dbaf import stage1, stage2
from dbaf_jax import commands
from dbaf_jax.commands import scripts
from dbaf_jax.core.errors import DatasetError
from dbaf_jax.faces.detectors import registry
from dbaf_jax.inference import anonymizer
from dbaf_jax.train import data
from tests.paths import REPO


def failing(argv):
    raise DatasetError(f"{argv[0]}: no such dataset directory")


def test_run_main_turns_a_dbaf_error_into_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        commands.run_main(failing, ["data/"])
    assert exit_info.value.code == 1
    captured = capsys.readouterr()
    assert captured.err == "error: data/: no such dataset directory\n" and captured.out == ""
    assert commands.exit_status(failing, ["data/"]) == 1


def test_run_main_returns_on_success_and_keeps_bugs_visible(capsys):
    calls = []
    assert commands.run_main(calls.append, ["x"]) is None  # no exit: in-process callers go on
    assert calls == [["x"]] and capsys.readouterr().err == ""
    assert commands.exit_status(calls.append, []) == 0

    def buggy(argv):
        raise KeyError("not a user error")

    with pytest.raises(KeyError):  # only DbafError is the user's; anything else keeps its traceback
        commands.run_main(buggy)


def test_folder_parser_refuses_a_batch_size_below_1(capsys):
    parser = commands.folder_parser("prog", "description")
    args = parser.parse_args(["--model", "m", "--password-file", "p", "in", "out"])
    assert (args.batch_size, args.overwrite, args.dtype) == (
        None,
        False,
        "float32",
    )  # None: per backend
    assert anonymizer.default_batch_size() == anonymizer.CPU_BATCH == 8
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(
            ["--model", "m", "--password-file", "p", "in", "out", "--batch-size", "0"]
        )
    assert exit_info.value.code == 2 and "must be at least 1" in capsys.readouterr().err


def launch(*args: str) -> subprocess.CompletedProcess:
    """``python launch.py ARGS`` from the repository root, on the CPU."""
    return subprocess.run(
        [sys.executable, "launch.py", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


def test_launch_with_a_missing_dataset_prints_one_error_line(tmp_path):
    """The design card's command, ``--config configs/stage2.py:VARIANT`` with overrides, is
    DBAF's stage 2 of configs/dbaf/: the stored configuration says so before the dataset
    check stops it."""
    missing = tmp_path / "no_dataset"
    workdir = tmp_path / "w"
    result = launch(
        "--config",
        "configs/stage2.py:tiny",
        "--workdir",
        str(workdir),
        "--config.batch_size=3",
        "--config.data.synthetic=False",
        "--config.data.dir",
        str(missing),
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {missing}: no such dataset directory"], result.stderr
    stored = json.loads((workdir / "config.json").read_text())
    expected = stage2.get_config("tiny")
    assert (stored["stage"], stored["model"]["size"], stored["batch_size"]) == (
        2,
        expected.model.size,
        3,
    )


def test_the_card_configs_are_dbafs_configs():
    """configs/stage1.py and configs/stage2.py are configs/dbaf/'s, not copies of them."""
    assert card_stage1.get_config is stage1.get_config
    assert card_stage1.VARIANTS is stage1.VARIANTS
    assert card_stage2.get_config is stage2.get_config
    assert card_stage2.VARIANTS is stage2.VARIANTS
    assert [path.relative_to(REPO).as_posix() for path in configs.config_files()] == [
        "configs/stage1.py",
        "configs/stage2.py",
        "configs/dbaf/stage1.py",
        "configs/dbaf/stage2.py",
        "configs/ifadit/phases.py",
    ]


@pytest.mark.parametrize(
    "spelling",
    [
        ["--config", "configs/stage3.py:tiny", "--config.batch_size=3"],
        ["-config=configs/stage3.py"],
    ],
)
def test_launch_with_a_config_file_that_is_not_there(tmp_path, spelling):
    """One line naming the file and the known configs (not ml_collections' traceback at
    the config's first use), exit 1, nothing written."""
    workdir = tmp_path / "w"
    result = launch(*spelling, "--workdir", str(workdir))
    assert result.returncode == 1 and result.stdout == ""
    known = ", ".join(path.relative_to(REPO).as_posix() for path in configs.config_files())
    assert result.stderr == (
        f"error: configs/stage3.py: no such config file; the configs: {known} "
        "(variants as FILE:name)\n"
    )
    assert not workdir.exists()


def test_a_folder_that_is_no_prepared_dataset(tmp_path):
    with pytest.raises(DatasetError, match=f"{tmp_path}: not a dataset prepared by"):
        data.PreparedImages(tmp_path)


def test_every_command_is_a_console_script():
    """pyproject.toml declares each command of `scripts.COMMANDS` as dbaf-<name>, run
    by the entry of that name in `commands.scripts`; each command module (in
    dbaf_jax/commands/, the web page's package beside it) has ``main(argv)``."""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert declared == {
        f"dbaf-{name.replace('_', '-')}": f"dbaf_jax.commands.scripts:{name}"
        for name in scripts.COMMANDS
    }
    for name in scripts.COMMANDS:
        assert callable(getattr(scripts, name))
        package = "dbaf_jax" if name == "web" else "dbaf_jax.commands"
        assert callable(importlib.import_module(f"{package}.{name}").main)


def test_the_command_modules_are_the_commands_folder():
    """Every module of dbaf_jax/commands/ but the shared ones is a command of `COMMANDS`."""
    folder = REPO / "dbaf_jax" / "commands"
    modules = {path.stem for path in folder.glob("*.py")} - {"__init__", "scripts"}
    assert modules == set(scripts.COMMANDS) - {"web"}


def test_console_script_exits_with_the_commands_status(tmp_path, monkeypatch, capsys):
    """``dbaf-new-key --out EXISTING``: one error line and exit status 1, as ``python -m``."""
    existing = tmp_path / "me.key"
    existing.write_text("kept")
    monkeypatch.setattr(sys, "argv", ["dbaf-new-key", "--out", str(existing)])
    with pytest.raises(SystemExit) as exit_info:
        scripts.new_key()
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.startswith("error: ")
    assert existing.read_text() == "kept"


@pytest.mark.parametrize("command", ["anonymize", "anonymize_video", "recover", "recover_video"])
def test_the_detector_flags_name_the_registry_and_the_old_spelling_names_the_new(command, capsys):
    """--help lists every detector of the registry and the weights-folder flag; the old
    --detector (one letter from --detectors) is one error line naming --detector-weights."""
    main = importlib.import_module(f"dbaf_jax.commands.{command}").main
    with pytest.raises(SystemExit):
        main(["--help"])
    usage = " ".join(capsys.readouterr().out.split())
    assert f"from {', '.join(registry.DETECTORS)};" in usage and "--detector-weights" in usage
    assert "--detector DETECTOR" not in usage
    argv = ["--model", "m", "--password-file", "p", "in", "out", "--detector", "m/mtcnn"]
    assert commands.exit_status(main, argv) == 1
    assert capsys.readouterr().err == (
        "error: --detector is now --detector-weights DIR (the folder that holds mtcnn/ and "
        "centerface/, not mtcnn/ itself)\n"
    )


@pytest.mark.parametrize("command", ["anonymize", "recover", "anonymize_video", "recover_video"])
def test_a_mistyped_key_file_fails_before_the_model_loads(command, tmp_path, capsys):
    """Every run command reads the password file and the key file before the model
    (`commands.start_run`): a key file that is not one is the one error line, though the
    model directory given does not exist either."""
    (tmp_path / "pw.txt").write_text("a password\n")
    (tmp_path / "me.key").write_text("{not a key file")
    main = importlib.import_module(f"dbaf_jax.commands.{command}").main
    argv = ["--model", str(tmp_path / "no_model"), "--password-file", str(tmp_path / "pw.txt")]
    argv += ["--key-file", str(tmp_path / "me.key"), str(tmp_path / "in"), str(tmp_path / "out")]
    assert commands.exit_status(main, argv) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {tmp_path / 'me.key'}") and "no_model" not in line, line
    assert not (tmp_path / "out").exists()
