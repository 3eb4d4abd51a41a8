"""What the command-line tests (tests/inference/, tests/video/, and the tiny model of
tests/evaluation_models.py) share: the right and a wrong password, `temper_`, which scales a
random reduced reference so its 8-bit outputs show the key, `photo_model`, the photo and
clip tests' model directory, and `pixels`, an image file's RGB values for exact comparisons."""

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from convert.centerface import main as convert_centerface
from convert.common import run
from convert.dbaf import main as convert_main
from convert.mtcnn import main as convert_mtcnn
from tests.torch_reference.dbaf_pipeline import (
    convert_args,
    reduced_reference,
    save_reference_files,
)

PASSWORD = "Grüne Wiese 42!"  # non-ASCII: NFC-normalised UTF-8 goes into the KDF
WRONG_PASSWORD = "Grüne Wiese 43!"


def temper_(ref, rng):
    """Random weights give images whose values run into the thousands, dominated by MAAR's
    maps, and identity codes far larger than keys; 8-bit outputs would clip them and the
    key would hardly show. So: the decoder's noise weights are made small (the latents
    then matter), KRIA's first layers weigh the key as much as the identity code, and
    the ToRGB layers are scaled to give values mostly in [-1, 1] (the image is linear in
    the ToRGB weights and biases together)."""
    face = torch.from_numpy(rng.uniform(-1, 1, (1, 3, 256, 256)).astype(np.float32))
    z = torch.from_numpy(rng.standard_normal((3, ref.latent_avg.shape[1])).astype(np.float32))
    with torch.no_grad():
        key = ref.key(z)
        _, _, identity, _ = ref.encode(face)
        dim = identity.shape[-1]
        for mlp in ref.kria.mapper:
            mlp.model[0].weight[:, dim:] *= float(identity.std() / key.std())
        for name, p in ref.decoder.named_parameters():
            if name.endswith("noise.weight"):
                p.mul_(0.01)
        factor = 0.5 / float(ref.anonymize(face, key)[0].std())
        for name, p in ref.decoder.named_parameters():
            if name.startswith(("to_rgb1.", "to_rgbs.")) and "modulation" not in name:
                p.mul_(factor)


def pixels(path):
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"), np.int16)


def photo_model(tmp: Path) -> Path:
    """``tmp/model``: a DBAF model converted from random reduced reference weights (seed
    30, `temper_`ed) with the real detectors' weights in ``model/mtcnn`` and
    ``model/centerface``; and
    ``tmp/password.txt`` holding `PASSWORD`. Returns the model directory."""
    ref = reduced_reference(seed=30)
    temper_(ref, np.random.default_rng(4))
    files = save_reference_files(tmp / "reference", ref, seed=30)
    run(convert_main, convert_args(files, tmp / "model"))
    run(convert_mtcnn, ["--out", str(tmp / "model")])
    run(convert_centerface, ["--out", str(tmp / "model")])
    (tmp / "password.txt").write_text(PASSWORD + "\n", encoding="utf-8")
    return tmp / "model"


def command_line(ws: Path, source, target, *extra, password: str = "password.txt") -> list[str]:
    """The arguments of a run command on ``source`` into ``target`` with the model of
    ``ws`` (`photo_model`), the password file ``ws/password`` and ``extra`` arguments."""
    model = ("--model", str(ws / "model"), "--password-file", str(ws / password))
    return [*model, str(source), str(target), *map(str, extra)]


def run_command(command, ws: Path, source, target, password: str = "password.txt", *extra):
    """``command.main`` on `command_line`; what it returns (the run's report)."""
    return command.main(command_line(ws, source, target, *extra, password=password))
