"""Every converter names the keys it cannot map: a state dict of the network's layout with
one key dropped, one added and some mis-shaped is refused with each key named (a
mis-shaped one with its shape), and nothing is written. One table, a row per converter."""

import pytest
import torch

from convert import arcface, facenet, inception, lpips, parser
from tests import conversion
from tests.torch_reference import parsers as reference_parsers
from tests.torch_reference.arcface import Backbone
from tests.torch_reference.irse import randomize_irse_
from tests.torch_reference.metric_networks import (
    FACENET_IDENTITIES,
    random_facenet,
    random_fid_inception_state_dict,
    reference_lpips,
    torchvision_trunk_state_dict,
)

# converter: (its main, the state dict, argv before the file, the file's option, the key
# dropped, the key added, the mis-shaped keys as name -> shape)
CASES = {
    "arcface": (
        arcface.main,
        lambda: randomize_irse_(Backbone(50, width_scale=0.25), seed=3).state_dict(),
        ["--width-scale", "0.25"],
        "--ckpt",
        "body.5.res_layer.5.fc2.weight",
        {"head.kernel": (3,)},
        {"output_layer.3.weight": (512, 100), "body.7.shortcut_layer.0.weight": (64, 32, 3, 3)},
    ),
    "facenet": (
        facenet.main,
        lambda: random_facenet(FACENET_IDENTITIES["vggface2"], seed=0).state_dict(),
        [],
        "--ckpt",
        "repeat_2.4.branch1.2.bn.running_var",
        {"repeat_3.5.conv2d.weight": (3,)},
        {"last_linear.weight": (512, 1024), "mixed_7a.branch0.1.conv.weight": (384, 256, 1, 1)},
    ),
    "inception": (
        inception.main,
        lambda: random_fid_inception_state_dict(seed=0),
        [],
        "--ckpt",
        "Mixed_6c.branch7x7dbl_4.bn.running_mean",
        # torchvision's auxiliary classifier is not part of the FID network.
        {"AuxLogits.fc.weight": (1008, 768)},
        # pool_features of Mixed_5c; 2b's kernel
        {
            "Mixed_5b.branch_pool.conv.weight": (64, 192, 1, 1),
            "Mixed_7c.branch3x3_2a.conv.weight": (384, 384, 3, 1),
        },
    ),
    "lpips": (
        lpips.main,
        lambda: torchvision_trunk_state_dict(reference_lpips("alex", 3)),
        ["--net", "alex"],
        "--trunk",
        "features.3.weight",
        {"features.13.weight": (3,)},
        {"features.6.weight": (384, 192, 5, 5)},
    ),
    "parser": (
        parser.main,
        lambda: reference_parsers.UNet().state_dict(),
        ["--kind", "unet"],
        "--ckpt",
        "up_concat2.conv.conv1.1.running_var",
        {"final2.weight": (1,)},
        # A ConvTranspose weight stored (Cout, Cin) instead of (Cin, Cout).
        {"up_concat4.up.weight": (128, 256, 2, 2)},
    ),
}


# FaceNet's and Inception's reference networks are the costliest to build and convert.
@pytest.mark.parametrize(
    "converter",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in ("facenet", "inception") else name
        for name in sorted(CASES)
    ],
)
def test_a_converter_names_the_keys_it_cannot_map(converter, tmp_path):
    main, state_dict, flags, option, missing, unexpected, misshaped = CASES[converter]
    state = state_dict()

    def refuse(**edits) -> str:
        bad = conversion.save(conversion.edited(state, **edits), tmp_path / "bad.pth")
        argv = [*flags, option, str(bad), "--out", str(tmp_path / "models")]
        return conversion.refusal(main, argv, unwritten=tmp_path / "models")

    conversion.assert_refuses_wrong_keys(refuse, missing, zeros(unexpected), zeros(misshaped))


def zeros(shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    return {name: torch.zeros(shape) for name, shape in shapes.items()}
