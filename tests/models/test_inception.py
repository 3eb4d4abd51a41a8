"""The FID Inception against the pytorch-fid package's own model through `python -m convert.inception`:
the 2048-d features with and without the resize to 299, the resize and pools on their own,
full-size shapes and the converter's refusals. The reference comes from
tests/torch_reference/metric_networks.py (how pytorch-fid builds its network here without
downloading, how its random weights are made).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from convert.inception import main
from dbaf_jax.models.inception import FIDInceptionV3
from dbaf_jax.nn.pool import avg_pool2d, max_pool2d
from dbaf_jax.nn.resize import resize_bilinear
from tests import conversion
from tests.parity import assert_parity, nchw, nhwc, relative_error
from tests.torch_reference.metric_networks import (
    pytorch_fid_model,
    random_fid_inception_state_dict,
    random_images,
)

FILE = "pt_inception-2015-12-05-6726825d.pth"


def to_unit_range(x: np.ndarray) -> torch.Tensor:
    """Images in [-1, 1] (ours) -> NCHW in [0, 1] (pytorch-fid's input)."""
    return nchw((x + 1.0) / 2.0)


features_jax = jax.jit(lambda variables, x: FIDInceptionV3().apply(variables, x))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """pytorch-fid's InceptionV3([3]) loaded from a random checkpoint in the published file's
    layout, the file, and the network converted from it."""
    tmp = tmp_path_factory.mktemp("inception")
    ckpt = conversion.save(random_fid_inception_state_dict(seed=0), tmp / FILE)
    net = pytorch_fid_model(torch.load(ckpt, weights_only=True))
    return (
        net,
        ckpt,
        conversion.convert(main, ["--ckpt", str(ckpt)], tmp / "models", "inception_fid"),
    )


@pytest.mark.parametrize(  # 256 and 340 are resized to 299 first
    "size",
    [299, pytest.param(256, marks=pytest.mark.slow), pytest.param(340, marks=pytest.mark.slow)],
)
def test_features_match_pytorch_fid(reference, size):
    net, _, converted = reference
    x = random_images(size, seed=size)
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
    assert_parity(
        max_pool2d(x, kernel, stride, padding),
        nhwc(F.max_pool2d(nchw(x), kernel, stride, padding)),
        tol=1e-6,
    )
    for count_include_pad in (True, False):
        expected = nhwc(
            F.avg_pool2d(nchw(x), kernel, stride, padding, count_include_pad=count_include_pad)
        )
        assert_parity(avg_pool2d(x, kernel, stride, padding, count_include_pad), expected, tol=1e-6)


def test_network_record(reference):
    _, ckpt, converted = reference
    assert converted.info["kind"] == "inception:FIDInceptionV3"
    assert converted.info["config"] == {}
    assert set(converted.variables) == {"params", "batch_stats"}


def test_full_size_layout(reference):
    _, ckpt, _ = reference
    state_dict = torch.load(ckpt, weights_only=True)
    converted_keys = [
        k for k in state_dict if not k.endswith("num_batches_tracked") and not k.startswith("fc.")
    ]
    variables = jax.eval_shape(
        FIDInceptionV3().init, jax.random.key(0), jnp.zeros((1, 299, 299, 3))
    )
    leaves = jax.tree.leaves(variables)
    assert len(leaves) == len(converted_keys)
    assert sum(x.size for x in leaves) == sum(state_dict[k].numel() for k in converted_keys)
    assert jax.eval_shape(FIDInceptionV3().apply, variables, jnp.zeros((3, 128, 128, 3))).shape == (
        3,
        2048,
    )


@pytest.mark.slow  # a converter process (torch and JAX imported); test_e4e's stays quick
def test_refuses_a_file_that_is_not_a_checkpoint(tmp_path):
    conversion.assert_command_refuses_a_non_checkpoint(
        "convert.inception", tmp_path / FILE, tmp_path / "models"
    )
