"""Models and faces for the evaluation tests (tests/evaluation/test_evaluate.py) and the
benchmark that compares the evaluation's networks with PyTorch (benchmarks/baselines/evaluate.py): the
package's random metric networks with MTCNN's real weights (`build_metrics_models`), the tiny tempered
DBAF model (`build_tiny_model`), and face crops of the real photos in tests/data
(`face_crops`, `write_faces`)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from convert.common import run
from convert.dbaf import main as convert_main
from dbaf_jax.evaluation.random_networks import write_random_metric_networks
from dbaf_jax.faces.detectors.base import Detector
from tests.cli_helpers import temper_
from tests.paths import DATA, REPO
from tests.torch_reference.dbaf_pipeline import (
    convert_args,
    reduced_reference,
    save_reference_files,
)

PHOTOS = ("jf.jpg", "office3.jpg", "office5.jpg")
FACE_SIZE = 256


def build_metrics_models(folder: Path) -> Path:
    """``folder``/networks: the package's random metric networks (`write_random_metric_networks`,
    what ``python -m dbaf_jax.commands.make_metric_networks`` writes; ArcFace at 1/4 width for speed)
    with MTCNN's real weights (converted from facenet-pytorch's bundled files); no
    facenet_casia_webface, which a report must then name as not measured."""
    # In a fresh interpreter, as tests/conftest.py's real_detector does: the converter reads the
    # facenet-pytorch wheel's files and must not depend on this process's imports.
    done = subprocess.run(
        [sys.executable, "-m", "convert.mtcnn", "--out", str(folder)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return write_random_metric_networks(
        folder / "networks", mtcnn=folder / "mtcnn", arcface_width_scale=1 / 4
    )


def face_crops(detector: Detector, count: int) -> list[np.ndarray]:
    """Square crops (1.6x the box, centred on it) of the faces in the test photos, 256 px uint8."""
    crops = []
    for name in PHOTOS:
        photo = Image.open(DATA / name).convert("RGB")
        for box in detector.detect(np.asarray(photo)).boxes[:2]:
            cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
            half = 0.8 * max(box[2] - box[0], box[3] - box[1])
            crop = photo.crop((int(cx - half), int(cy - half), int(cx + half), int(cy + half)))
            crops.append(np.asarray(crop.resize((FACE_SIZE, FACE_SIZE), Image.BILINEAR)))
    return crops[:count]


def build_tiny_model(tmp: Path) -> Path:
    """The reduced reference, tempered (tests/cli_helpers.py) as the command-line tests' models are, converted to ``tmp/model``."""
    ref = reduced_reference(seed=30)
    temper_(ref, np.random.default_rng(1))
    files = save_reference_files(tmp / "reference", ref, seed=30)
    run(convert_main, convert_args(files, tmp / "model"))
    return tmp / "model"


def write_faces(folder: Path, detector: Detector, count: int) -> Path:
    """``count`` face PNGs: the photos' crops in turn, every other round mirrored."""
    crops = face_crops(detector, len(PHOTOS) * 2)
    folder.mkdir(parents=True)
    for i in range(count):
        crop = crops[i % len(crops)]
        Image.fromarray(crop[:, ::-1] if (i // len(crops)) % 2 else crop).save(
            folder / f"face{i:04d}.png"
        )
    return folder
