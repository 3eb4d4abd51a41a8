"""Frechet distance between two sets of feature vectors (the distance behind FID).

Features (N, D) come from any network (for FID, the Inception pool features of the
images); this module only keeps their statistics and compares them. Everything here
runs on the host in float64: the matrix square root of a (D, D) product of
covariances loses several digits, and float32 would move FID in its second digit.

`FeatureStatistics` accumulates batches as they come (Chan et al.'s pairwise update of
count, mean and centred scatter), so thousands of images never need to be in memory
at once, and avoids the cancellation of a raw sum of squares. Its covariance is the
unbiased one (divides by N - 1), as ``numpy.cov`` and pytorch-fid use.

`frechet_distance` follows pytorch-fid's ``calculate_frechet_distance`` step for step:
when the square root of sigma1 @ sigma2 is not finite (a singular product), it
retries with ``eps`` added to both diagonals and warns; a complex root whose diagonal
has an imaginary part above 1e-3 is an error (`DegenerateStatistics`: the statistics
define no distance, as happens with far fewer images than the D = 2,048 features);
otherwise the real part is used.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
from scipy import linalg

from dbaf_jax.core.errors import DatasetError

# pytorch-fid's defaults for the singular-product retry and the imaginary-part check.
SINGULAR_OFFSET = 1e-6
IMAGINARY_TOLERANCE = 1e-3


class DegenerateStatistics(DatasetError):
    """The square root of sigma1 @ sigma2 is far from real: the two statistics define no
    Frechet distance (too few or degenerate feature vectors)."""


class SingularProductWarning(RuntimeWarning):
    """sigma1 @ sigma2 had no finite square root; the distance used the diagonal offset."""


@dataclasses.dataclass
class FeatureStatistics:
    """Running count, mean (D,) and centred scatter (D, D) of feature vectors, float64."""

    dim: int
    count: int = 0
    mean: np.ndarray = dataclasses.field(init=False)
    scatter: np.ndarray = dataclasses.field(init=False)

    def __post_init__(self):
        self.mean = np.zeros(self.dim, np.float64)
        self.scatter = np.zeros((self.dim, self.dim), np.float64)

    def update(self, features) -> None:
        """Adds a batch of features (B, D) (any float dtype, any device; copied to host float64)."""
        batch = np.asarray(features, np.float64)
        if batch.ndim != 2 or batch.shape[1] != self.dim:
            raise ValueError(f"features of shape {batch.shape}, expected (B, {self.dim})")
        n = batch.shape[0]
        if n == 0:
            return
        batch_mean = batch.mean(axis=0)
        centred = batch - batch_mean
        delta = batch_mean - self.mean
        total = self.count + n
        self.scatter += centred.T @ centred + np.outer(delta, delta) * (self.count * n / total)
        self.mean += delta * (n / total)
        self.count = total

    def covariance(self) -> np.ndarray:
        """The unbiased covariance (D, D); needs at least two vectors."""
        if self.count < 2:
            raise DatasetError(f"a covariance needs at least 2 feature vectors, got {self.count}")
        return self.scatter / (self.count - 1)


def statistics(features) -> tuple[np.ndarray, np.ndarray]:
    """(mean (D,), covariance (D, D)) of features (N, D) in float64, N >= 2."""
    features = np.asarray(features)
    stats = FeatureStatistics(features.shape[-1])
    stats.update(features)
    return stats.mean, stats.covariance()


def _sqrtm(matrix: np.ndarray) -> np.ndarray:
    # SciPy warns on singular input; the caller checks the result itself.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", linalg.LinAlgWarning)
        return linalg.sqrtm(matrix)


def frechet_distance(mu1, sigma1, mu2, sigma2, eps: float = SINGULAR_OFFSET) -> float:
    """||mu1 - mu2||^2 + tr(sigma1 + sigma2 - 2 sqrt(sigma1 sigma2)): means (D,), covariances (D, D)."""
    mu1, mu2 = (
        np.atleast_1d(np.asarray(mu1, np.float64)),
        np.atleast_1d(np.asarray(mu2, np.float64)),
    )
    sigma1, sigma2 = (
        np.atleast_2d(np.asarray(sigma1, np.float64)),
        np.atleast_2d(np.asarray(sigma2, np.float64)),
    )
    if mu1.shape != mu2.shape or sigma1.shape != sigma2.shape or sigma1.shape != mu1.shape * 2:
        raise ValueError(
            f"statistics do not match: means {mu1.shape} {mu2.shape}, covariances {sigma1.shape} {sigma2.shape}"
        )

    covmean = _sqrtm(sigma1 @ sigma2)
    if not np.isfinite(covmean).all():
        warnings.warn(
            f"singular covariance product; adding {eps} to both diagonals",
            SingularProductWarning,
            stacklevel=2,
        )
        offset = np.eye(sigma1.shape[0]) * eps
        covmean = _sqrtm((sigma1 + offset) @ (sigma2 + offset))
    if np.iscomplexobj(covmean):
        if not np.allclose(np.diagonal(covmean).imag, 0, atol=IMAGINARY_TOLERANCE):
            worst = np.max(np.abs(covmean.imag))
            raise DegenerateStatistics(
                f"Frechet distance: the covariance product's square root has an imaginary part of {worst:.3g} "
                "(too few or degenerate feature vectors)"
            )
        covmean = covmean.real
    diff = mu1 - mu2
    return float(diff @ diff + np.trace(sigma1) + np.trace(sigma2) - 2.0 * np.trace(covmean))


def statistics_distance(stats1: FeatureStatistics, stats2: FeatureStatistics) -> float:
    """`frechet_distance` between two accumulated feature sets."""
    return frechet_distance(stats1.mean, stats1.covariance(), stats2.mean, stats2.covariance())
