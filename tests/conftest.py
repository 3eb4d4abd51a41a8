"""Test setup: CPU JAX with 8 host devices for the sharding tests, torch on the CPU; and the
fixtures test modules of several folders share (the real MTCNN, dlib's recogniser and its
face crops)."""

import os
import sys
import types

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests compile afresh unless they set a cache themselves (test_train shares one
# between its workers): a cache in the user's home would make runs depend on each other.
os.environ.setdefault("DBAF_JAX_CACHE_DIR", "off")
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
# XLA:CPU's default fusions for the suite and the commands it starts (a command would
# otherwise turn them off in its own process only: compilation_cache.KEEP_CPU_FUSIONS_VARIABLE).
os.environ.setdefault("DBAF_JAX_KEEP_CPU_FUSIONS", "1")
# The only torchvision wheel for torch 2.13 is a CUDA build: its pure-Python model
# definitions (needed by lpips) import once this module of compiled ops is stubbed.
sys.modules.setdefault(
    "torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations")
)

import gc  # noqa: E402
import subprocess  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from dbaf_jax.evaluation.dlib_recognition import DlibRecognizer  # noqa: E402
from dbaf_jax.faces.detectors import registry  # noqa: E402
from tests.paths import DATA, REPO  # noqa: E402

torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))


@pytest.fixture(scope="module", autouse=True)
def release_compiled_programs():
    """Drops JAX's compiled programs after each test file: a worker runs dozens of
    files, and their executables (whole training steps among them) otherwise pile up
    past the 24 GiB of a CI machine shared by two workers."""
    yield
    jax.clear_caches()
    gc.collect()


@pytest.fixture
def np_rng():
    return np.random.default_rng(0)


# ---------------------------------------------------------------- shared by several test modules


@pytest.fixture(scope="module")
def real_detector(tmp_path_factory):
    """The weights bundled with facenet-pytorch, converted by the command in a fresh
    interpreter that must never import facenet_pytorch (its import is fragile)."""
    out = tmp_path_factory.mktemp("mtcnn_real")
    script = (
        "import runpy, sys; sys.argv = ['convert.mtcnn', '--out', sys.argv[1]]; "
        "runpy.run_module('convert.mtcnn', run_name='__main__'); "
        "assert 'facenet_pytorch' not in sys.modules, 'the converter imported facenet_pytorch'"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(out)], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return registry.build(out, ["mtcnn"], low_band=False)[0]


DLIB_FACE_SIZE = 224


@pytest.fixture(scope="module")
def recognizer():
    return DlibRecognizer()


@pytest.fixture(scope="module")
def dlib_faces():
    """Square crops (2x the box) of four different people: office3.jpg's two faces dlib finds
    (upsampled 3 times), jf.jpg's and face0.jpg's, (4, 224, 224, 3) uint8."""
    import dlib

    detector = dlib.get_frontal_face_detector()
    crops = []
    for name, upsample, count in (("office3.jpg", 3, 2), ("jf.jpg", 1, 1), ("face0.jpg", 1, 1)):
        photo = Image.open(DATA / name).convert("RGB")
        boxes = sorted(detector(np.asarray(photo), upsample), key=lambda r: r.left())
        assert len(boxes) >= count, name
        for r in boxes[:count]:
            half = r.width()
            cx, cy = (r.left() + r.right()) // 2, (r.top() + r.bottom()) // 2
            crop = photo.crop((cx - half, cy - half, cx + half, cy + half))
            crops.append(np.asarray(crop.resize((DLIB_FACE_SIZE, DLIB_FACE_SIZE), Image.BILINEAR)))
    return np.stack(crops)
