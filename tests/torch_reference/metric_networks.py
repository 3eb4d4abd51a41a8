"""The evaluation's metric networks from their own packages, with random weights: FaceNet
(facenet-pytorch's InceptionResnetV1), the FID Inception (pytorch-fid's InceptionV3) and
LPIPS (the lpips package's, with its shipped linear weights and a random trunk; the
training step's parity test uses it as a loss too).

The three packages import torchvision, whose wheel here is a CUDA build without its compiled
ops; its pure-Python parts import once `torchvision._meta_registrations` is stubbed (as
tests/conftest.py does; repeated here for the benchmarks, which do not run conftest).
Nothing here calls a compiled torchvision op (facenet-pytorch's MTCNN is imported by its
package but not used).

pytorch-fid builds its network only by loading `pt_inception-2015-12-05-6726825d.pth`
from its download URL: `fid_inception_v3` and `InceptionV3(use_fid_inception=True)` both
call `load_state_dict_from_url`. `pytorch_fid_model` replaces that one function, for the
duration of the construction, by one returning a given state_dict, so the package's own
code builds and loads the network and nothing is downloaded.
"""

import math
import sys
import types
from unittest import mock

sys.modules.setdefault(
    "torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations")
)

import lpips  # noqa: E402
import numpy as np  # noqa: E402
import pytorch_fid.inception as pytorch_fid  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from facenet_pytorch.models.inception_resnet_v1 import InceptionResnetV1  # noqa: E402

from tests.parity import nchw, randomize_  # noqa: E402
from tests.torch_reference.batch_norm import calibrate_batch_norm_  # noqa: E402
from tests.torch_reference.irse import randomize_irse_  # noqa: E402

FACENET_IDENTITIES = {"vggface2": 8631, "casia_webface": 10575}  # the published classifiers' sizes


def random_images(size: int, batch: int = 2, seed: int = 0) -> np.ndarray:
    """(batch, size, size, 3) random images in [-1, 1]."""
    return np.tanh(np.random.default_rng(seed).standard_normal((batch, size, size, 3))).astype(
        np.float32
    )


def facenet_input(images: np.ndarray) -> torch.Tensor:
    """What facenet-pytorch is fed for faces given in [-1, 1]: their 0..255 pixels, area-resized
    to 160 (its tensor crop path), standardised as (p - 127.5) / 128. NCHW."""
    pixels = nchw((images + 1.0) * 127.5)
    if pixels.shape[-2:] != (160, 160):
        pixels = F.interpolate(pixels, size=(160, 160), mode="area")
    return (pixels - 127.5) / 128.0


def random_facenet(identities: int, seed: int = 0) -> InceptionResnetV1:
    """facenet-pytorch's network with a classifier of ``identities`` rows, random weights (conv
    and linear weights scaled by 1/sqrt(fan_in)) and BatchNorm statistics measured on random
    faces, so that the embedding depends on the image at order one. Its forward returns the
    normalised embedding (classify off), in eval mode."""
    net = randomize_irse_(InceptionResnetV1(classify=True, num_classes=identities), seed)
    net.classify = False
    return calibrate_batch_norm_(net, facenet_input(random_images(160, batch=4, seed=100 + seed)))


def pytorch_fid_model(state_dict: dict, constructor=None) -> torch.nn.Module:
    """``constructor()`` (default: pytorch-fid's `InceptionV3([3])`, the FID pool features with
    its resize and normalisation) with the weight download answered by ``state_dict``."""

    def load_state_dict_from_url(url, progress=True):
        if url != pytorch_fid.FID_WEIGHTS_URL:
            raise AssertionError(f"pytorch-fid asked for {url}")
        return state_dict

    if constructor is None:
        constructor = lambda: pytorch_fid.InceptionV3([3], resize_input=True, normalize_input=True)  # noqa: E731
    with mock.patch.object(pytorch_fid, "load_state_dict_from_url", load_state_dict_from_url):
        return constructor().eval()


def random_fid_inception_state_dict(seed: int = 0) -> dict:
    """A state_dict in the layout of `pt_inception-2015-12-05-6726825d.pth` (fc included) with
    random weights and BatchNorm statistics measured on random images."""
    # torchvision's Inception v3 as pytorch-fid configures its base: the FID blocks subclass
    # torchvision's and change only their forward, so this has the file's layout.
    layout = pytorch_fid._inception_v3(
        num_classes=1008, aux_logits=False, weights=None
    ).state_dict()
    inception = randomize_irse_(pytorch_fid_model(layout, pytorch_fid.fid_inception_v3), seed)
    # The input pytorch-fid feeds Conv2d_1a_3x3: [-1, 1] at 299.
    calibrate_batch_norm_(inception, nchw(random_images(299, batch=4, seed=100 + seed)))
    return inception.state_dict()


def reference_lpips(net: str, seed: int) -> lpips.LPIPS:
    """The package's LPIPS with its shipped v0.1 linear weights and a random trunk.

    Trunk weights are drawn N(0, 2 / fan_in) and biases N(0, 1) (torchvision's VGG biases
    start at zero, which would hide a converter that drops them).
    """
    ref = lpips.LPIPS(net=net, pnet_rand=True, verbose=False)
    randomize_(ref.net, seed)
    with torch.no_grad():
        for param in ref.net.parameters():
            if param.dim() == 4:
                param.mul_(math.sqrt(2.0 / param[0].numel()))
    return ref.eval()


def torchvision_trunk_state_dict(ref: lpips.LPIPS) -> dict:
    """The trunk in torchvision's layout: lpips's `net.slice{n}.{j}.*` is `features.{j}.*`."""
    state = {
        f"features.{name.split('.', 1)[1]}": t.clone() for name, t in ref.net.state_dict().items()
    }
    state["classifier.6.bias"] = torch.zeros(
        1000
    )  # torchvision files carry the head; it is skipped
    return state
