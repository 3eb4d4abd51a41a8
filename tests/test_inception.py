"""The FID Inception against the pytorch-fid package's own model through `python -m convert.inception`:
the 2048-d features with and without the resize to 299, the resize and pools on their own,
full-size shapes and the converter's refusals.

pytorch-fid builds its network only by loading `pt_inception-2015-12-05-6726825d.pth` from
its download URL (`fid_inception_v3` and `InceptionV3(use_fid_inception=True)` both call
`load_state_dict_from_url`). The tests replace that one function, for the duration of
the construction, by one that returns a state_dict they made, so the package's own code
builds and loads the network and nothing is downloaded.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import pytorch_fid.inception as pytorch_fid
import torch
import torch.nn.functional as F

from convert.inception import main
from dbaf_jax.models.inception import FIDInceptionV3
from dbaf_jax.nn.pool import avg_pool2d, max_pool2d
from dbaf_jax.nn.resize import resize_bilinear
from tests.conversion import (
    assert_not_a_checkpoint_message, command_refusal, convert, edited, not_a_checkpoint, refusal, save
)
from tests.parity import assert_parity, nchw, nhwc, relative_error
from tests.torch_reference.batch_norm import calibrate_batch_norm_
from tests.torch_reference.irse import randomize_irse_

FILE = "pt_inception-2015-12-05-6726825d.pth"


def built_by_pytorch_fid(constructor, state_dict):
    """``constructor()`` with pytorch-fid's weight download answered by ``state_dict``."""

    def load_state_dict_from_url(url, progress=True):
        assert url == pytorch_fid.FID_WEIGHTS_URL, url
        return state_dict

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pytorch_fid, "load_state_dict_from_url", load_state_dict_from_url)
        return constructor()


def images(size: int, batch: int = 2, seed: int = 0) -> np.ndarray:
    """(batch, size, size, 3) random images in [-1, 1]."""
    return np.tanh(np.random.default_rng(seed).standard_normal((batch, size, size, 3))).astype(np.float32)


def to_unit_range(x: np.ndarray) -> torch.Tensor:
    """Images in [-1, 1] (ours) -> NCHW in [0, 1] (pytorch-fid's input)."""
    return nchw((x + 1.0) / 2.0)


features_jax = jax.jit(lambda variables, x: FIDInceptionV3().apply(variables, x))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """pytorch-fid's InceptionV3([3]) on a random checkpoint in the published file's layout,
    the file, and the network converted from it."""
    # torchvision's Inception v3 as pytorch-fid configures its base: the FID blocks subclass
    # torchvision's and change only their forward, so its state_dict has the file's layout.
    layout = pytorch_fid._inception_v3(num_classes=1008, aux_logits=False, weights=None).state_dict()
    inception = randomize_irse_(built_by_pytorch_fid(pytorch_fid.fid_inception_v3, layout), seed=0)
    # Statistics of the input the FID blocks see: what pytorch-fid feeds Conv2d_1a_3x3.
    calibrate_batch_norm_(inception, 2 * to_unit_range(images(299, batch=4, seed=100)) - 1)
    tmp = tmp_path_factory.mktemp("inception")
    ckpt = save(inception.state_dict(), tmp / FILE)
    loaded = torch.load(ckpt, weights_only=True)
    net = built_by_pytorch_fid(lambda: pytorch_fid.InceptionV3([3], resize_input=True, normalize_input=True), loaded)
    return net.eval(), ckpt, convert(main, ["--ckpt", str(ckpt)], tmp / "models", "inception_fid")


@pytest.mark.parametrize("size", [299, 256, 340])  # 256 and 340 are resized to 299 first
def test_features_match_pytorch_fid(reference, size):
    net, _, converted = reference
    x = images(size, seed=size)
    with torch.no_grad():
        (expected,) = net(to_unit_range(x))
    expected = expected[:, :, 0, 0].numpy()
    actual = features_jax(converted.variables, x)
    assert actual.shape == (2, 2048)
    assert_parity(actual, expected, name="pool features")
    # The two images' features differ at order one: the parity above checks the path from the image.
    assert relative_error(expected[0], expected[1]) > 0.1
    print(f"relative error ({size}): {relative_error(actual, expected):.2e}")


@pytest.mark.parametrize("in_hw", [(256, 256), (340, 200), (64, 512), (299, 299)])
def test_resize_matches_pytorch_fid_interpolate(in_hw):
    x = np.random.default_rng(in_hw[0]).standard_normal((2, *in_hw, 3)).astype(np.float32)
    expected = nhwc(F.interpolate(nchw(x), size=(299, 299), mode="bilinear", align_corners=False))
    actual = jax.jit(resize_bilinear, static_argnums=1)(x, (299, 299))
    assert actual.shape == expected.shape
    assert_parity(actual, expected, tol=1e-6)


def test_downsampling_differs_from_jax_image_resize():
    # The reason resize_bilinear exists: jax.image.resize widens its kernel when downsampling.
    x = np.random.default_rng(1).standard_normal((1, 340, 340, 1)).astype(np.float32)
    theirs = jax.image.resize(x, (1, 299, 299, 1), "bilinear")
    assert relative_error(resize_bilinear(x, (299, 299)), theirs) > 1e-2


@pytest.mark.parametrize("kernel, stride, padding", [(3, 2, 0), (3, 1, 1), (3, 2, 1)])
def test_pools_match_torch(np_rng, kernel, stride, padding):
    x = np_rng.standard_normal((2, 9, 8, 3)).astype(np.float32)
    assert_parity(max_pool2d(x, kernel, stride, padding), nhwc(F.max_pool2d(nchw(x), kernel, stride, padding)), tol=1e-6)
    for count_include_pad in (True, False):
        expected = nhwc(F.avg_pool2d(nchw(x), kernel, stride, padding, count_include_pad=count_include_pad))
        assert_parity(avg_pool2d(x, kernel, stride, padding, count_include_pad), expected, tol=1e-6)


def test_network_record(reference):
    _, ckpt, converted = reference
    assert converted.info["kind"] == "inception:FIDInceptionV3"
    assert converted.info["config"] == {}
    assert set(converted.variables) == {"params", "batch_stats"}


def test_full_size_layout(reference):
    _, ckpt, _ = reference
    state_dict = torch.load(ckpt, weights_only=True)
    converted_keys = [k for k in state_dict if not k.endswith("num_batches_tracked") and not k.startswith("fc.")]
    variables = jax.eval_shape(FIDInceptionV3().init, jax.random.key(0), jnp.zeros((1, 299, 299, 3)))
    leaves = jax.tree.leaves(variables)
    assert len(leaves) == len(converted_keys)
    assert sum(x.size for x in leaves) == sum(state_dict[k].numel() for k in converted_keys)
    assert jax.eval_shape(FIDInceptionV3().apply, variables, jnp.zeros((3, 128, 128, 3))).shape == (3, 2048)


def _refusal(reference, tmp_path, **edits):
    _, ckpt, _ = reference
    bad = save(edited(torch.load(ckpt, weights_only=True), **edits), tmp_path / "bad.pth")
    return refusal(main, ["--ckpt", str(bad), "--out", str(tmp_path / "models")], unwritten=tmp_path / "models")


def test_refuses_missing_key(reference, tmp_path):
    err = _refusal(reference, tmp_path, drop=["Mixed_6c.branch7x7dbl_4.bn.running_mean"])
    assert "missing (1): Mixed_6c.branch7x7dbl_4.bn.running_mean" in err


def test_refuses_unexpected_key(reference, tmp_path):
    # torchvision's auxiliary classifier is not part of the FID network.
    err = _refusal(reference, tmp_path, add={"AuxLogits.fc.weight": torch.zeros(1008, 768)})
    assert "unexpected (1): AuxLogits.fc.weight" in err


def test_refuses_misshaped_key(reference, tmp_path):
    misshaped = {
        "Mixed_5b.branch_pool.conv.weight": torch.zeros(64, 192, 1, 1),  # pool_features of Mixed_5c
        "Mixed_7c.branch3x3_2a.conv.weight": torch.zeros(384, 384, 3, 1),  # 2b's kernel
    }
    err = _refusal(reference, tmp_path, add=misshaped)
    assert "mis-shaped (2)" in err
    assert "Mixed_5b.branch_pool.conv.weight [64, 192, 1, 1]" in err
    assert "Mixed_7c.branch3x3_2a.conv.weight [384, 384, 3, 1]" in err


def test_refuses_a_file_that_is_not_a_checkpoint(tmp_path):
    bogus = not_a_checkpoint(tmp_path / FILE)
    argv = ["--ckpt", str(bogus), "--out", str(tmp_path / "models")]
    assert_not_a_checkpoint_message(command_refusal("convert.inception", argv, unwritten=tmp_path / "models"), bogus)
