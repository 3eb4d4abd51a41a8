"""Helpers for comparing JAX outputs with PyTorch references, and for giving those
references random weights."""

import math

import jax
import numpy as np
import torch


def leaves_by_path(tree, dtype=None) -> dict[str, np.ndarray]:
    """A pytree's leaves as NumPy arrays (of ``dtype`` if given) by `jax.tree_util.keystr` path."""
    return {
        jax.tree_util.keystr(path): np.asarray(leaf, dtype)
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    }


def matching_leaves(*trees, dtype=None) -> list[dict[str, np.ndarray]]:
    """`leaves_by_path` of each tree; every tree must hold the same paths."""
    leaves = [leaves_by_path(tree, dtype) for tree in trees]
    assert all(other.keys() == leaves[0].keys() for other in leaves[1:])
    return leaves


def relative_error(actual, expected) -> float:
    """max |actual - expected| / max |expected| (the suite's measure of parity)."""
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = max(np.abs(expected).max(), 1e-12)
    return float(np.abs(actual - expected).max() / scale)


def assert_parity(actual, expected, tol: float = 1e-4, name: str = "output") -> None:
    err = relative_error(actual, expected)
    assert err < tol, f"{name}: relative error {err:.3g} >= {tol:g}"


def skimage_ssim(x, y) -> float:
    """scikit-image's SSIM of one pair of [-1, 1] images (H, W, 3) as ours defines it:
    shifted to [0, 2] with data range 2 (the same as [0, 1] with range 1), Gaussian
    weights of sigma 1.5, population covariances."""
    from skimage.metrics import structural_similarity

    return structural_similarity(
        x.astype(np.float64) + 1,
        y.astype(np.float64) + 1,
        gaussian_weights=True,
        sigma=1.5,
        use_sample_covariance=False,
        data_range=2,
        channel_axis=-1,
    )


def nhwc(t: torch.Tensor) -> np.ndarray:
    """A torch (B, C, H, W) tensor as a numpy (B, H, W, C) array."""
    return t.detach().permute(0, 2, 3, 1).numpy()


def nchw(x) -> torch.Tensor:
    """A (B, H, W, C) array as a torch (B, C, H, W) float32 tensor."""
    return torch.from_numpy(np.ascontiguousarray(np.asarray(x, np.float32).transpose(0, 3, 1, 2)))


def randomize_(module: torch.nn.Module, seed: int = 0, scale: float = 1.0) -> torch.nn.Module:
    """Fills every parameter and float buffer with random values, BatchNorm variances positive.

    Parameters and buffers that are zero or one at init (biases, noise weights,
    BatchNorm statistics, PReLU slopes) get random values too, so a converter that
    drops one cannot pass a parity test by luck.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if not tensor.is_floating_point():
                continue
            values = torch.randn(tensor.shape, generator=gen) * scale
            if name.endswith("running_var"):
                values = values.abs() + 0.5
            tensor.copy_(values)
    return module


def random_reference(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Random weights, biases and BatchNorm statistics; conv weights scaled by sqrt(2 / fan_in)
    so activations stay O(1) through ResNet18's depth."""
    randomize_(module, seed)
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(
                layer, torch.nn.ConvTranspose2d
            ):  # each output pixel sees one tap per input channel
                layer.weight.mul_(math.sqrt(2.0 / layer.in_channels))
            elif isinstance(layer, torch.nn.Conv2d):
                layer.weight.mul_(math.sqrt(2.0 / layer.weight[0].numel()))
    return module.eval()
