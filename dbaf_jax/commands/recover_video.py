"""Recover a video anonymized by ``python -m dbaf_jax.commands.anonymize_video``.

    python -m dbaf_jax.commands.recover_video --model DIR --password-file F ANON.mp4 OUT.mp4

The sidecar ``ANON.mp4.dbaf.json`` (or ``--sidecar``; or, when no file is there, its
copy in the container's metadata) gives the salt and every track's place in every
frame, so only the password is needed; each face is recovered
with its track's key and pasted back, and no pixel outside the faces' masks is
changed before encoding. Without any sidecar, ``--key-file`` (the one anonymize used)
lets the faces be found again by detection and tracking; only the tracks that match the
key file's face ledger are recovered, the rest left as they are and counted. Without a
ledger, ``--recover-redetected`` recovers every face found, anonymized or not. A wrong
password is not an error: it gives other faces. See docs/video.md.
"""

from __future__ import annotations

from typing import Sequence

from dbaf_jax import commands, keys
from dbaf_jax.faces import ledger
from dbaf_jax.inference.anonymizer import FaceAnonymizer, default_batch_size, load_photo_faces
from dbaf_jax.video import runner


def main(argv: Sequence[str] | None = None) -> runner.VideoReport:
    parser = commands.video_parser("python -m dbaf_jax.commands.recover_video", __doc__)
    parser.add_argument(
        "--sidecar",
        help="the anonymization's sidecar; default INPUT.dbaf.json, else the copy in INPUT's container metadata",
    )
    parser.add_argument(
        "--ignore-model-mismatch",
        action="store_true",
        help="recover a clip another model anonymized",
    )
    parser.add_argument(
        "--recover-redetected",
        action="store_true",
        help="with --key-file, no sidecar and no face ledger beside the key file: recover every face detection and "
        "tracking find, keys by order of first appearance; nothing checks that a face was anonymized, so one "
        "that never was is overwritten too",
    )
    args = parser.parse_args(argv)
    password = keys.read_password(args.password_file)
    record = keys.read_key_file(args.key_file) if args.key_file else None
    anonymizer = FaceAnonymizer(args.model, args.dtype)
    faces = load_photo_faces(
        anonymizer, args.detector, None, args.min_face_size, args.detectors, recovering=True
    )
    ledger_notes: list[str] = []  # a torn last line, said once
    report = runner.recover_video(
        anonymizer,
        faces,
        password,
        args.input,
        args.output,
        args.batch_size or default_batch_size(),
        args.overwrite,
        record,
        args.sidecar,
        commands.video_encoding(args),
        args.smooth,
        args.ignore_model_mismatch,
        args.recover_redetected,
        ledger.read_for_key_file(args.key_file, ledger_notes),
    )
    report.notes[:0] = ledger_notes
    report.print()
    return report


if __name__ == "__main__":
    commands.run_main(main)
