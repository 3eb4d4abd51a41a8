"""Recover photos (or aligned crops) anonymized by ``python -m dbaf_jax.commands.anonymize``.

    python -m dbaf_jax.commands.recover --model DIR --password-file F IN_DIR OUT_DIR

Photos (the default): each output's metadata gives its salt and every face's place,
so only the password is needed; each face is re-cropped there, recovered with its own
key and pasted back. A photo that lost its metadata (re-encoded, shared online) is
recovered with --key-file (the one anonymize used): its faces are then found again by
detection, and only those that match the key file's face ledger (written by anonymize
--key-file) are recovered; every other detection is left exactly as it is, and counted.
--aligned recovers aligned crops, with --mode image (the default, the
paper's recovery from the image alone) or --mode latent (the reference's; needs
``anonymize --aligned --save-latents``). A wrong password is not an error: it gives
other faces. Images another model anonymized are refused (naming both models'
fingerprints) unless --ignore-model-mismatch. Clips in the folder are recovered through the video path
(`dbaf_jax.video.folders`: each with its sidecar, or with --key-file and its ledger); every
file not processed is named in the summary with why, and counted (exit status 3). Existing outputs are never replaced without --overwrite. --ray [ADDRESS] runs
the folder on a Ray cluster, with the same outputs, summary and exit status (docs/distributed.md).
The Python API is `dbaf_jax.inference` (`inference.anonymizer.FaceAnonymizer`).
"""

from __future__ import annotations

from typing import Sequence

from dbaf_jax import commands
from dbaf_jax.distributed import options as ray_options
from dbaf_jax.distributed import runs as ray_runs
from dbaf_jax.inference.aligned_folders import recover_folder
from dbaf_jax.inference.photo_folders import recover_photo_folder
from dbaf_jax.inference.recovery_modes import RECOVERY_MODES
from dbaf_jax.inference.report import Report
from dbaf_jax.video.folders import FolderClips


def main(argv: Sequence[str] | None = None) -> Report:
    parser = commands.folder_parser("python -m dbaf_jax.commands.recover", __doc__)
    parser.add_argument(
        "--mode",
        choices=RECOVERY_MODES,
        help="image or latent recovery (latent: --aligned only); default the mode the model was trained for",
    )
    commands.flags(
        parser,
        {
            "--untrained-mode": "recover in a mode the model was not trained for (its results are not the original faces)",
            "--ignore-model-mismatch": "recover images another model anonymized (the result will not be the original faces)",
        },
    )
    ray_options.add_arguments(parser)
    args = parser.parse_args(argv)
    commands.photo_options(parser, args)
    if args.mode == "latent" and not args.aligned:
        parser.error("--mode latent needs --aligned")
    cluster = ray_runs.join(parser, args)  # before the model loads: Ray starts before JAX does
    run = commands.start_run(args, "recover", commands.folder_run_settings(args))
    if args.aligned:
        report = recover_folder(run, args.in_dir, args.out_dir)
    else:
        runs = cluster.recover_photo_folder if cluster else recover_photo_folder
        report = runs(run, args.in_dir, args.out_dir, FolderClips(run))
    report.notes[:0] = run.notes
    report.warnings += run.warnings
    report.print()
    return report


if __name__ == "__main__":
    commands.run_main(main)
