"""What the command-line tests (tests/inference/, tests/video/, and the tiny model of
tests/evaluation_models.py) share: the right and a wrong password, `temper_`, which scales a
random reduced reference so its 8-bit outputs show the key, and `pixels`, an image file's
RGB values for exact comparisons."""

import numpy as np
import torch
from PIL import Image

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
