"""Recover faces anonymized by ``python -m dbaf_jax.anonymize`` with the same password.

    python -m dbaf_jax.recover --model DIR --password-file F IN_DIR OUT_DIR [--mode image|latent]

Reads each anonymized PNG's salt from its metadata, so only the password is needed. A
wrong password is not an error: it gives another face. --mode image (the default)
needs nothing but the PNGs (the paper's recovery); --mode latent is the reference's
and needs the ``NAME.latents.npz`` files of ``anonymize --save-latents``. Existing
outputs are never replaced without --overwrite. The Python API is `dbaf_jax.anonymizer`.
"""

from __future__ import annotations

from typing import Sequence

from dbaf_jax import commands
from dbaf_jax.anonymizer import RECOVERY_MODES, FaceAnonymizer, Report, recover_folder, read_password


def main(argv: Sequence[str] | None = None) -> Report:
    parser = commands.folder_parser("python -m dbaf_jax.recover", __doc__)
    parser.add_argument("--mode", choices=RECOVERY_MODES, default="image")
    args = parser.parse_args(argv)
    password = read_password(args.password_file)
    report = recover_folder(
        FaceAnonymizer(args.model),
        password,
        args.in_dir,
        args.out_dir,
        args.batch_size,
        args.overwrite,
        args.mode,
    )
    report.print()
    return report


if __name__ == "__main__":
    commands.run_main(main)
