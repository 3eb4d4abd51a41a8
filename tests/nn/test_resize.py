"""PyTorch-exact adaptive average pooling and align_corners bilinear resizing."""

import jax
import numpy as np
import pytest
import torch.nn.functional as F

from dbaf_jax.nn.resize import (
    adaptive_avg_pool2d,
    adaptive_pool_matrix,
    resize_bilinear_align_corners,
)
from tests.parity import assert_parity, nchw, nhwc


@pytest.mark.parametrize(
    "in_hw, out_hw",
    [
        ((188, 188), (112, 112)),  # ArcFace's crop: overlapping windows of 2 and 3 pixels
        ((1024, 1024), (256, 256)),  # divisible: plain 4x4 means
        ((64, 48), (256, 256)),  # upsampling repeats pixels
        ((13, 7), (5, 3)),
        ((7, 9), (7, 4)),  # one axis unchanged
    ],
)
def test_adaptive_avg_pool2d_matches_torch(np_rng, in_hw, out_hw):
    x = np_rng.standard_normal((2, *in_hw, 3)).astype(np.float32)
    expected = nhwc(F.adaptive_avg_pool2d(nchw(x), out_hw))
    actual = jax.jit(adaptive_avg_pool2d, static_argnums=1)(x, out_hw)
    assert actual.shape == expected.shape
    assert_parity(actual, expected, tol=1e-6)


def test_188_to_112_is_not_a_uniform_resize():
    matrix = adaptive_pool_matrix(188, 112)
    widths = (matrix > 0).sum(axis=1)
    assert set(widths.tolist()) == {2, 3}
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=1e-6)
    # Output 0 averages inputs [0, 2): floor(0) .. ceil(188/112) = 2.
    np.testing.assert_array_equal(np.nonzero(matrix[0])[0], [0, 1])


@pytest.mark.parametrize(
    "in_hw, out_hw",
    [
        ((16, 16), (32, 32)),
        ((32, 32), (64, 64)),
        ((5, 7), (11, 4)),
        ((1, 3), (4, 5)),
        ((9, 9), (9, 9)),
    ],
)
def test_resize_bilinear_align_corners_matches_torch(np_rng, in_hw, out_hw):
    x = np_rng.standard_normal((2, *in_hw, 4)).astype(np.float32)
    expected = nhwc(F.interpolate(nchw(x), size=out_hw, mode="bilinear", align_corners=True))
    actual = jax.jit(resize_bilinear_align_corners, static_argnums=1)(x, out_hw)
    assert actual.shape == expected.shape
    assert_parity(actual, expected, tol=1e-6)


def test_resize_differs_from_jax_image_resize(np_rng):
    # The reason this helper exists: jax.image.resize samples half-pixel centres.
    x = np_rng.standard_normal((1, 16, 16, 2)).astype(np.float32)
    ours = resize_bilinear_align_corners(x, (32, 32))
    theirs = jax.image.resize(x, (1, 32, 32, 2), "bilinear")
    assert float(np.abs(np.asarray(ours) - np.asarray(theirs)).max()) > 1e-2


def test_gradients_flow(np_rng):
    x = np_rng.standard_normal((1, 10, 10, 1)).astype(np.float32)
    grad = jax.grad(
        lambda v: adaptive_avg_pool2d(resize_bilinear_align_corners(v, (17, 17)), (6, 6)).sum()
    )(x)
    x_t = nchw(x).requires_grad_(True)
    F.adaptive_avg_pool2d(
        F.interpolate(x_t, size=(17, 17), mode="bilinear", align_corners=True), (6, 6)
    ).sum().backward()
    assert_parity(grad, nhwc(x_t.grad), tol=1e-5)
