"""Metric networks with random weights: what `evaluate` needs, without a checkpoint.

`write_random_metric_networks(folder)` writes the folder that ``--metrics-models`` reads
(`metric_networks`): ArcFace, LPIPS (AlexNet), FaceNet (VGGFace2 head) and the FID
Inception with random weights, and MTCNN copied from a converted detector when one is
given, else random too. The folder's `metric_networks.FOLDER_FILE` records that its weights are random,
and the report says in bold that its figures are then a smoke test: they show that the
evaluation runs end to end, never that a model protects anyone.

Weights are Flax's initialisers (variance 1/fan_in). Every BatchNorm's running
statistics are those of its input on random images (`calibrated`), so each layer's
output stays at order one and an embedding depends on its image, as a trained network's
does; with Flax's initial statistics (mean 0, variance 1) the deep networks' outputs
grow or vanish with depth.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp

from dbaf_jax.core.errors import ModelDirectoryError, OutputExistsError
from dbaf_jax.evaluation import metric_networks as names
from dbaf_jax.models.arcface import ArcFace
from dbaf_jax.models.facenet import InceptionResnetV1
from dbaf_jax.models.inception import FIDInceptionV3
from dbaf_jax.models.lpips import LPIPS
from dbaf_jax.models.mtcnn import ONet, PNet, RNet
from dbaf_jax.storage import model_directory

SOURCE = "random (python -m dbaf_jax.commands.make_metric_networks)"
# MTCNN's stages and the input side each is initialised at (its own crop sizes).
MTCNN_STAGES = {"pnet": (PNet(), 12), "rnet": (RNet(), 24), "onet": (ONet(), 48)}


def random_images(size: int, batch: int, seed: int) -> jax.Array:
    """(batch, size, size, 3) noise in [-1, 1], the calibration input."""
    return jnp.tanh(jax.random.normal(jax.random.key(seed), (batch, size, size, 3)))


def calibrated(module: nn.Module, variables: dict, *inputs: jax.Array) -> dict:
    """``variables`` with every `flax.linen.BatchNorm`'s running mean and variance set to
    the statistics of that layer's input on ``inputs``, in one forward pass: each layer
    normalises with its new statistics before the next measures, so the statistics are
    those the network sees when it runs."""

    def measure(next_fun, args, kwargs, context):
        layer = context.module
        if isinstance(layer, nn.BatchNorm) and context.method_name == "__call__":
            x = args[0]
            axes = tuple(range(x.ndim - 1))
            layer.put_variable("batch_stats", "mean", x.mean(axes))
            layer.put_variable("batch_stats", "var", x.var(axes))
        return next_fun(*args, **kwargs)

    def forward(variables):
        with nn.intercept_methods(measure):
            _, updated = module.apply(variables, *inputs, mutable=["batch_stats"])
        return {**variables, **updated}

    return jax.jit(forward)(variables)


def initialised(module: nn.Module, seed: int, *inputs: jax.Array) -> dict:
    """Random variables of ``module`` for ``inputs``, BatchNorm statistics calibrated on them.

    The initialisation runs op by op, not jitted: XLA:CPU inlines every threefry draw of a
    jitted init as dozens of integer ops, and FaceNet's compiled for 58 s where the same
    init op by op takes 18 s (the three large networks' jitted inits were 169 s of the
    evaluation tests' 400 s fixture)."""
    variables = module.init(jax.random.key(seed), *inputs)
    return calibrated(module, variables, *inputs) if "batch_stats" in variables else variables


def check_detector(source: Path) -> None:
    """ModelDirectoryError unless ``source`` holds MTCNN's three converted stages."""
    for stage in MTCNN_STAGES:
        if not (source / stage / model_directory.NETWORK_FILE).is_file():
            raise ModelDirectoryError(
                f"{source}: not a converted MTCNN detector (no {stage}/{model_directory.NETWORK_FILE})"
            )


def write_mtcnn(target: Path, source: Path | None, seed: int) -> None:
    """``target``: a copy of the converted detector ``source``, else random stages."""
    if source is not None:
        shutil.copytree(source, target)
        return
    for offset, (stage, (module, side)) in enumerate(MTCNN_STAGES.items()):
        variables = module.init(jax.random.key(seed + offset), jnp.zeros((1, side, side, 3)))
        model_directory.save_network(target / stage, module, variables, source=SOURCE)


def write_random_metric_networks(
    folder: str | Path,
    mtcnn: str | Path | None = None,
    seed: int = 0,
    arcface_width_scale: float = 1.0,
) -> Path:
    """Writes random metric networks into ``folder`` (which must not exist) and returns it.

    ``mtcnn``: a converted MTCNN detector directory (``python -m convert.mtcnn`` writes
    one) to copy; without it the detector is random as well, and finds arbitrary boxes
    or none. ``arcface_width_scale`` < 1 narrows ArcFace (the tests' speed)."""
    folder = Path(folder).absolute()
    if folder.exists():
        raise OutputExistsError(f"{folder} exists; give a new folder")
    detector = Path(mtcnn).absolute() if mtcnn is not None else None
    if detector is not None:
        check_detector(detector)
    partial = folder.with_name(folder.name + model_directory.PARTIAL_SUFFIX)
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    faces = random_images(112, 4, seed)
    networks = {
        names.ARCFACE: (ArcFace(width_scale=arcface_width_scale), (random_images(256, 4, seed),)),
        names.LPIPS: (LPIPS("alex"), (faces, -faces)),
        names.FACENET_VGGFACE2: (InceptionResnetV1(), (random_images(160, 4, seed),)),
        names.INCEPTION: (FIDInceptionV3(), (random_images(299, 4, seed),)),
    }
    for offset, (name, (module, inputs)) in enumerate(networks.items()):
        model_directory.save_network(
            partial / name, module, initialised(module, seed + 10 * offset, *inputs), source=SOURCE
        )
    write_mtcnn(partial / names.MTCNN, detector, seed + 100)
    record = {
        "random_weights": True,
        "written_by": SOURCE,
        "seed": seed,
        "arcface_width_scale": arcface_width_scale,
        "mtcnn": str(detector) if detector is not None else "random",
    }
    (partial / names.FOLDER_FILE).write_text(json.dumps(record, indent=2) + "\n")
    partial.rename(folder)
    return folder
