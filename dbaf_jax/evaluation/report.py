"""The evaluation's report: report.json (every number) and report.md (the paper's Tables I-IV).

report.json is strict JSON: a non-finite number (PSNR of identical images is +inf)
is written as the string "inf" (or "-inf", "nan"). report.md lays out Tables I-IV as
the paper does (`paper_tables`), each value of ours beside the paper's DBAF value; what
this project does not measure (Dlib when it is not installed, the ablation
configurations other than the model evaluated) is shown as "—". Before them comes what
the paper does not report: the calibrated thresholds, the attacks, the learned
inversion and robustness; after them, the diversity study.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dbaf_jax.evaluation import dlib_recognition
from dbaf_jax.evaluation.calibration import FARS
from dbaf_jax.evaluation.metric_networks import FOLDER_FILE, RANDOM_WEIGHTS, RECOGNISERS
from dbaf_jax.evaluation.paper_tables import (
    RECOGNISER_TITLES,
    ablation_table,
    cell,
    identity_table,
    quality_table,
    table,
    utility_table,
)
from dbaf_jax.evaluation.protocol import SAMPLES_FILE

JSON_FILE = "report.json"
MARKDOWN_FILE = "report.md"


def json_ready(value: Any) -> Any:
    """``value`` with non-finite floats replaced by "inf", "-inf" or "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def provenance_lines(results: dict[str, Any]) -> list[str]:
    """Where every network came from; a bold warning over everything when any is random."""
    provenance = results["provenance"]
    lines = []
    record = results.get("metric_networks_record")
    if record and record["random_weights"]:
        lines += [
            f"**Smoke test: the metric networks have random weights** (their folder's {FOLDER_FILE} records "
            "it; `python -m dbaf_jax.commands.make_metric_networks` wrote them). No figure below is a measurement.",
            "",
        ]
    if any(p["random"] for p in provenance.values()):
        random = ", ".join(name for name, p in provenance.items() if p["random"])
        lines += [
            f"**{RANDOM_WEIGHTS}** ({random}): the figures below show that the harness works, "
            "not that a model protects anyone.",
            "",
        ]
    rows = [
        [
            name,
            part["part"] or "—",
            f"**{RANDOM_WEIGHTS}**" if part["random"] else part["source"],
            part["sha256"],
        ]
        for name, p in provenance.items()
        for part in p["parts"]
    ]
    lines += ["## Provenance", ""] + table(["network", "part", "source", "sha256"], rows)
    key = results["key"]
    lines += [
        "",
        f"Test password `{results['test_password']}`, wrong password `{results['wrong_password']}`, "
        f"salt `{key['salt']}` (fixed, docs/evaluation.md).",
        "",
    ]
    return lines


def calibrated_table(results: dict[str, Any]) -> list[str]:
    """Per recogniser: distributions, threshold, protection and recovery at each FAR, Rank-1."""
    identity = results["identity"]
    header = ["recogniser", "gallery", "genuine mean", "impostor mean (pairs)"]
    for far in FARS:
        header += [
            f"threshold @FAR {far:g}",
            f"protection @{far:g} ↑",
            f"recovery (image) @{far:g} ↑",
        ]
    header += ["Rank-1 anonymized ↓", "Rank-1 wrong key ↓", "ROC"]
    rows = []
    for r in RECOGNISERS:
        calibrated = identity.get(r, {}).get("calibrated")
        if not calibrated:
            continue
        row = [
            RECOGNISER_TITLES[r],
            calibrated["gallery_size"],
            calibrated["genuine"]["mean"],
            f"{calibrated['impostor']['mean']:.3f} ({calibrated['impostor']['pairs']})",
        ]
        for far in FARS:
            at = calibrated["at_far"][f"{far:g}"]
            mark = "" if at["resolvable"] else " (not resolvable)"
            row += [f"{at['threshold']:.3f}{mark}", at["protection_rate"], at["recovery_image_tar"]]
        row += [
            calibrated["rank1"]["anonymization"],
            calibrated["rank1"]["wrong_key_image"],
            f"`{calibrated['plot']}`",
        ]
        rows.append(row)
    return table(header, rows)


def attacks_table(results: dict[str, Any]) -> list[str]:
    """Per recogniser: the password-guessing attack's best guess and the linkability attack."""
    header = ["recogniser", "guesses", "best guess: mean distance ↑", "impostor mean"]
    header += [f"best guess accepted @{far:g} ↓" for far in FARS]
    header += ["link Rank-1 ↓", "link chance", "link AUC ↓ (0.5 unlinkable)"]
    rows = []
    for r in RECOGNISERS:
        identity = results["identity"].get(r, {})
        if "attacks" not in identity:
            continue
        guess, link = identity["attacks"]["password_guessing"], identity["attacks"]["linkability"]
        rows.append(
            [
                RECOGNISER_TITLES[r],
                guess["guesses"],
                guess["best_distance_mean"],
                identity["calibrated"]["impostor"]["mean"],
                *(guess["accepted"][f"{far:g}"] for far in FARS),
                link["rank1"],
                link["chance"],
                link["auc"],
            ]
        )
    return table(header, rows)


def inversion_table(results: dict[str, Any]) -> list[str]:
    """Per recogniser: the learned-inversion attack, or a line saying it did not run."""
    header = ["recogniser", "test faces", "anonymized: mean distance", "inverted: mean distance ↑"]
    header += [f"anonymized accepted @{far:g} ↓" for far in FARS] + [
        f"inverted accepted @{far:g} ↓" for far in FARS
    ]
    rows = []
    for r in RECOGNISERS:
        attack = results["identity"].get(r, {}).get("attacks", {}).get("learned_inversion")
        if attack is None:
            continue
        rows.append(
            [
                RECOGNISER_TITLES[r],
                attack["test_faces"],
                attack["anonymized_distance_mean"],
                attack["inverted_distance_mean"],
                *(attack["anonymized_accepted"][f"{far:g}"] for far in FARS),
                *(attack["inverted_accepted"][f"{far:g}"] for far in FARS),
            ]
        )
    return (
        table(header, rows) if rows else ["Not run (--inversion-steps 0, or fewer than 2 faces)."]
    )


def robustness_lines(results: dict[str, Any]) -> list[str]:
    """Recovery after sharing-like transforms, and the one-bit key changes."""
    robust = results["robustness"]
    present = [r for r in RECOGNISERS if r in results["identity"]]
    header = ["recovery (image) after", "PSNR ↑"] + [
        f"{RECOGNISER_TITLES[r]} TAR @{FARS[0]:g} ↑" for r in present
    ]
    rows = [
        [
            "nothing (Table I's recovery)",
            results["quality"]["recovery_image"]["psnr"],
            *(
                results["identity"][r]
                .get("calibrated", {})
                .get("at_far", {})
                .get(f"{FARS[0]:g}", {})
                .get("recovery_image_tar")
                for r in present
            ),
        ]
    ]
    for name, row in robust["recovery"].items():
        rows.append(
            [
                name,
                row["psnr"],
                *(row["identity"][r].get("tar", {}).get(f"{FARS[0]:g}") for r in present),
            ]
        )
    lines = table(header, rows)
    lines += [
        "",
        "Stripped metadata: the evaluation recovers with the key given (as `--key-file` does), never "
        "from the file's metadata, so its row equals the first.",
        "",
    ]
    header = ["one bit changed in", "mean change (8-bit levels) ↑"] + [
        f"{RECOGNISER_TITLES[r]} distance ↑" for r in present
    ]
    rows = [
        [name, row["mean_levels"], *(row["identity"][r]["mean_distance"] for r in present)]
        for name, row in robust["key_sensitivity"].items()
    ]
    return lines + table(header, rows)


def header_section(results: dict[str, Any]) -> list[str]:
    """The title, the provenance, the model and what was not measured or read."""
    model = results["model"]
    options = results["options"]
    lines = [
        "# DBAF evaluation",
        "",
        *provenance_lines(results),
        f"Model `{model['path']}` (fingerprint `{model['fingerprint']}`), {results['images']} images "
        f"at {model['output_size']} px, batch {options['batch_size']}; dbaf_jax {results['versions']['dbaf_jax']}, "
        f'JAX {results["versions"]["jax"]}. Paper values: DBAF\'s own ("Ours"/"Full"), measured on CelebA-HQ.',
        "",
    ]
    if results["missing_recognisers"]:
        missing = ", ".join(RECOGNISER_TITLES[r] for r in results["missing_recognisers"])
        lines += [
            f"Not measured (network not converted, or for dlib: {dlib_recognition.INSTALL_HINT}): {missing}.",
            "",
        ]
    if results["skipped"]:
        lines += [f"Skipped {len(results['skipped'])} unreadable image(s).", ""]
    return lines


def calibrated_section(results: dict[str, Any]) -> list[str]:
    """The section on identity at each recogniser's calibrated thresholds."""
    lines = [
        "## Identity at calibrated thresholds",
        "",
        "Thresholds from each recogniser's own distances on these originals: genuine pairs are each "
        "original and its mirrored, 10% darker view; impostor pairs every two different originals. "
        "Protection = 1 - TAR of (original, anonymized); recovery = TAR of (original, recovered). Rank-1: "
        "each output searched in a gallery of all originals (size in column 2). A FAR below 1 / impostor "
        "pairs is not resolvable on this many faces. dlib is held out from the model's training.",
        "",
    ]
    return lines + calibrated_table(results)


def attacks_section(results: dict[str, Any]) -> list[str]:
    """The attacks section: password guessing and linkability, then the learned inversion."""
    lines = [
        "",
        "## Attacks",
        "",
        "Password guessing: each anonymized face recovered with every guessed wrong password; the guess "
        "closest to the original is kept (a wrong password must give an impostor, not a near miss). "
        "Linkability: each face and its second view (mirrored, darker), both anonymized under the test "
        "key, as one key file does for the same face position in many photos; can the second be found "
        "among all first views?",
        "",
    ]
    lines += attacks_table(results)
    lines += [
        "",
        "Learned inversion: a small network (three 3x3 convolutions) trained on (anonymized, original) "
        "pairs of the first half of the faces, run on the second half's anonymized faces: how many of its "
        "outputs each recogniser accepts as the original, beside the anonymized faces themselves.",
        "",
    ]
    return lines + inversion_table(results)


def robustness_section(results: dict[str, Any]) -> list[str]:
    """The robustness and key-sensitivity section (its tables: `robustness_lines`)."""
    lines = [
        "",
        "## Robustness and key sensitivity",
        "",
        "Recovery with the right password after what sharing does to a photo; anonymization under a "
        "password or salt with one bit flipped, against the right key's anonymization.",
        "",
    ]
    return lines + robustness_lines(results)


def paper_tables_section(results: dict[str, Any]) -> list[str]:
    """The paper's Tables I-IV, each with what it measures and the notes under it."""
    lines = [
        "",
        "## Table I: recognition rate (the paper's protocol)",
        "",
        "The paper's protocol: fraction of images recognised as their original (distance <= tau; "
        "FaceNet 1.1, ArcFace 0.8) under each distance form. dlib, held out from the model's training "
        "(ArcFace is the network DBAF trains against), at its documented 0.6 on raw descriptors; the paper "
        "has no dlib column.",
        "",
    ]
    lines += identity_table(results)
    lines += [
        "",
        "## Table II: image quality",
        "",
        "Against the originals, mean over images; FID between the originals and each set.",
        "",
    ]
    lines += quality_table(results)
    undefined = [
        f"FID of {name} not defined: {values['fid_undefined']}."
        for name, values in results["quality"].items()
        if "fid_undefined" in values
    ]
    lines += [""] + undefined if undefined else []
    lines += ["", "## Table III: utility", ""] + utility_table(results)
    lines += [
        "",
        f"MtCNN found a face in {cell(results['utility']['mtcnn']['detection_rate_original'])} of the "
        f"originals; distances over {results['utility']['mtcnn']['pairs']} image pairs with a face in both.",
    ]
    dlib = results["utility"].get("dlib", {})
    lines += [
        f"Dlib (68 landmarks): skipped, {dlib['skipped']}."
        if "skipped" in dlib
        else f"Dlib (68 landmarks): distances over {dlib.get('pairs')} image pairs with a face in both."
    ]
    lines += [
        "",
        "## Table IV: ablation",
        "",
        "This model (recovery in latent mode) beside the paper's configurations; evaluate each "
        "ablation's model to fill its column. Recognition: FaceNet VGGFace2, l2.",
        "",
    ]
    return lines + ablation_table(results)


def diversity_section(results: dict[str, Any]) -> list[str]:
    """The diversity section: pairwise identity diversity per recogniser, the plots, the samples."""
    lines = ["", "## Diversity", ""]
    div = results["diversity"]
    lines += table(
        ["recogniser", "mean pairwise cosine ↓", "mean pairwise angle (°) ↑"],
        [
            [RECOGNISER_TITLES[r], div[r]["mean_cosine"], div[r]["mean_angle_degrees"]]
            for r in RECOGNISERS
            if r in div
        ],
    )
    plots = ", ".join(f"`{name}`" for name in div["plots"])
    return lines + [
        "",
        f"{div['faces']} faces x {div['keys']} keys: {plots}. "
        f"Samples (original, then each set of Table I): `{SAMPLES_FILE}`.",
        "",
    ]


def markdown(results: dict[str, Any]) -> str:
    """report.md: its sections, in the order the module docstring gives."""
    sections = (
        header_section,
        calibrated_section,
        attacks_section,
        robustness_section,
        paper_tables_section,
        diversity_section,
    )
    return "\n".join(line for section in sections for line in section(results))


def write_report(out_dir: str | Path, results: dict[str, Any]) -> tuple[Path, Path]:
    """Writes report.json and report.md into ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / JSON_FILE, out_dir / MARKDOWN_FILE
    json_path.write_text(
        json.dumps(json_ready(results), indent=2, sort_keys=True, allow_nan=False) + "\n"
    )
    md_path.write_text(markdown(results))
    return json_path, md_path
