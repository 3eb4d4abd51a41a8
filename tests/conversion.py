"""Running the converters in tests: converting reference files and expecting refusals.

A converter is exercised the way users run it: its ``main`` through `convert.common.run`
(the exit status and the one ``error: ...`` line), or ``python -m convert.NAME`` in a
fresh interpreter where the command line itself is under test.
"""

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import pytest
import torch

from convert import parser as parser_converter
from convert.common import ConversionError, load_torch_checkpoint, run, to_numpy
from dbaf_jax.storage.model_directory import Network, load_network, save_network
from tests.paths import REPO

# Neither a zip archive nor a pickle: what torch.load meets in a mislabelled file.
NOT_A_CHECKPOINT = b"\x00\x01 these are not weights\n"

Main = Callable[[list[str] | None], None]


def save(checkpoint: Any, path: Path) -> Path:
    """torch.save(checkpoint, path) -> path."""
    torch.save(checkpoint, path)
    return path


def edited(
    state_dict: Mapping[str, Any], drop: Iterable[str] = (), add: Mapping[str, Any] | None = None
) -> dict:
    """A copy of ``state_dict`` without the keys ``drop``, with ``add``'s entries added or replaced."""
    drop = set(drop)
    assert drop <= set(state_dict), sorted(
        drop - set(state_dict)
    )  # an edit that removes nothing tests nothing
    return {**{k: v for k, v in state_dict.items() if k not in drop}, **(add or {})}


def convert(main: Main, argv: list[str], out: Path, network: str) -> Network:
    """Runs a converter with ``--out out`` and loads the network it wrote as ``out/network``."""
    run(main, [*argv, "--out", str(out)])
    return load_network(out / network)


def convert_parser(kind: str, module: torch.nn.Module, tmp_path):
    """A face parser ``module`` saved as a state_dict and converted by convert.parser ``--kind kind``."""
    ckpt = save(module.state_dict(), tmp_path / f"{kind}.pth")
    return convert(
        parser_converter.main,
        ["--kind", kind, "--ckpt", str(ckpt)],
        tmp_path / "models",
        f"parser_{kind}",
    )


def read_state_dict(path: Path) -> dict:
    """A plain state_dict file as convert.dbaf reads one: torch key -> numpy array."""
    return to_numpy(load_torch_checkpoint(path), str(path))


def convert_state_dict(
    to_variables: Callable[..., dict], module, state_dict: Mapping[str, Any], path: Path, **kwargs
) -> Network:
    """Saves a stage network's state_dict at ``path``, maps it with convert.dbaf's
    ``to_variables(state_dict, module, source, **kwargs)`` and loads the network saved
    beside the file (the directory is the file's name without its suffix)."""
    save(dict(state_dict), path)
    variables = to_variables(read_state_dict(path), module, str(path), **kwargs)
    return load_network(save_network(path.with_suffix(""), module, variables, source=path.name))


def layout_refusal(to_variables: Callable[[dict], Any], state_dict: Mapping[str, Any]) -> str:
    """The ConversionError message with which ``to_variables(state_dict)`` refuses the layout."""
    with pytest.raises(ConversionError) as err:
        to_variables(dict(state_dict))
    return str(err.value)


def refusal(main: Main, argv: list[str], unwritten: Path | None = None) -> str:
    """Runs a converter's main as its command does, expecting a refusal: exit status 1 and
    ``error: ...`` on stderr (returned), nothing created at ``unwritten``."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as exit_info:
        run(main, argv)
    assert exit_info.value.code == 1
    if unwritten is not None:
        assert not unwritten.exists(), f"{unwritten} written by a refused conversion"
    message = stderr.getvalue()
    assert message.startswith("error: "), message
    return message


def command_refusal(module: str, argv: list[str], unwritten: Path | None = None) -> str:
    """Runs ``python -m module *argv`` in a fresh interpreter, expecting a refusal: exit
    status 1, nothing on stdout, stderr (returned) starting ``error: ``, nothing created
    at ``unwritten``."""
    result = subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    if unwritten is not None:
        assert not unwritten.exists(), f"{unwritten} written by a refused conversion"
    assert result.stderr.startswith("error: "), result.stderr
    return result.stderr


def not_a_checkpoint(path: Path) -> Path:
    """Writes a file that is not a PyTorch checkpoint at ``path`` -> path."""
    path.write_bytes(NOT_A_CHECKPOINT)
    return path


def assert_not_a_checkpoint_message(message: str, path: Path) -> None:
    """A refusal of the file ``path``: one line naming it, no traceback."""
    assert message.count("\n") == 1 and message.endswith("\n"), message
    assert str(path) in message and "not a readable PyTorch checkpoint" in message, message


def assert_refuses_wrong_keys(
    refuse: Callable[..., str],
    missing: str,
    unexpected: Mapping[str, Any],
    misshaped: Mapping[str, Any],
) -> None:
    """A converter refuses a state dict with the key ``missing`` dropped, with the
    ``unexpected`` keys added, and with the ``misshaped`` keys replaced, naming each key
    (a mis-shaped one with its shape). ``refuse(drop=..., add=...)`` converts the state
    dict so `edited` and returns the refusal."""
    assert f"missing (1): {missing}" in refuse(drop=[missing])
    err = refuse(add=dict(unexpected))
    assert all(f"unexpected ({len(unexpected)}): {name}" in err for name in unexpected), err
    err = refuse(add=dict(misshaped))
    assert f"mis-shaped ({len(misshaped)})" in err, err
    assert all(f"{name} {list(value.shape)}" in err for name, value in misshaped.items()), err


def assert_command_refuses_a_non_checkpoint(module: str, file: Path, out: Path) -> None:
    """``python -m module --ckpt FILE --out OUT``, ``file`` not a checkpoint: one line
    naming it, no traceback, nothing written at ``out`` (`command_refusal`)."""
    bogus = not_a_checkpoint(file)
    argv = ["--ckpt", str(bogus), "--out", str(out)]
    assert_not_a_checkpoint_message(command_refusal(module, argv, unwritten=out), bogus)
