"""Models and faces for the evaluation tests (tests/evaluation/test_evaluate.py) and the
benchmarks that run the evaluation on them (benchmarks/evaluate.py, benchmarks/wild.py): a
folder of metric networks with random weights (`build_metrics_models`), the tiny tempered
DBAF model (`build_tiny_model`), and face crops of the real photos in tests/data
(`face_crops`, `write_faces`)."""

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch
from PIL import Image

from convert.common import run
from convert.dbaf import main as convert_main
from convert.facenet import main as convert_facenet
from convert.inception import main as convert_inception
from dbaf_jax import model_directory
from dbaf_jax.faces.detect import FaceDetector
from dbaf_jax.models.arcface import ArcFace
from dbaf_jax.models.lpips import LPIPS
from tests.cli_helpers import temper_
from tests.paths import DATA, REPO
from tests.torch_reference.dbaf_pipeline import convert_args, reduced_reference, save_reference_files
from tests.torch_reference.metric_networks import FACENET_IDENTITIES, random_facenet, random_fid_inception_state_dict

PHOTOS = ("jf.jpg", "office3.jpg", "office5.jpg")
FACE_SIZE = 256


def random_network(path: Path, module, *inputs) -> None:
    # Jitted: op-by-op initialisation of the full-size Inception networks is far slower on CPU.
    variables = jax.jit(module.init)(jax.random.key(len(str(path))), *inputs)
    model_directory.save_network(path, module, variables, source="random (test)")


def build_metrics_models(folder: Path) -> Path:
    """``folder`` with arcface and lpips_alex (random Flax initialisation), facenet_vggface2
    and inception_fid (facenet-pytorch's and pytorch-fid's models with random calibrated
    weights, saved and converted by the converter commands) and mtcnn (real weights); no
    facenet_casia_webface, which a report must then name as not measured."""
    image = jnp.zeros((1, 64, 64, 3))
    random_network(folder / "arcface", ArcFace(width_scale=1 / 4), image)
    random_network(folder / "lpips_alex", LPIPS("alex"), image, image)
    torch.save(random_facenet(FACENET_IDENTITIES["vggface2"]).state_dict(), folder / "vggface2.pt")
    run(convert_facenet, ["--ckpt", str(folder / "vggface2.pt"), "--out", str(folder)])
    torch.save(random_fid_inception_state_dict(), folder / "inception.pth")
    run(convert_inception, ["--ckpt", str(folder / "inception.pth"), "--out", str(folder)])
    # In a fresh interpreter, as tests/conftest.py's real_detector does: the converter reads the
    # facenet-pytorch wheel's files and must not depend on this process's imports.
    done = subprocess.run([sys.executable, "-m", "convert.mtcnn", "--out", str(folder)], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return folder


def face_crops(detector: FaceDetector, count: int) -> list[np.ndarray]:
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


def write_faces(folder: Path, detector: FaceDetector, count: int) -> Path:
    """``count`` face PNGs: the photos' crops in turn, every other round mirrored."""
    crops = face_crops(detector, len(PHOTOS) * 2)
    folder.mkdir(parents=True)
    for i in range(count):
        crop = crops[i % len(crops)]
        Image.fromarray(crop[:, ::-1] if (i // len(crops)) % 2 else crop).save(folder / f"face{i:04d}.png")
    return folder
