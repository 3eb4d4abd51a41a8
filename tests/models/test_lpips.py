"""LPIPS: parity with the real `lpips` package through convert.lpips, and the converter's refusals."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from convert.lpips import default_lin_path, main
from dbaf_jax.models.lpips import LPIPS, normalize_channels
from tests.conversion import (
    assert_not_a_checkpoint_message,
    convert,
    not_a_checkpoint,
    refusal,
    save,
)
from tests.parity import assert_parity, nchw, nhwc
from tests.torch_reference.metric_networks import reference_lpips, torchvision_trunk_state_dict

SIZE = 64


def convert_reference(net: str, seed: int, tmp_path):
    ref = reference_lpips(net, seed)
    trunk_file = save(torchvision_trunk_state_dict(ref), tmp_path / f"{net}_trunk.pth")
    return ref, convert(
        main, ["--net", net, "--trunk", str(trunk_file)], tmp_path / "models", f"lpips_{net}"
    )


def image_pairs(batch: int, seed: int):
    rng = np.random.default_rng(seed)
    images0 = rng.uniform(-1, 1, (batch, SIZE, SIZE, 3)).astype(np.float32)
    images1 = np.clip(images0 + rng.normal(0, 0.3, images0.shape), -1, 1).astype(np.float32)
    return images0, images1


@pytest.mark.parametrize("net, seed", [("alex", 0), pytest.param("vgg", 1, marks=pytest.mark.slow)])
def test_parity_with_lpips_package(net, seed, tmp_path):
    ref, network = convert_reference(net, seed, tmp_path)
    assert isinstance(network.module, LPIPS) and network.module.net == net
    images0, images1 = image_pairs(3, seed)
    with torch.no_grad():
        total_ref, layers_ref = ref(nchw(images0), nchw(images1), retPerLayer=True)
        taps_ref = ref.net(ref.scaling_layer(nchw(images0)))

    module, variables = network.module, network.variables
    shift, scale = np.array([-0.030, -0.088, -0.188]), np.array([0.458, 0.448, 0.450])
    taps = module.apply(variables, (images0 - shift) / scale, method=lambda m, z: m.trunk(z))
    for k, (tap, tap_ref) in enumerate(zip(taps, taps_ref), start=1):
        assert_parity(tap, nhwc(tap_ref), name=f"{net} tap {k}")
    layers = module.apply(variables, images0, images1, method="layer_distances")
    for k, (layer, layer_ref) in enumerate(zip(layers, layers_ref), start=1):
        assert_parity(layer, layer_ref.reshape(-1).numpy(), name=f"{net} layer {k} term")
    apply = jax.jit(module.apply)
    total = apply(variables, images0, images1)
    assert total.shape == (3,)
    assert_parity(total, total_ref.reshape(-1).numpy(), name=f"{net} distance")
    np.testing.assert_allclose(apply(variables, images0, images0), np.zeros(3), atol=1e-9)


def test_gradient_parity_alex(tmp_path):
    """The loss trains the generator through LPIPS: gradients w.r.t. the image must match too."""
    ref, network = convert_reference("alex", 2, tmp_path)
    images0, images1 = image_pairs(2, 2)
    x0 = nchw(images0).requires_grad_(True)
    ref(x0, nchw(images1)).mean().backward()
    grad = jax.jit(jax.grad(lambda x: network.module.apply(network.variables, x, images1).mean()))(
        images0
    )
    assert_parity(grad, nhwc(x0.grad), name="d lpips / d image")


def test_channel_normalization_gradient_is_finite_at_zero():
    features = jnp.zeros((1, 2, 2, 4)).at[0, 0, 0].set(jnp.array([1.0, -2.0, 0.5, 0.0]))
    grad = jax.grad(lambda f: normalize_channels(f).sum())(features)
    assert np.isfinite(np.asarray(grad)).all()
    np.testing.assert_allclose(
        normalize_channels(features)[0, 0, 0], features[0, 0, 0] / (math.sqrt(5.25) + 1e-10)
    )


@pytest.mark.parametrize("net, size", [("alex", 256), ("vgg", 256)])
def test_full_size_shapes(net, size):
    module = LPIPS(net)
    images = jax.ShapeDtypeStruct((4, size, size, 3), jnp.float32)
    variables = jax.eval_shape(module.init, jax.random.key(0), images, images)
    assert jax.eval_shape(module.apply, variables, images, images).shape == (4,)
    params = variables["params"]
    n_params = sum(math.prod(x.shape) for x in jax.tree.leaves(params))
    # torchvision's feature extractors (2.47M / 14.71M) plus the linear weights (1152 / 1472).
    assert n_params == {"alex": 2_469_696 + 1152, "vgg": 14_714_688 + 1472}[net]


def test_default_lin_file_is_the_packages():
    path = default_lin_path("alex")
    assert path is not None and path.parent.name == "v0.1" and path.parent.parent.name == "weights"


# Refusals ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def alex_trunk_state():
    return torchvision_trunk_state_dict(reference_lpips("alex", 3))


def refuse(trunk_file, tmp_path, *flags) -> str:
    argv = ["--net", "alex", "--trunk", str(trunk_file), *flags, "--out", str(tmp_path / "models")]
    return refusal(main, argv, unwritten=tmp_path / "models")


def refuse_trunk(trunk_state, tmp_path) -> str:
    return refuse(save(trunk_state, tmp_path / "trunk.pth"), tmp_path)


def test_refuses_wrong_lin_file(alex_trunk_state, tmp_path):
    """The VGG linear weights given for AlexNet: every layer but the first is mis-shaped."""
    trunk_file = save(alex_trunk_state, tmp_path / "trunk.pth")
    err = refuse(trunk_file, tmp_path, "--lin", str(default_lin_path("vgg")))
    assert "vgg.pth" in err and "mis-shaped (4): lin1.model.1.weight" in err


def test_refuses_non_checkpoint(tmp_path):
    bogus = not_a_checkpoint(tmp_path / "notes.pth")
    assert_not_a_checkpoint_message(refuse(bogus, tmp_path), bogus)
