"""Identity measures at thresholds calibrated on data, as a face-recognition attacker sets them.

The paper's fixed tau (`recognition.THRESHOLDS`) says little about a given recogniser
on a given set. Here each recogniser's threshold comes from its own distances on the
evaluation set's originals:

- genuine pairs: each original against an augmented view of itself (`augmented_views`:
  mirrored and 10% darker; the aligned sets hold one photo per person, so a second
  view stands in for a second photo, which makes genuine distances optimistic, i.e.
  the threshold generous to the attacker);
- impostor pairs: every pair of different originals, N (N - 1) / 2 of them;
- the threshold at a false-accept rate FAR accepts (distance <= threshold) at most
  FAR of the impostor pairs (`threshold_at_far`); below 1 / impostor pairs the FAR is
  not resolvable and the report says so (`resolvable`).

At that threshold: protection rate = 1 - TAR of (original, anonymized) pairs; recovery
rate = TAR of (original, recovered). Rank-1 identification (`rank1`) searches a gallery
of all originals (plus any distractors) with each probe; the gallery size is reported.
All distances are the recogniser's l2 (`recognition.distances`, unnormalised for `RAW_L2`).
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from dbaf_jax.evaluation import recognition
from dbaf_jax.evaluation.diversity import LEGEND_WIDTH, PALETTE, PLOT_MARGIN, PLOT_SIZE

FARS = (1e-3, 1e-2)
DARKER = 0.9


def augmented_views(batch: np.ndarray) -> np.ndarray:
    """A second view of each face: mirrored left-right and 10% darker; (B, H, W, 3) in [-1, 1]."""
    batch = np.asarray(batch, np.float32)
    return ((batch[:, :, ::-1] + 1.0) * DARKER - 1.0).astype(np.float32)


def pair_distances(a: np.ndarray, b: np.ndarray, unit: bool = True) -> np.ndarray:
    """l2 between row pairs of (N, D) x2 -> (N,)."""
    return np.asarray(recognition.distances(a, b, unit)["l2"], np.float64)


def all_distances(probes: np.ndarray, gallery: np.ndarray, unit: bool = True) -> np.ndarray:
    """l2 of every probe (P, D) to every gallery row (G, D) -> (P, G)."""
    p, g = len(probes), len(gallery)
    rows = np.repeat(np.asarray(probes), g, axis=0)
    cols = np.tile(np.asarray(gallery), (p, 1))
    return pair_distances(rows, cols, unit).reshape(p, g)


def impostor_distances(embeddings: np.ndarray, unit: bool = True) -> np.ndarray:
    """l2 of every pair of different rows of (N, D) -> (N (N - 1) / 2,)."""
    upper = np.triu_indices(len(embeddings), 1)
    return all_distances(embeddings, embeddings, unit)[upper]


def threshold_at_far(impostor: np.ndarray, far: float) -> float:
    """The threshold accepting (distance <= t) at most ``far`` of the ``impostor`` distances:
    just below the (floor(far * n) + 1)-th smallest, so ties there are rejected."""
    ordered = np.sort(np.asarray(impostor, np.float64))
    accepted = int(np.floor(far * len(ordered)))
    if accepted >= len(ordered):
        return float(ordered[-1])
    return float(np.nextafter(ordered[accepted], -np.inf))


def accept_rate(distances: np.ndarray, threshold: float) -> float:
    """Fraction of pairs accepted as the same person (distance <= threshold)."""
    return float(np.mean(np.asarray(distances) <= threshold))


def resolvable(far: float, impostor_pairs: int) -> bool:
    """Whether ``impostor_pairs`` can measure a false-accept rate as small as ``far``."""
    return far * impostor_pairs >= 1.0


def rank1(probes: np.ndarray, gallery: np.ndarray, unit: bool = True) -> float:
    """Fraction of probes (P, D) whose nearest gallery row (G >= P, D) is their own: row i of
    the gallery is probe i's original, rows past P are distractors."""
    nearest = np.argmin(all_distances(probes, gallery, unit), axis=1)
    return float(np.mean(nearest == np.arange(len(probes))))


def summary(distances: np.ndarray) -> dict[str, float | int]:
    d = np.asarray(distances, np.float64)
    return {
        "pairs": int(d.size),
        "mean": float(d.mean()),
        "std": float(d.std()),
        "min": float(d.min()),
        "max": float(d.max()),
    }


def roc(genuine: np.ndarray, impostor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FAR, TAR) at every distinct distance as threshold, FAR ascending; each (T,)."""
    thresholds = np.unique(np.concatenate([genuine, impostor]))
    impostor, genuine = np.sort(impostor), np.sort(genuine)
    far = np.searchsorted(impostor, thresholds, side="right") / len(impostor)
    tar = np.searchsorted(genuine, thresholds, side="right") / len(genuine)
    return far, tar


def calibrated_report(
    originals: np.ndarray,
    views: np.ndarray,
    sets: dict[str, np.ndarray],
    unit: bool = True,
    fars=FARS,
) -> dict:
    """Everything of the module docstring for one recogniser.

    originals, views: (N, D) embeddings of the originals and their augmented views;
    sets: {name: (N, D)} embeddings of each output set (anonymization, recovery_*, ...).
    """
    genuine = pair_distances(originals, views, unit)
    impostor = impostor_distances(originals, unit)
    report = {
        "genuine": summary(genuine),
        "impostor": summary(impostor),
        "gallery_size": len(originals),
        "rank1": {name: rank1(embeddings, originals, unit) for name, embeddings in sets.items()},
        "at_far": {},
    }
    for far in fars:
        threshold = threshold_at_far(impostor, far)
        row = {
            "threshold": threshold,
            "resolvable": resolvable(far, len(impostor)),
            "genuine_tar": accept_rate(genuine, threshold),
        }
        for name, embeddings in sets.items():
            row[f"{name}_tar"] = accept_rate(pair_distances(originals, embeddings, unit), threshold)
        if "anonymization" in sets:
            row["protection_rate"] = 1.0 - row["anonymization_tar"]
        report["at_far"][f"{far:g}"] = row
    return report


def roc_image(genuine_sets: dict[str, np.ndarray], impostor: np.ndarray) -> np.ndarray:
    """ROC curves, TAR against FAR on a log axis from 1 / impostor pairs to 1, one colour
    per set of (original, other) distances in ``genuine_sets``; legend on the right.

    Returns (PLOT_SIZE, PLOT_SIZE + LEGEND_WIDTH, 3) uint8.
    """
    span = PLOT_SIZE - 2 * PLOT_MARGIN
    low = np.log10(1.0 / len(impostor))
    canvas = Image.new("RGB", (PLOT_SIZE + LEGEND_WIDTH, PLOT_SIZE), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()

    def x(far):
        return PLOT_MARGIN + (np.log10(np.maximum(far, 10.0**low)) - low) / max(-low, 1e-12) * span

    def y(tar):
        return PLOT_SIZE - PLOT_MARGIN - tar * span

    draw.rectangle(
        (PLOT_MARGIN, PLOT_MARGIN, PLOT_MARGIN + span, PLOT_MARGIN + span), outline=(0, 0, 0)
    )
    for far in FARS:
        if far >= 10.0**low:
            draw.line((x(far), PLOT_MARGIN, x(far), PLOT_MARGIN + span), fill=(200, 200, 200))
            draw.text(
                (x(far) + 2, PLOT_SIZE - PLOT_MARGIN + 4), f"FAR {far:g}", fill=(0, 0, 0), font=font
            )
    draw.text((PLOT_MARGIN, 8), "TAR (up) against FAR (log, right)", fill=(0, 0, 0), font=font)
    for i, (name, genuine) in enumerate(genuine_sets.items()):
        colour = PALETTE[i % len(PALETTE)]
        far, tar = roc(np.asarray(genuine), np.asarray(impostor))
        draw.line(
            [(float(x(f)), float(y(t))) for f, t in zip(far, tar)] or [(0, 0)], fill=colour, width=2
        )
        top = PLOT_MARGIN + 16 * i
        draw.rectangle((PLOT_SIZE, top, PLOT_SIZE + 10, top + 10), fill=colour)
        draw.text((PLOT_SIZE + 16, top - 1), name, fill=(0, 0, 0), font=font)
    return np.asarray(canvas)
