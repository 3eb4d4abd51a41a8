"""Anonymize a folder of aligned faces with a password.

    python -m dbaf_jax.anonymize --model DIR --password-file F IN_DIR OUT_DIR

Writes one PNG per input image below OUT_DIR (``face.jpg`` -> ``face.png``, sub-folders
kept) with a fresh random salt; each carries the salt and the model's fingerprint,
never the password. ``python -m dbaf_jax.recover`` with the same password undoes it.
--save-latents also writes ``NAME.latents.npz`` for ``recover --mode latent``; those
files describe the original faces, so keep them private. Existing outputs are never
replaced without --overwrite. The Python API is `dbaf_jax.anonymizer`.
"""

from __future__ import annotations

from typing import Sequence

from dbaf_jax import commands
from dbaf_jax.anonymizer import FaceAnonymizer, Report, anonymize_folder, read_password


def main(argv: Sequence[str] | None = None) -> Report:
    parser = commands.folder_parser("python -m dbaf_jax.anonymize", __doc__)
    parser.add_argument("--save-latents", action="store_true", help="also write NAME.latents.npz (private!)")
    args = parser.parse_args(argv)
    password = read_password(args.password_file)
    report = anonymize_folder(
        FaceAnonymizer(args.model),
        password,
        args.in_dir,
        args.out_dir,
        args.batch_size,
        args.overwrite,
        args.save_latents,
    )
    report.print()
    return report


if __name__ == "__main__":
    commands.run_main(main)
