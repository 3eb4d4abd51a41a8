"""ArcFace IR-SE50: DBAF's preprocessing, embedding and identity-loss maps against PyTorch
through `python -m convert.arcface`, full-size shapes, and the converter's refusals."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from convert.arcface import main
from dbaf_jax.models.arcface import ArcFace, preprocess
from tests import conversion
from tests.parity import assert_parity, nchw, nhwc, relative_error
from tests.torch_reference.arcface import Backbone, extract_feats
from tests.torch_reference.irse import randomize_irse_

WIDTH = 0.25


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A random reduced-width torch ArcFace, its checkpoint file, and the converted network."""
    torch.manual_seed(0)
    net = randomize_irse_(Backbone(50, width_scale=WIDTH), seed=3)
    tmp = tmp_path_factory.mktemp("arcface")
    ckpt = conversion.save(net.state_dict(), tmp / "model_ir_se50.pth")
    return (
        net,
        ckpt,
        conversion.convert(
            main, ["--ckpt", str(ckpt), "--width-scale", str(WIDTH)], tmp / "models", "arcface"
        ),
    )


# 320 is first pooled to 256, as the reference does: the quick suite runs that one.
@pytest.mark.parametrize("size", [pytest.param(256, marks=pytest.mark.slow), 320])
def test_embedding_and_maps_match_torch(reference, size):
    net, _, converted = reference
    images = np.tanh(np.random.default_rng(size).standard_normal((2, size, size, 3))).astype(
        np.float32
    )
    with torch.no_grad():
        expected = extract_feats(net, nchw(images))
    actual = jax.jit(lambda v, x: converted.module.apply(v, x, return_maps=True))(
        converted.variables, images
    )
    errors = []
    for k, (a, e) in enumerate(zip(actual.maps, expected[:-1])):
        assert_parity(a, nhwc(e), name=f"map h{k}")
        errors.append(relative_error(a, nhwc(e)))
    assert_parity(actual.embedding, expected[-1].numpy(), name="embedding")
    errors.append(relative_error(actual.embedding, expected[-1].numpy()))
    np.testing.assert_allclose(np.linalg.norm(actual.embedding, axis=-1), 1.0, rtol=1e-5)
    # The plain call (the reference Backbone.forward on the preprocessed input) gives the same embedding.
    with torch.no_grad():
        plain = net(nchw(preprocess(images)))
    assert_parity(
        converted.module.apply(converted.variables, images), plain.numpy(), name="forward"
    )
    print(f"max relative error ({size}): {max(errors):.2e}")


@pytest.mark.slow  # the gradient program of the full ArcFace at 256 px
def test_input_gradient_matches_torch(reference):
    # DBAF's identity losses backpropagate through the frozen ArcFace into generated images.
    net, _, converted = reference
    rng = np.random.default_rng(5)
    images = np.tanh(rng.standard_normal((2, 256, 256, 3)))
    target = rng.standard_normal((2, 512))

    def jax_gradient(variables, dtype):
        def loss(x):
            features = converted.module.apply(variables, x, return_maps=True)
            return (features.embedding * target.astype(dtype)).sum() + sum(
                jnp.abs(m).mean() for m in features.maps
            )

        return jax.jit(jax.grad(loss))(images.astype(dtype))

    x_t = torch.from_numpy(images.transpose(0, 3, 1, 2).copy()).requires_grad_(
        True
    )  # float64: the exact reference
    features = extract_feats(copy.deepcopy(net).double(), x_t)
    (
        (features[-1] * torch.from_numpy(target)).sum() + sum(m.abs().mean() for m in features[:-1])
    ).backward()
    expected = nhwc(x_t.grad)
    with jax.enable_x64(True):
        as_float64 = jax.tree.map(
            lambda a: jnp.asarray(a, jnp.float64) if jnp.issubdtype(a.dtype, jnp.floating) else a,
            converted.variables,
        )
        assert_parity(
            jax_gradient(as_float64, np.float64), expected, tol=1e-6, name="float64 input gradient"
        )
    grad = jax_gradient(converted.variables, np.float32)
    # 2e-2, not 1e-4: on some CPUs (an AMX Xeon, 2026-11-26) XLA's float32 gradient through
    # the deepest blocks of this random network departs from the float64 one by up to 1.6%
    # while PyTorch's float32 stays within 1.3e-6 and every forward map within 1e-6; the
    # float64 check above is the parity check of the conversion, this one bounds float32.
    assert_parity(grad, expected, tol=2e-2, name="float32 input gradient")
    print(f"float32 gradient relative error: {relative_error(grad, expected):.2e}")


def test_network_record(reference):
    _, ckpt, converted = reference
    assert converted.info["kind"] == "arcface:ArcFace"
    assert converted.info["config"]["width_scale"] == WIDTH
    assert set(converted.variables) == {"params", "batch_stats"}


def test_full_size_layout():
    sd = Backbone(50).state_dict()
    assert len(sd) == 397
    variables = jax.eval_shape(ArcFace().init, jax.random.key(0), jnp.zeros((1, 256, 256, 3)))
    leaves = jax.tree.leaves(variables)
    tracked = [k for k in sd if k.endswith("num_batches_tracked")]
    assert len(leaves) == len(sd) - len(tracked)
    assert sum(x.size for x in leaves) == sum(v.numel() for k, v in sd.items() if k not in tracked)
    out = jax.eval_shape(
        lambda v, x: ArcFace().apply(v, x, return_maps=True),
        variables,
        jnp.zeros((2, 1024, 1024, 3)),
    )
    assert out.embedding.shape == (2, 512)
    assert [m.shape for m in out.maps] == [
        (2, 112, 112, 64),
        (2, 56, 56, 64),
        (2, 28, 28, 128),
        (2, 14, 14, 256),
        (2, 7, 7, 512),
    ]


@pytest.mark.slow  # a converter process (torch and JAX imported); test_e4e's stays quick
def test_refuses_a_file_that_is_not_a_checkpoint(tmp_path):
    conversion.assert_command_refuses_a_non_checkpoint(
        "convert.arcface", tmp_path / "model_ir_se50.pth", tmp_path / "models"
    )
