"""Recover a video anonymized by ``python -m dbaf_jax.commands.anonymize_video``.

    python -m dbaf_jax.commands.recover_video --model DIR --password-file F ANON.mp4 OUT.mp4

The sidecar ``ANON.mp4.dbaf.json`` (or ``--sidecar``; or, when no file is there, its
copy in the container's metadata) gives the salt and every track's place in every
frame, so only the password is needed; each face is recovered
with its track's key and pasted back, and no pixel outside the faces' masks is
changed before encoding. Without any sidecar, ``--key-file`` (the one anonymize used)
lets the faces be found again by detection and tracking; only the tracks that match the
key file's face ledger are recovered, the rest left as they are and counted. Without a
ledger, ``--recover-redetected`` recovers every face found, anonymized or not. Clips
recover from the image: a model trained for another recovery (the converted DBAF
checkpoints record latent recovery) is refused unless ``--untrained-mode``, as
``recover`` refuses it for photos. A wrong password is not an error: it gives other
faces. See docs/video.md.
"""

from __future__ import annotations

import sys
from typing import Sequence

from dbaf_jax import commands
from dbaf_jax.core.errors import printable
from dbaf_jax.video import runner


def main(argv: Sequence[str] | None = None) -> runner.VideoReport:
    parser = commands.video_parser("python -m dbaf_jax.commands.recover_video", __doc__)
    parser.add_argument(
        "--sidecar",
        help="the anonymization's sidecar; default INPUT.dbaf.json, else the copy in INPUT's container metadata",
    )
    commands.flags(
        parser,
        {
            "--ignore-model-mismatch": "recover a clip another model anonymized",
            "--untrained-mode": "recover in a mode the model was not trained for (clips recover from the image; its results are not the original faces)",
            "--recover-redetected": "with --key-file, no sidecar and no face ledger beside the key file: recover "
            "every face detection and tracking find, keys by order of first appearance; nothing checks that a "
            "face was anonymized, so one that never was is overwritten too",
        },
    )
    args = parser.parse_args(argv)
    run = commands.start_run(args, "recover", commands.clip_run_settings(args))
    report = runner.recover_video(run, args.input, args.output, args.sidecar)
    report.notes[:0] = run.notes
    for warning in run.warnings:  # before the notes, as the photo commands print theirs
        print(printable(f"warning: {warning}"), file=sys.stderr)
    report.print()
    return report


if __name__ == "__main__":
    commands.run_main(main)
