"""How different the anonymizations of one face under different keys are.

- `pairwise_identity_diversity`: for each face, the mean cosine similarity and the
  mean angle (degrees) over all pairs of its K anonymizations' identity embeddings,
  averaged over faces. With ArcFace embeddings the mean angle is iFADIT's KFFA (Known
  Factor Feature Angle); a larger angle and a lower cosine mean more diverse faces.
- `key_passwords`: N reproducible passwords per run, one per key.
- `key_grid`: the DBAF paper's Figure 10 layout, one face per row: original, then
  its anonymizations.
- `tsne_points` and `write_tsne_plot`: the paper's Figure 12, a t-SNE map of the
  embeddings of a few faces under many keys, one colour per face.

t-SNE is scikit-learn's (the maintained reference implementation; deterministic given
its random_state). The scatter is drawn with Pillow, already a dependency for image
I/O: a few hundred coloured dots and a legend do not justify matplotlib.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from PIL import Image, ImageDraw, ImageFont
from sklearn.manifold import TSNE

from dbaf_jax.core.errors import ConfigError
from dbaf_jax.evaluation.recognition import normalize
from dbaf_jax.storage import images

# t-SNE's customary perplexity; `tsne_points` lowers it for small sets (it must stay below the point count).
TSNE_PERPLEXITY = 30.0
# Distinct colours for up to ten faces (the Tableau 10 palette), then they repeat.
PALETTE = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
)  # fmt: skip
PLOT_SIZE = 640
PLOT_MARGIN = 32
LEGEND_WIDTH = 128
DOT_RADIUS = 4


def pairwise_identity_diversity(embeddings: jnp.ndarray) -> dict[str, float]:
    """Mean pairwise cosine and angle among each face's K embeddings, averaged over faces.

    Args:
      embeddings: (F, K, D) identity embeddings of F faces each anonymized with K >= 2
        keys (normalised here, so any scale is fine).

    Returns:
      ``{"mean_cosine": ..., "mean_angle_degrees": ...}``; the angle is KFFA for ArcFace.
    """
    if np.ndim(embeddings) != 3 or np.shape(embeddings)[1] < 2:
        raise ConfigError(
            f"need embeddings (faces, keys >= 2, dim), got shape {np.shape(embeddings)}"
        )
    unit = normalize(embeddings)
    cosines = jnp.einsum("fkd,fjd->fkj", unit, unit)
    rows, cols = np.triu_indices(unit.shape[1], k=1)
    pair_cosines = jnp.clip(cosines[:, rows, cols], -1.0, 1.0)  # (F, K(K-1)/2)
    angles = jnp.degrees(jnp.arccos(pair_cosines))
    return {
        "mean_cosine": float(jnp.mean(jnp.mean(pair_cosines, axis=1))),
        "mean_angle_degrees": float(jnp.mean(jnp.mean(angles, axis=1))),
    }


def key_passwords(count: int, seed: int = 0) -> list[str]:
    """``count`` distinct passwords, the same for the same (count, seed) on any machine.

    Each is the first 24 hex digits of sha256("dbaf-jax diversity <seed> <index>").
    """
    return [
        hashlib.sha256(f"dbaf-jax diversity {seed} {i}".encode()).hexdigest()[:24]
        for i in range(count)
    ]


def key_grid(originals: np.ndarray, anonymized: np.ndarray, padding: int = 2) -> np.ndarray:
    """One row per face, the original then its K anonymizations, as a uint8 grid.

    Args:
      originals: (F, H, W, 3) in [-1, 1].
      anonymized: (F, K, H, W, 3) in [-1, 1], face f under key k.

    Returns:
      (F*(H+p)+p, (K+1)*(W+p)+p, 3) uint8 (see `dbaf_jax.storage.images.make_grid`).
    """
    originals, anonymized = np.asarray(originals), np.asarray(anonymized)
    if anonymized.shape[0] != originals.shape[0] or anonymized.shape[2:] != originals.shape[1:]:
        raise ConfigError(
            f"anonymized {anonymized.shape} does not match originals {originals.shape} as (F, K, H, W, 3)"
        )
    rows = np.concatenate([originals[:, None], anonymized], axis=1)
    return images.make_grid(
        rows.reshape(-1, *originals.shape[1:]), rows=originals.shape[0], padding=padding
    )


def tsne_points(
    embeddings: np.ndarray, seed: int = 0, perplexity: float = TSNE_PERPLEXITY
) -> np.ndarray:
    """2-D t-SNE map of (F, K, D) embeddings -> (F, K, 2), deterministic for a seed.

    Embeddings are L2-normalised first (Euclidean t-SNE distances then order pairs as
    cosine does). The perplexity is lowered to (F*K - 1) / 3 when the set is too
    small for it (t-SNE needs it below the number of points).
    """
    faces, keys, dim = np.shape(embeddings)
    flat = np.asarray(normalize(np.reshape(embeddings, (faces * keys, dim))))
    perplexity = min(perplexity, (faces * keys - 1) / 3)
    points = TSNE(
        n_components=2, perplexity=perplexity, init="pca", random_state=seed
    ).fit_transform(flat)
    return points.reshape(faces, keys, 2)


def tsne_image(points: np.ndarray, labels: list[str] | None = None) -> np.ndarray:
    """Scatter of (F, K, 2) points, one colour per face, legend on the right.

    Returns (PLOT_SIZE, PLOT_SIZE + LEGEND_WIDTH, 3) uint8.
    """
    points = np.asarray(points, np.float64)
    faces = points.shape[0]
    labels = labels or [f"face {f + 1}" for f in range(faces)]
    low, high = points.reshape(-1, 2).min(axis=0), points.reshape(-1, 2).max(axis=0)
    span = np.maximum(high - low, 1e-12)
    pixels = PLOT_MARGIN + (points - low) / span * (PLOT_SIZE - 2 * PLOT_MARGIN)
    canvas = Image.new("RGB", (PLOT_SIZE + LEGEND_WIDTH, PLOT_SIZE), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    for f in range(faces):
        colour = PALETTE[f % len(PALETTE)]
        for x, y in pixels[f]:
            # Image rows grow downwards; flip y so the map reads like a plot.
            cy = PLOT_SIZE - y
            draw.ellipse(
                (x - DOT_RADIUS, cy - DOT_RADIUS, x + DOT_RADIUS, cy + DOT_RADIUS), fill=colour
            )
        top = PLOT_MARGIN + 16 * f
        draw.rectangle((PLOT_SIZE, top, PLOT_SIZE + 10, top + 10), fill=colour)
        draw.text((PLOT_SIZE + 16, top - 1), labels[f], fill=(0, 0, 0), font=font)
    return np.asarray(canvas)


def write_tsne_plot(
    path: str | Path, embeddings: np.ndarray, seed: int = 0, labels: list[str] | None = None
) -> np.ndarray:
    """t-SNE of (F, K, D) embeddings drawn to a PNG at ``path``; returns the (F, K, 2) points."""
    points = tsne_points(embeddings, seed)
    faces, keys, _ = points.shape
    metadata = {"plot": "t-SNE of identity embeddings", "faces": faces, "keys": keys, "seed": seed}
    images.write_png(path, tsne_image(points, labels), metadata)
    return points
