"""What an attacker does with anonymized faces, measured on embeddings.

- Password guessing (`password_guessing`): recover each anonymized face with G wrong
  passwords and keep, per face, the guess closest to the original. A wrong password
  must give an impostor, not a near miss: the best guess's distance is compared with
  the impostor distances and counted as accepted at the calibrated thresholds.
- Linkability (`linkability`): the same person in two photos anonymized under one key
  (as one key file does for face i of every photo). Each face's second anonymized view
  is searched among the first views of all faces: Rank-1 (chance 1/N) and the AUC of
  linked against unlinked distances (0.5: unlinkable, 1: always linked).

- Learned inversion (`learned_inversion`): a network trained on (anonymized, original)
  pairs of one half of the faces (`inversion.train_inverter`) is run on the other
  half's anonymized faces; how many of its outputs a recogniser accepts as the
  original, beside how many of the anonymized faces themselves it accepts.

Gallery re-identification is `calibration.rank1`. Each function takes (N, D) embeddings
and the recogniser's distance (`unit`, see `recognition.distances`).
"""

from __future__ import annotations

import numpy as np

from dbaf_jax.evaluation import calibration


def password_guessing(
    originals: np.ndarray, guesses: np.ndarray, thresholds: dict[str, float], unit: bool = True
) -> dict:
    """originals (N, D); guesses (G, N, D): face n recovered with wrong password g;
    thresholds {FAR label: distance}. Returns the best guess's mean distance and, per
    threshold, the fraction of faces whose best guess is accepted as the original."""
    distances = np.stack(
        [calibration.pair_distances(originals, g, unit) for g in guesses]
    )  # (G, N)
    best = distances.min(axis=0)
    return {
        "guesses": int(len(guesses)),
        "best_distance_mean": float(best.mean()),
        "best_distance_min": float(best.min()),
        "accepted": {far: calibration.accept_rate(best, t) for far, t in thresholds.items()},
    }


def learned_inversion(
    originals: np.ndarray,
    anonymized: np.ndarray,
    inverted: np.ndarray,
    thresholds: dict[str, float],
    unit: bool = True,
) -> dict:
    """originals, anonymized, inverted (N, D): the held-out faces, their anonymizations and
    the inverter's outputs from those; thresholds {FAR label: distance}."""
    before = calibration.pair_distances(originals, anonymized, unit)
    after = calibration.pair_distances(originals, inverted, unit)
    return {
        "test_faces": int(len(originals)),
        "anonymized_distance_mean": float(before.mean()),
        "inverted_distance_mean": float(after.mean()),
        "anonymized_accepted": {
            far: calibration.accept_rate(before, t) for far, t in thresholds.items()
        },
        "inverted_accepted": {
            far: calibration.accept_rate(after, t) for far, t in thresholds.items()
        },
    }


def linkability(first: np.ndarray, second: np.ndarray, unit: bool = True) -> dict:
    """first, second (N, D): two anonymized views of each of N faces under one key."""
    distances = calibration.all_distances(second, first, unit)  # (N, N); diagonal: linked
    linked = np.diag(distances)
    unlinked = distances[~np.eye(len(first), dtype=bool)]
    # AUC: the probability that a linked pair is closer than an unlinked one (ties count half).
    closer = (linked[:, None] < unlinked[None, :]).mean() + 0.5 * (
        linked[:, None] == unlinked[None, :]
    ).mean()
    return {
        "faces": int(len(first)),
        "rank1": float(np.mean(np.argmin(distances, axis=1) == np.arange(len(first)))),
        "chance": 1.0 / len(first),
        "auc": float(closer),
        "linked_mean": float(linked.mean()),
        "unlinked_mean": float(unlinked.mean()),
    }
