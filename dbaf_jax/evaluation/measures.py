"""What the evaluation (`protocol.evaluate`) collects batch by batch (`Accumulator`,
`accumulate`) and the measures it reports from that: identity (Table I) with the
calibrated thresholds, the ROC plots and the attacks (`identity`, `inverted`),
robustness and key sensitivity (`robustness_report`), image quality (Table II, `quality`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from dbaf_jax.core import image_metrics
from dbaf_jax.evaluation import attacks, calibration, fid, inversion, recognition
from dbaf_jax.evaluation.metric_networks import THRESHOLD_NAMES, MetricNetworks
from dbaf_jax.inference.programs import pad_batch
from dbaf_jax.models.inception import FEATURES
from dbaf_jax.storage import images

PIXEL_METRICS = ("mse", "psnr", "ssim", "lpips")


@jax.jit
def pixel_metrics(originals, others):
    """(MSE, PSNR, SSIM) per image, each (B,), of images (B, H, W, 3) x2 in [-1, 1]."""
    return (
        image_metrics.mse(originals, others),
        image_metrics.psnr(originals, others),
        image_metrics.ssim(originals, others),
    )


class Accumulator:
    """Per-image values and FID statistics of the ``quality_sets`` and
    ``identity_sets`` (`image_sets`), collected batch by batch."""

    def __init__(
        self, recognisers: list[str], quality_sets: tuple[str, ...], identity_sets: tuple[str, ...]
    ):
        self.quality_sets, self.identity_sets = quality_sets, identity_sets
        # "view": the originals' augmented views, the genuine pairs of `calibration`.
        self.embeddings = {
            r: {s: [] for s in ("original", "view") + identity_sets} for r in recognisers
        }
        # Attack and robustness sets: "linked_view" (the views anonymized under the test key),
        # "guess<g>" (wrong-password recoveries), "robust_<transform>" (recoveries of transformed
        # images), "flip_<password|salt>" (anonymized under a one-bit-changed key).
        self.extra_embeddings = {r: {} for r in recognisers}
        # Per image: PSNR against the originals ("robust_*"), mean 8-bit level change against the
        # right key's anonymization ("flip_*"); and the flips' identity distance to it per recogniser.
        self.extra_pixels: dict[str, list[np.ndarray]] = {}
        self.flip_distances = {r: {} for r in recognisers}
        self.pixels = {s: {m: [] for m in PIXEL_METRICS} for s in quality_sets}
        # The learned-inversion attack's pairs: originals and anonymizations (N, s, s, 3), kept whole.
        self.pairs: dict[str, list[np.ndarray]] = {"original": [], "anonymization": []}
        self.fid = {s: fid.FeatureStatistics(FEATURES) for s in ("original",) + quality_sets}


def mean(values: list[np.ndarray]) -> float:
    return float(np.mean(np.concatenate(values)))


def accumulate(
    totals: Accumulator, networks: MetricNetworks, originals, outputs, batch_size: int
) -> None:
    for name, recogniser in networks.recognisers.items():
        totals.embeddings[name]["original"].append(recogniser(originals))
        totals.embeddings[name]["view"].append(recogniser(calibration.augmented_views(originals)))
        for s in totals.identity_sets:
            totals.embeddings[name][s].append(recogniser(outputs[s]))
    totals.fid["original"].update(networks.inception(originals))
    padded = pad_batch(originals, batch_size)
    for s in totals.quality_sets:
        mse, psnr, ssim = (
            np.asarray(v)[: len(originals)]
            for v in pixel_metrics(padded, pad_batch(outputs[s], batch_size))
        )
        for metric, values in zip(
            PIXEL_METRICS, (mse, psnr, ssim, networks.lpips(originals, outputs[s]))
        ):
            totals.pixels[s][metric].append(values)
        totals.fid[s].update(networks.inception(outputs[s]))


def roc_file(recogniser: str) -> str:
    return f"roc_{recogniser}.png"


def inverted(
    totals: Accumulator, networks: MetricNetworks, steps: int, seed: int, batch_size: int
) -> dict[str, np.ndarray] | None:
    """The learned-inversion attack (`inversion`): an inverter trained on the first half of
    the (anonymized, original) pairs, run on the second half's anonymizations; their
    embeddings per recogniser (N - N // 2, D), or None when not run (no ``steps``, or fewer
    than 2 faces); ``steps`` of training from ``seed``, ``batch_size`` images per call."""
    if not steps or sum(map(len, totals.pairs["original"])) < 2:
        return None
    originals, anonymized = (np.concatenate(totals.pairs[s]) for s in ("original", "anonymization"))
    half = len(originals) // 2
    invert = inversion.train_inverter(anonymized[:half], originals[:half], steps, seed)
    inverted = np.concatenate(
        [invert(anonymized[i : i + batch_size]) for i in range(half, len(anonymized), batch_size)]
    )
    chunks = [inverted[i : i + batch_size] for i in range(0, len(inverted), batch_size)]
    return {
        r: np.concatenate([recogniser(chunk) for chunk in chunks])
        for r, recogniser in networks.recognisers.items()
    }


def identity(
    totals: Accumulator, out_dir: Path, inverted: dict[str, np.ndarray] | None = None
) -> dict[str, Any]:
    """The paper's fixed-tau rates and the calibrated measures per recogniser, and the
    attacks (``inverted``: `inverted`'s embeddings); writes the ROC plots."""
    report = {}
    for name, sets in totals.embeddings.items():
        tau = recognition.threshold(THRESHOLD_NAMES[name])
        unit = name not in recognition.RAW_L2
        originals = np.concatenate(sets["original"])
        report[name] = {"tau": tau}
        outputs = {s: np.concatenate(sets[s]) for s in totals.identity_sets}
        for s, embeddings in outputs.items():
            report[name][s] = recognition.recognition_report(originals, embeddings, tau, unit=unit)
        if len(originals) >= 2:  # impostor pairs need two faces
            views = np.concatenate(sets["view"])
            report[name]["calibrated"] = calibration.calibrated_report(
                originals, views, outputs, unit=unit
            )
            genuine = calibration.pair_distances(originals, views, unit)
            curves = {"genuine (view)": genuine}
            curves.update(
                {s: calibration.pair_distances(originals, outputs[s], unit) for s in outputs}
            )
            impostor = calibration.impostor_distances(originals, unit)
            images.write_png(
                out_dir / roc_file(name),
                calibration.roc_image(curves, impostor),
                {"recogniser": name},
            )
            report[name]["calibrated"]["plot"] = roc_file(name)
            report[name]["attacks"] = attack_report(
                totals.extra_embeddings[name],
                originals,
                outputs["anonymization"],
                report[name]["calibrated"],
                unit,
            )
            if inverted is not None:
                half = len(originals) // 2
                thresholds = {
                    far: row["threshold"]
                    for far, row in report[name]["calibrated"]["at_far"].items()
                }
                report[name]["attacks"]["learned_inversion"] = attacks.learned_inversion(
                    originals[half:],
                    outputs["anonymization"][half:],
                    inverted[name],
                    thresholds,
                    unit,
                )
    return report


def robustness_report(totals: Accumulator, identity: dict[str, Any]) -> dict[str, Any]:
    """Recovery after each `robustness.TRANSFORMS` (PSNR, identity distance, TAR at the
    calibrated thresholds) and the one-bit key changes (8-bit levels and identity distance
    between the changed key's anonymization and the right key's)."""
    report: dict[str, Any] = {"recovery": {}, "key_sensitivity": {}}
    for name, values in totals.extra_pixels.items():
        per_recogniser = {}
        for r, sets in totals.extra_embeddings.items():
            if name.startswith("robust_"):
                unit = r not in recognition.RAW_L2
                originals = np.concatenate(totals.embeddings[r]["original"])
                distances = calibration.pair_distances(originals, np.concatenate(sets[name]), unit)
                row = {"mean_distance": float(distances.mean())}
                if "calibrated" in identity[r]:
                    row["tar"] = {
                        far: calibration.accept_rate(distances, at["threshold"])
                        for far, at in identity[r]["calibrated"]["at_far"].items()
                    }
                per_recogniser[r] = row
            else:
                per_recogniser[r] = {"mean_distance": mean(totals.flip_distances[r][name])}
        if name.startswith("robust_"):
            report["recovery"][name.removeprefix("robust_")] = {
                "psnr": mean(values),
                "identity": per_recogniser,
            }
        else:
            report["key_sensitivity"][name.removeprefix("flip_")] = {
                "mean_levels": mean(values),
                "identity": per_recogniser,
            }
    return report


def attack_report(
    embeddings: dict[str, list[np.ndarray]], originals, anonymized, calibrated: dict, unit: bool
) -> dict:
    """Password guessing and linkability (`attacks`) for one recogniser; originals and
    anonymized (N, D), calibrated: its `calibration.calibrated_report`."""
    guesses = np.stack(
        [np.concatenate(v) for k, v in sorted(embeddings.items()) if k.startswith("guess")]
    )
    thresholds = {far: row["threshold"] for far, row in calibrated["at_far"].items()}
    first = np.concatenate(embeddings["linked_view"])
    return {
        "password_guessing": attacks.password_guessing(originals, guesses, thresholds, unit),
        "linkability": attacks.linkability(anonymized, first, unit),
    }


def quality(totals: Accumulator) -> dict[str, Any]:
    report = {}
    for s in totals.quality_sets:
        report[s] = {metric: mean(values) for metric, values in totals.pixels[s].items()}
        originals, outputs = totals.fid["original"], totals.fid[s]
        try:
            report[s]["fid"] = fid.statistics_distance(originals, outputs)
        except fid.DegenerateStatistics as err:
            # A run of a few images (a smoke test) keeps every other figure.
            report[s]["fid"] = None
            report[s]["fid_undefined"] = (
                f"{err}; from {originals.count} and {outputs.count} images against "
                f"{originals.dim} features"
            )
    return report
