"""Recover photos (or aligned crops) anonymized by ``python -m dbaf_jax.anonymize``.

    python -m dbaf_jax.recover --model DIR --password-file F IN_DIR OUT_DIR

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
fingerprints) unless --ignore-model-mismatch. Existing outputs are never replaced without --overwrite. The Python API
is `dbaf_jax.anonymizer`.
"""

from __future__ import annotations

from typing import Sequence

from dbaf_jax import commands, keys
from dbaf_jax.anonymizer import (
    RECOVERY_MODES,
    FaceAnonymizer,
    Report,
    load_photo_faces,
    read_password,
    recover_folder,
    recover_photo_folder,
)
from dbaf_jax.faces import ledger
from dbaf_jax.faces.photos import MIN_FACE_SIZE


def face_ledger(key_file: str | None) -> list[ledger.Entry] | None:
    """The entries of ``key_file``'s face ledger; None without a key file or ledger."""
    if key_file is None or not ledger.ledger_path(key_file).is_file():
        return None
    return ledger.read(ledger.ledger_path(key_file))


def main(argv: Sequence[str] | None = None) -> Report:
    parser = commands.folder_parser("python -m dbaf_jax.recover", __doc__)
    parser.add_argument("--mode", choices=RECOVERY_MODES, default="image", help="with --aligned: image or latent recovery")
    parser.add_argument("--ignore-model-mismatch", action="store_true",
                        help="recover images another model anonymized (the result will not be the original faces)")
    args = parser.parse_args(argv)
    commands.photo_options(parser, args)
    if args.mode != "image" and not args.aligned:
        parser.error("--mode latent needs --aligned")
    password = read_password(args.password_file)
    record = keys.read_key_file(args.key_file) if args.key_file else None
    anonymizer = FaceAnonymizer(args.model, args.dtype, without_manifest=args.allow_unchecked_model)
    if args.aligned:
        report = recover_folder(
            anonymizer, password, args.in_dir, args.out_dir, args.batch_size, args.overwrite, args.mode, args.ignore_model_mismatch
        )
    else:
        faces = load_photo_faces(anonymizer, args.detector, args.parser, MIN_FACE_SIZE if args.min_face_size is None else args.min_face_size)
        report = recover_photo_folder(
            anonymizer, faces, password, args.in_dir, args.out_dir, args.batch_size, args.overwrite, record, args.save_crops,
            args.ignore_model_mismatch, face_ledger(args.key_file),
        )
    report.print()
    return report


if __name__ == "__main__":
    commands.run_main(main)
