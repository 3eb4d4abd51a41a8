"""Evaluate a DBAF model with the paper's protocol (Tables I-IV, diversity).

    python -m dbaf_jax.commands.evaluate --model DIR --images DIR [--list FILE] --metrics-models DIR --out REPORT_DIR

Anonymizes the images (all below --images, or those a split list names, e.g. the
rates200.txt of ``python -m dbaf_jax.commands.make_splits``) with a fixed test password,
recovers them in both modes with it and with a wrong one, and writes into REPORT_DIR:
report.json (every number, the options, the model's fingerprint, versions),
report.md (the provenance of every network, identity at calibrated thresholds with
dlib's held-out recogniser (dlib is a dependency), the paper's
Tables I-IV with the paper's values beside ours), roc_<recogniser>.png,
samples.png, key_grid.png and tsne_<recogniser>.png. --metrics-models holds the
converted arcface, inception_fid, lpips_alex and mtcnn networks (and optionally
facenet_vggface2, facenet_casia_webface); a missing one is refused with the
converter command that writes it. The library function is
`dbaf_jax.evaluation.protocol.evaluate`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from dbaf_jax import commands
from dbaf_jax.core.errors import OutputExistsError
from dbaf_jax.evaluation import inversion
from dbaf_jax.evaluation.protocol import EvaluationOptions, evaluate
from dbaf_jax.evaluation.report import JSON_FILE, write_report
from dbaf_jax.evaluation.splits import read_split
from dbaf_jax.storage import images


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        prog="python -m dbaf_jax.commands.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, help="DBAF model directory")
    parser.add_argument("--images", required=True, help="folder of aligned face images")
    parser.add_argument(
        "--list", help="split list of paths relative to --images (default: every image below it)"
    )
    parser.add_argument(
        "--metrics-models", required=True, help="folder of the converted metric networks"
    )
    parser.add_argument("--out", required=True, help="report folder")
    parser.add_argument("--batch-size", type=commands.positive_int, default=8)
    parser.add_argument(
        "--keys", type=commands.positive_int, default=5, help="keys of the diversity study"
    )
    parser.add_argument(
        "--diversity-faces",
        type=commands.positive_int,
        default=5,
        help="faces of the diversity study",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="the diversity study's passwords and t-SNE"
    )
    parser.add_argument(
        "--guesses", type=commands.positive_int, default=8, help="wrong passwords the attack tries"
    )
    parser.add_argument(
        "--inversion-steps",
        type=int,
        default=inversion.DEFAULT_STEPS,
        help="training steps of the learned-inversion attack (0: not run)",
    )
    parser.add_argument(
        "--limit", type=commands.positive_int, help="evaluate only the first N images (a first try)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing report")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if (out / JSON_FILE).exists() and not args.overwrite:
        raise OutputExistsError(f"{out / JSON_FILE} exists; pass --overwrite to replace the report")
    paths = (
        read_split(args.list, args.images) if args.list else images.input_images(Path(args.images))
    )
    paths = paths[: args.limit] if args.limit else paths
    options = EvaluationOptions(
        args.batch_size,
        args.keys,
        args.diversity_faces,
        args.seed,
        args.guesses,
        args.inversion_steps,
    )
    results = evaluate(args.model, paths, args.metrics_models, out, options)
    json_path, md_path = write_report(out, results)
    print(f"wrote {json_path} and {md_path}")
    return results


if __name__ == "__main__":
    commands.run_main(main)
