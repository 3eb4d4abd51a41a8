"""Face parsers: parity with PyTorch references through convert.parser, shapes, refusals."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from convert.parser import main
from dbaf_jax.models.parsers import BiSeNet, UNetParser, bisenet_inputs, resize_nearest
from tests.conversion import (
    assert_not_a_checkpoint_message,
    convert_parser,
    not_a_checkpoint,
    refusal,
    save,
)
from tests.parity import assert_parity, nchw, nhwc, random_reference
from tests.torch_reference import parsers as reference


def capture(module: torch.nn.Module, names: list[str]) -> dict:
    """Forward hooks recording the outputs of the named submodules."""
    outputs = {}
    for name in names:
        module.get_submodule(name).register_forward_hook(
            lambda m, i, o, name=name: outputs.__setitem__(name, o)
        )
    return outputs


def test_unet_parity(tmp_path, np_rng):
    ref = random_reference(reference.UNet(), seed=0)
    network = convert_parser("unet", ref, tmp_path)
    assert isinstance(network.module, UNetParser)
    images = np_rng.uniform(-1, 1, (2, 64, 64, 3)).astype(np.float32)
    ref_maps = capture(ref, ["conv1", "center", "up_concat4", "up_concat1"])
    with torch.no_grad():
        logits_ref = ref(nchw(images))

    apply = jax.jit(
        lambda v, x: network.module.apply(
            v, x, capture_intermediates=True, mutable=["intermediates"]
        )
    )
    logits, state = apply(network.variables, images)
    assert logits.shape == (2, 64, 64, 19)
    for name, ref_map in ref_maps.items():
        assert_parity(
            state["intermediates"][name]["__call__"][0], nhwc(ref_map), name=f"unet {name}"
        )
    assert_parity(logits, nhwc(logits_ref), name="unet logits")


def test_bisenet_parity(tmp_path, np_rng):
    """At 96x80 the 1/32 map is 3x3 and the 1/16 map 6x5: nearest 3 -> 5 is not a plain repeat."""
    ref = random_reference(reference.BiSeNet(), seed=1)
    network = convert_parser("bisenet", ref, tmp_path)
    assert isinstance(network.module, BiSeNet)
    images = np_rng.normal(0, 1, (2, 96, 80, 3)).astype(np.float32)
    ref_maps = capture(ref, ["cp", "ffm"])
    with torch.no_grad():
        outputs_ref = ref(nchw(images))

    apply = jax.jit(
        lambda v, x: network.module.apply(
            v, x, with_aux=True, capture_intermediates=True, mutable=["intermediates"]
        )
    )
    outputs, state = apply(network.variables, images)
    intermediates = state["intermediates"]
    for name, ours, theirs in zip(
        ("resnet 1/8", "context 1/8", "context 1/16"),
        intermediates["context_path"]["__call__"][0],
        ref_maps["cp"],
    ):
        assert_parity(ours, nhwc(theirs), name=f"bisenet {name}")
    assert_parity(intermediates["ffm"]["__call__"][0], nhwc(ref_maps["ffm"]), name="bisenet ffm")
    for name, ours, theirs in zip(("logits", "aux 1/8", "aux 1/16"), outputs, outputs_ref):
        assert ours.shape == (2, 96, 80, 19)
        assert_parity(ours, nhwc(theirs), name=f"bisenet {name}")
    main_only = jax.jit(network.module.apply)(network.variables, images)
    np.testing.assert_array_equal(main_only, outputs[0])


@pytest.mark.parametrize("in_size, out_size", [(3, 5), (5, 9), (2, 4), (7, 3)])
def test_resize_nearest_matches_torch(in_size, out_size, np_rng):
    x = np_rng.normal(size=(1, in_size, in_size + 1, 2)).astype(np.float32)
    expected = F.interpolate(nchw(x), (out_size, out_size + 2), mode="nearest")
    np.testing.assert_array_equal(resize_nearest(x, (out_size, out_size + 2)), nhwc(expected))


def test_bisenet_inputs_are_imagenet_normalised(np_rng):
    images = np_rng.uniform(-1, 1, (1, 4, 4, 3)).astype(np.float32)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    np.testing.assert_allclose(
        bisenet_inputs(images), ((images + 1) / 2 - mean) / std, rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize(
    "module, size, n_params",
    [
        (UNetParser(), 256, 1_944_355),
        (BiSeNet(), 512, 13_300_416),
    ],
)
def test_full_size_shapes(module, size, n_params):
    images = jax.ShapeDtypeStruct((2, size, size, 3), jnp.float32)
    kwargs = {"with_aux": True} if isinstance(module, BiSeNet) else {}
    variables = jax.eval_shape(lambda x: module.init(jax.random.key(0), x, **kwargs), images)
    assert jax.eval_shape(module.apply, variables, images).shape == (2, size, size, 19)
    # The checkpoints' parameter counts (BatchNorm statistics excluded).
    assert sum(math.prod(x.shape) for x in jax.tree.leaves(variables["params"])) == n_params


# Refusals ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def unet_state():
    return reference.UNet().state_dict()


def refuse(kind, ckpt, tmp_path) -> str:
    argv = ["--kind", kind, "--ckpt", str(ckpt), "--out", str(tmp_path / "models")]
    return refusal(main, argv, unwritten=tmp_path / "models")


def refuse_state(kind, state, tmp_path) -> str:
    return refuse(kind, save(state, tmp_path / "parser.pth"), tmp_path)


def test_refuses_unet_file_as_bisenet(unet_state, tmp_path):
    err = refuse_state("bisenet", unet_state, tmp_path)
    # 191 - 31 BatchNorm counters; 136 - 18 counters.
    assert "missing (160)" in err and "unexpected (118)" in err


def test_refuses_non_checkpoint(tmp_path):
    bogus = not_a_checkpoint(tmp_path / "parsenet.pth")
    assert_not_a_checkpoint_message(refuse("unet", bogus, tmp_path), bogus)
