"""The converters' shared reading of PyTorch files: what is refused, in one line."""

import collections

import torch

from convert import arcface
from tests.conversion import assert_not_a_checkpoint_message, not_a_checkpoint, refusal, save


class Pickled:
    """A class of the writer's: unpickling it could run the writer's code."""


def test_pickled_objects_are_refused_for_safety_in_one_line(tmp_path):
    path = save({"weight": torch.zeros(2), "options": Pickled()}, tmp_path / "pickled.pth")
    message = refusal(
        arcface.main,
        ["--ckpt", str(path), "--out", str(tmp_path / "out")],
        unwritten=tmp_path / "out",
    )
    assert message == (
        f"error: {path}: holds objects other than tensors (pickled {__name__}.Pickled) and is refused for safety\n"
    )
    assert "weights_only" not in message


def test_containers_of_tensors_are_read_and_other_files_refused(tmp_path):
    """What weights_only admits (plain containers) gets past reading to the layout check."""
    path = save(collections.OrderedDict(weight=torch.zeros(2)), tmp_path / "plain.pth")
    message = refusal(
        arcface.main,
        ["--ckpt", str(path), "--out", str(tmp_path / "out")],
        unwritten=tmp_path / "out",
    )
    assert "refusing to convert, the layout does not match" in message
    garbage = not_a_checkpoint(tmp_path / "garbage.pth")
    message = refusal(
        arcface.main,
        ["--ckpt", str(garbage), "--out", str(tmp_path / "out")],
        unwritten=tmp_path / "out",
    )
    assert_not_a_checkpoint_message(message, garbage)
    assert (
        message.endswith("(unpickling stopped: Unsupported operand 0)\n")
        and "weights_only" not in message
    )
