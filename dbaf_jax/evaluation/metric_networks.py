"""The evaluation's metric networks, loaded from one folder and run jitted in fixed-size batches.

``--metrics-models DIR`` holds what the converters write (docs/evaluation.md, "Running it"):

- ``arcface`` (required): ArcFace IR-SE50, identity;
- ``facenet_vggface2``, ``facenet_casia_webface`` (optional; a missing one is left out
  of the report with a note): FaceNet, identity;
- ``inception_fid`` (required): the FID Inception;
- ``lpips_alex`` (required): LPIPS on AlexNet;
- ``mtcnn`` (required): the face detector of the utility metrics.

A folder written by ``python -m dbaf_jax.commands.make_metric_networks`` (random weights, for
trying the evaluation without checkpoints) holds `FOLDER_FILE`, which says so; the
report reads it (`folder_record`) and calls its figures a smoke test.

Beside them, dlib's ResNet descriptor (`dlib_recognition`, real weights from the
package's dependencies, not from this folder) is a recogniser held out from the
model's training; where dlib is missing it is listed as missing with the install command.

A missing required network is a `NetworkNotFoundError` whose message names the
converter command that writes it. Every network runs on batches padded to one size,
so each compiles once.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from dbaf_jax.core.errors import ModelDirectoryError, NetworkNotFoundError
from dbaf_jax.evaluation import dlib_recognition
from dbaf_jax.faces.detectors import registry
from dbaf_jax.faces.detectors.base import Detector
from dbaf_jax.inference.programs import pad_batch
from dbaf_jax.storage import model_directory

# network directory name -> the command that writes it ("{out}" is the metrics folder).
ARCFACE = model_directory.ARCFACE_DIR
FACENET_VGGFACE2 = model_directory.facenet_dir("vggface2")
FACENET_CASIA = model_directory.facenet_dir("casia_webface")
INCEPTION = model_directory.INCEPTION_FID_DIR
LPIPS = model_directory.lpips_dir("alex")
MTCNN = model_directory.MTCNN_DIR
CONVERTER_COMMANDS = {
    ARCFACE: "python -m convert.arcface --ckpt model_ir_se50.pth --out {out}",
    FACENET_VGGFACE2: "python -m convert.facenet --ckpt 20180402-114759-vggface2.pt --out {out}",
    FACENET_CASIA: "python -m convert.facenet --ckpt 20180408-102900-casia-webface.pt --out {out}",
    INCEPTION: "python -m convert.inception --ckpt pt_inception-2015-12-05-6726825d.pth --out {out}",
    LPIPS: "python -m convert.lpips --net alex --trunk alexnet-owt-7be5be79.pth --out {out}",
    MTCNN: "python -m convert.mtcnn --out {out}",
}
# Identity recognisers, in the order of the paper's Table I, then the held-out dlib; only ArcFace is required.
RECOGNISERS = (FACENET_CASIA, FACENET_VGGFACE2, ARCFACE, "dlib")
REQUIRED = (ARCFACE, INCEPTION, LPIPS, MTCNN)
# Which of `recognition.THRESHOLDS` applies to each recogniser.
THRESHOLD_NAMES = {
    FACENET_CASIA: "facenet",
    FACENET_VGGFACE2: "facenet",
    ARCFACE: "arcface",
    "dlib": "dlib",
}


# What report.md prints, in bold, for a network with random weights.
RANDOM_WEIGHTS = "random weights: a smoke test, not a measurement"
# The record of a folder of random networks (`folder_record`).
FOLDER_FILE = "metric_networks.json"


def folder_record(folder: Path) -> dict[str, Any] | None:
    """What `FOLDER_FILE` in ``folder`` says (``random_weights`` a bool), or None when the
    folder has none (converted networks). An unreadable record is a ModelDirectoryError
    naming the file: the report must not guess whether its figures are a smoke test."""
    path = Path(folder) / FOLDER_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelDirectoryError(f"{path}: unreadable ({err})") from None
    if not isinstance(record, dict) or not isinstance(record.get("random_weights"), bool):
        raise ModelDirectoryError(f"{path}: 'random_weights' must be true or false")
    return record


def network_provenance(path: Path) -> dict[str, Any]:
    """Where one saved network came from: its recorded ``source`` (the converted checkpoint's
    path, or "random ..." / none for an initialised one), its content sha256, and whether
    its weights are random. MTCNN's three stages are listed by stage."""
    single = path / model_directory.NETWORK_FILE
    files = [single] if single.is_file() else sorted(path.glob(f"*/{model_directory.NETWORK_FILE}"))
    records = []
    for file in files:
        info = json.loads(file.read_text())
        source = info.get("source")
        records.append(
            {
                "part": file.parent.relative_to(path).as_posix(),
                "source": source,
                "sha256": info.get(model_directory.HASH_FIELD),
                "random": source is None or str(source).startswith("random"),
            }
        )
    return {"parts": records, "random": any(r["random"] for r in records) or not records}


def missing_message(folder: Path, name: str) -> str:
    return f"{folder / name} missing: run {CONVERTER_COMMANDS[name].format(out=folder)}"


def check_present(folder: Path, name: str) -> None:
    """NetworkNotFoundError naming the converter command when ``folder/name`` is absent."""
    marker = (
        model_directory.NETWORK_FILE if name != MTCNN else f"onet/{model_directory.NETWORK_FILE}"
    )
    if not (folder / name / marker).is_file():
        raise NetworkNotFoundError(missing_message(folder, name))


@dataclasses.dataclass
class BatchedNetwork:
    """One network's jitted forward on batches padded to ``batch_size``.

    ``forward(variables, *inputs)`` takes (B, H, W, 3) arrays in [-1, 1] and returns (B, ...).
    """

    name: str
    forward: Callable
    variables: dict
    batch_size: int

    @classmethod
    def load(cls, path: Path, batch_size: int) -> BatchedNetwork:
        network = model_directory.load_network(path)
        return cls(
            path.name, jax.jit(network.module.apply), jax.device_put(network.variables), batch_size
        )

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        """Inputs (n, H, W, 3) each, n <= batch_size -> outputs (n, ...)."""
        n = len(inputs[0])
        padded = [pad_batch(np.asarray(x, np.float32), self.batch_size) for x in inputs]
        return np.asarray(self.forward(self.variables, *padded))[:n]


@dataclasses.dataclass
class MetricNetworks:
    """The loaded networks: identity recognisers by name, FID features, LPIPS, MTCNN, and
    the folder's `folder_record` (None for converted networks)."""

    recognisers: dict[str, Callable[[np.ndarray], np.ndarray]]
    missing_recognisers: list[str]
    inception: BatchedNetwork
    lpips: BatchedNetwork
    detector: Detector
    provenance: dict[str, dict[str, Any]]
    record: dict[str, Any] | None

    @classmethod
    def load(cls, folder: str | Path, batch_size: int) -> MetricNetworks:
        """Loads every network of ``folder``; refuses a missing required one before loading any."""
        folder = Path(folder)
        record = folder_record(folder)
        for name in REQUIRED:
            check_present(folder, name)
        recognisers = {
            name: BatchedNetwork.load(folder / name, batch_size)
            for name in RECOGNISERS
            if (folder / name).is_dir()
        }
        dlib_missing = dlib_recognition.unavailable()
        if dlib_missing is None:
            recognisers["dlib"] = dlib_recognition.DlibRecognizer()
        else:
            print(f"dlib recogniser not measured: {dlib_missing}", file=sys.stderr)
        present = [name for name in RECOGNISERS if name in recognisers]
        return cls(
            recognisers={name: recognisers[name] for name in present},
            missing_recognisers=[name for name in RECOGNISERS if name not in present],
            inception=BatchedNetwork.load(folder / INCEPTION, batch_size),
            lpips=BatchedNetwork.load(folder / LPIPS, batch_size),
            detector=registry.build(folder, ["mtcnn"], low_band=False)[0],
            provenance={
                **{
                    name: network_provenance(folder / name)
                    for name in (*REQUIRED, *RECOGNISERS)
                    if (folder / name).is_dir()
                },
                **({"dlib": dlib_recognition.provenance()} if "dlib" in recognisers else {}),
            },
            record=record,
        )
