"""The paper's Tables I-IV (identity, quality, utility, ablation) from an evaluation's
results, each value of ours beside the paper's DBAF value (`paper`), and the cell and
table helpers every table of the report (`report`) uses; what is not measured is
shown as `NOT_MEASURED`.
"""

from __future__ import annotations

import math
from typing import Any

from dbaf_jax.evaluation import paper
from dbaf_jax.evaluation.metric_networks import RECOGNISERS
from dbaf_jax.evaluation.recognition import DISTANCE_FORMS

NOT_MEASURED = "—"
RECOGNISER_TITLES = {
    "facenet_casia_webface": "FaceNet CASIA",
    "facenet_vggface2": "FaceNet VGGFace2",
    "arcface": "ArcFace",
    "dlib": "dlib (held out)",
}
# The distance form whose rates the tables show first (the others follow in their own rows).
HEADLINE_FORM = "l2"


def cell(value: Any, digits: int = 3) -> str:
    if value is None:
        return NOT_MEASURED
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.{digits}f}"
    return str(value)


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]


def identity_table(results: dict[str, Any]) -> list[str]:
    """Table I: recognition rates, ours then the paper's, per recogniser; one row per set and form."""
    identity = results["identity"]
    header = ["type", "distance"] + [
        f"{RECOGNISER_TITLES[r]} {who}" for r in RECOGNISERS for who in ("ours", "paper")
    ]
    forms = [HEADLINE_FORM] + [f for f in DISTANCE_FORMS if f != HEADLINE_FORM]
    rows = []
    for s, label, paper_row in (
        ("anonymization", "Anonymization ↓", "anonymization"),
        ("recovery_image", "Recovery (image) ↑", "recovery"),
        ("recovery_latent", "Recovery (latent) ↑", "recovery"),
        ("wrong_key_image", "Wrong-key recovery (image) ↓", None),
        ("wrong_key_latent", "Wrong-key recovery (latent) ↓", None),
    ):
        if not any(s in sets for sets in identity.values()):
            continue  # a family without latent-space recovery has no latent sets
        for form in forms:
            row = [label, form]
            for r in RECOGNISERS:
                row.append(identity[r][s][form]["rate"] if r in identity else None)
                row.append(paper.RECOGNITION[paper_row].get(r) if paper_row else None)
            rows.append(row)
    return table(header, rows)


def quality_table(results: dict[str, Any]) -> list[str]:
    """Table II: image quality of anonymization and recovery (both modes) against the originals."""
    quality = results["quality"]
    recoveries = [
        s for s in ("recovery_image", "recovery_latent") if s in quality
    ]  # latent: DBAF only
    header = ["metric", "anonymization ours", "anonymization paper"]
    header += [f"recovery ({s.split('_')[1]}) ours" for s in recoveries] + ["recovery paper"]
    rows = []
    for metric, title in (
        ("mse", "MSE ↓"),
        ("psnr", "PSNR ↑"),
        ("ssim", "SSIM ↑"),
        ("lpips", "LPIPS ↓"),
        ("fid", "FID ↓"),
    ):
        rows.append(
            [
                title,
                quality["anonymization"][metric],
                paper.QUALITY["anonymization"].get(metric),
                *(quality[s][metric] for s in recoveries),
                paper.QUALITY["recovery"].get(metric),
            ]
        )
    return table(header, rows)


def utility_table(results: dict[str, Any]) -> list[str]:
    """Table III: MTCNN and Dlib, ours beside the paper's (Dlib's cells empty when it was skipped)."""
    mtcnn, dlib = results["utility"]["mtcnn"], results["utility"].get("dlib", {})
    header = ["measure", "MtCNN ours", "MtCNN paper", "Dlib ours", "Dlib paper"]
    rows = [
        [title, mtcnn[key], paper.UTILITY["mtcnn"][key], dlib.get(key), paper.UTILITY["dlib"][key]]
        for key, title in (
            ("detection_rate", "Face detection ↑"),
            ("box_distance", "Bounding box distance ↓"),
            ("landmark_distance", "Landmark distance ↓ (MtCNN ours: 5 points; Dlib: 68)"),
        )
    ]
    return table(header, rows)


def ablation_table(results: dict[str, Any]) -> list[str]:
    """Table IV: this model beside the paper's four configurations (recognition: FaceNet VGGFace2, l2)."""
    quality, identity = results["quality"], results["identity"]
    recogniser = identity.get(paper.ABLATION_RECOGNISER)
    configurations = [c.replace("_", " ") for c in paper.ABLATION_CONFIGURATIONS]
    header = ["metric", "this model"] + [f"paper {c}" for c in configurations]
    rows = []
    recovery_set = "recovery_latent" if "recovery_latent" in quality else "recovery_image"
    for stage, ours_set in (("anonymization", "anonymization"), ("recovery", recovery_set)):
        for metric, values in paper.ABLATION[stage].items():
            if metric in ("de_identification", "recovery_rate"):
                ours = recogniser[ours_set][HEADLINE_FORM]["rate"] if recogniser else None
            else:
                ours = quality[ours_set][metric]
            rows.append([f"{stage}: {metric}", ours, *values])
    return table(header, rows)
