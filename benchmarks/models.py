"""The models the benchmarks run when none is given: DBAF with random weights, written
from the ``reference`` stage-2 config (no checkpoint, no PyTorch), and MTCNN's real
weights for the photo benchmarks.

- ``full``: 256 px with the public checkpoints' widths, the model whose cost a user pays;
- ``tiny``: 64 px at 1/16 of the generator's widths and 1/4 of e4e's (the tests' reduced
  widths), which measures the host path at full cost and the model at a fraction of it.

The detector is the converted MTCNN given (``--detector DIR``, or the model's own
``mtcnn/``); without one it is converted from facenet-pytorch's bundled weights, which
needs PyTorch and facenet-pytorch (`requirements-dev`): on a runtime-only machine,
convert it elsewhere once (``python -m convert.mtcnn --out DIR``) and carry ``DIR/mtcnn``.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import jax

from benchmarks.train_step import stage_config
from dbaf_jax import model_directory
from dbaf_jax.faces.detectors import registry
from dbaf_jax.faces.detectors.base import Detector
from dbaf_jax.models import dbaf
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train import stages

# name -> (size, generator width scale, e4e width scale)
WIDTHS = {"full": (256, 1.0, 1.0), "tiny": (64, 0.0625, 0.25)}
SOURCE = "random weights (benchmark)"
REPO = Path(__file__).resolve().parents[1]


def random_model(folder: Path, size: int, width_scale: float, encoder_width_scale: float) -> Path:
    """A DBAF model directory with random weights for the ``reference`` stage-2 config at
    these size and widths, written to ``folder``."""
    config = stage_config(2, size, width_scale, encoder_width_scale, "float32")
    networks = stages.build_networks(config)
    modules = networks.model.networks()
    variables = networks_lib.init_variables(networks, jax.random.PRNGKey(0), size, tuple(modules))
    saved = {name: (module, variables[name]) for name, module in modules.items()}
    return model_directory.save_model(folder, dbaf.FAMILY, saved, dict.fromkeys(modules, SOURCE))


def named_model(width: str, folder: Path) -> Path:
    """`random_model` at one of `WIDTHS`."""
    return random_model(folder, *WIDTHS[width])


def converted_detector(folder: Path) -> Path:
    """``folder/mtcnn``: MTCNN's real weights converted from facenet-pytorch's bundled
    files, in a fresh interpreter (the converter imports PyTorch, which the benchmark
    itself never does). SystemExit with the way out when that cannot run here."""
    if (
        importlib.util.find_spec("torch") is None
        or importlib.util.find_spec("facenet_pytorch") is None
    ):
        raise SystemExit(
            "error: no detector given and PyTorch or facenet-pytorch is not installed to convert MTCNN's weights: "
            "run `python -m convert.mtcnn --out DIR` where they are (requirements-dev) and pass --detector DIR/mtcnn"
        )
    done = subprocess.run(
        [sys.executable, "-m", "convert.mtcnn", "--out", str(folder)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(
            f"error: converting MTCNN's weights failed: {done.stderr.strip().splitlines()[-1:]}"
        )
    return folder / model_directory.MTCNN_DIR


def add_detector_argument(parser: argparse.ArgumentParser) -> None:
    """``--detector``, required: the converted MTCNN `mtcnn_alone` runs."""
    parser.add_argument(
        "--detector", required=True, help="DIR/mtcnn as written by python -m convert.mtcnn"
    )


def mtcnn_alone(directory: str | Path) -> Detector:
    """The converted MTCNN in ``directory`` alone, without the low bands: what the
    benchmarks that time or count detection run."""
    return registry.build(directory, ["mtcnn"], low_band=False)[0]


def with_detector(model: Path, detector: Path | None, work: Path) -> Path:
    """``model`` holding ``mtcnn/``: ``detector`` copied in, or the model's own, or converted."""
    target = model / model_directory.MTCNN_DIR
    if detector is not None:
        shutil.copytree(detector, target, dirs_exist_ok=False)
    elif not target.is_dir():
        shutil.copytree(converted_detector(work / "detector"), target)
    return model


def benchmark_model(
    given: str | None, width: str, detector: str | None, work: Path
) -> tuple[Path, str]:
    """(model directory with ``mtcnn/``, how to describe it): ``given`` as it is (its
    ``mtcnn/``, or ``detector`` passed to the command instead), else a random ``width`` model."""
    if given:
        return Path(given), "given"
    model = with_detector(
        named_model(width, work / "model"), Path(detector) if detector else None, work
    )
    size, scale, encoder_scale = WIDTHS[width]
    return model, f"{width}: {size} px, widths {scale:g} / {encoder_scale:g}, random weights"
