"""Anonymize every face of a folder of photos (or of aligned crops) with a password.

    python -m dbaf_jax.commands.anonymize --model DIR --password-file F IN_DIR OUT_DIR

Photos of any size (the default): the face detectors (``--detectors``, default every
installed one of MTCNN, weights in ``--detector`` or DIR/mtcnn, and dlib's HOG
detector; their low-confidence detections are pixelated) find each face, which is
aligned as FFHQ aligns its images, anonymized with its own key and
pasted back through a soft mask (``--parser`` for BiSeNet's face mask, else a
blurred box); outputs keep the photo's size, a photo without a face is copied.
--aligned takes aligned face crops instead (resized to the model's input), as
training data and the evaluation use; --save-latents (aligned only) also writes
``NAME.latents.npz`` for ``recover --mode latent`` (private: they describe the faces).

Writes one PNG per input below OUT_DIR (``photo.jpg`` -> ``photo.png``, sub-folders
kept) carrying the salt, the model's fingerprint and each face's place, never the
password; --key-file uses a key file's salt (``python -m dbaf_jax.commands.new_key``) so that
recovery works on copies that lost that metadata, and appends each photo's anonymized
faces to the key file's face ledger (``KEY.faces.jsonl``, `dbaf_jax.faces.ledger`),
which recovery needs to tell them from faces that were never anonymized. ``python -m dbaf_jax.commands.recover`` with
the same password undoes it. Existing outputs are never replaced without --overwrite.

Every face MTCNN reports is anonymized (small ones upsampled); one the model cannot take
is pixelated (irreversible) and counted; --min-face-size N leaves smaller faces as they
were, counted. Clips in the folder (mp4, mov, mkv, webm, avi) go through the video path
(`dbaf_jax.video.folders`: as anonymize_video with its defaults, the sidecar beside
each output clip). Every other file is named in the summary with why it was not
processed: an unknown type, an unreadable file, a link to a folder or out of the
folder, a dangling link or a loop, an animated GIF, or an input that is already an
output of anonymize (anonymizing it again would lose its recovery record; pass
--allow-anonymized-input). The run ends with a summary; exit status 0 all done,
1 error, 2 usage, 3 an input skipped (or a clip shorter than it declares), 4 a face left
(--min-face-size), 5 a face hidden by the fallback with --strict. --resume continues an
interrupted run. --ray [ADDRESS] runs the folder on a Ray cluster, with the same outputs, key-file
ledger, summary and exit status (docs/distributed.md).
The Python API is `dbaf_jax.inference` (`inference.anonymizer.FaceAnonymizer`).
"""

from __future__ import annotations

from typing import Sequence

from dbaf_jax import commands
from dbaf_jax.distributed import options as ray_options
from dbaf_jax.distributed import runs as ray_runs
from dbaf_jax.inference.aligned_folders import anonymize_folder
from dbaf_jax.inference.photo_folders import anonymize_photo_folder
from dbaf_jax.inference.report import Report
from dbaf_jax.video.folders import FolderClips


def main(argv: Sequence[str] | None = None) -> Report:
    parser = commands.folder_parser("python -m dbaf_jax.commands.anonymize", __doc__)
    commands.flags(
        parser,
        {
            "--save-latents": "with --aligned: also write NAME.latents.npz (private!)",
            "--resume": "continue an interrupted photo run: complete outputs are kept and counted, the rest made",
            "--strict": "a face hidden by the fallback (pixelated: the model cannot take it) fails the run (exit status 5)",
            "--allow-anonymized-input": "anonymize inputs that are already outputs of anonymize (their copies lose the recovery record)",
        },
    )
    ray_options.add_arguments(parser)
    args = parser.parse_args(argv)
    commands.photo_options(parser, args)
    if args.save_latents and not args.aligned:
        parser.error("--save-latents needs --aligned")
    if args.resume and args.aligned:
        parser.error("--resume is for photos (not --aligned)")
    cluster = ray_runs.join(parser, args)  # before the model loads: Ray starts before JAX does
    run = commands.start_run(args, "anonymize", commands.folder_run_settings(args))
    if args.aligned:
        report = anonymize_folder(run, args.in_dir, args.out_dir)
    else:
        runs = cluster.anonymize_photo_folder if cluster else anonymize_photo_folder
        report = runs(run, args.in_dir, args.out_dir, FolderClips(run))
    report.print()
    return report


if __name__ == "__main__":
    commands.run_main(main)
