"""Anonymize every face of a video with a password, one key per tracked person.

    python -m dbaf_jax.commands.anonymize_video --model DIR --password-file F IN.mp4 OUT.mp4

The face detectors (``--detectors``, as for photos) find the faces of every frame; ByteTrack
links them into tracks, each anonymized with its own key (password + the clip's salt +
track number) so a person keeps one face while in view; frames a track misses are
interpolated, never shown as they were, and landmarks are smoothed along each track
(``--smooth``). The output keeps the size, frame times, rotation and audio (copied);
its codec is ``--codec``/``--crf``/``--pix-fmt`` (H.264, CRF 18, yuv420p by default).
``OUT.mp4.dbaf.json`` beside it records the tracks and the key record (never the
password) for ``python -m dbaf_jax.commands.recover_video``; with ``--key-file K`` the tracks'
faces also go to K's face ledger (``K.faces.jsonl``), which lets recovery verify the
faces it finds again in a copy that lost the sidecar. A clip that recovery would refuse
(its sidecar breaks the bounds recover_video holds sidecars to) is not written: the run
fails naming why. A clip that is already an output of anonymize (a sidecar beside it or in
its container) is refused unless ``--allow-anonymized-input``. See docs/video.md.
"""

from __future__ import annotations

from typing import Sequence

from dbaf_jax import commands
from dbaf_jax.video import runner


def main(argv: Sequence[str] | None = None) -> runner.VideoReport:
    parser = commands.video_parser("python -m dbaf_jax.commands.anonymize_video", __doc__)
    commands.flags(
        parser,
        {
            "--allow-anonymized-input": "anonymize a clip that is already an output of anonymize (its "
            "sidecar beside it or in its container; the new copy's sidecar cannot recover the original)"
        },
    )
    args = parser.parse_args(argv)
    run = commands.start_run(args, "anonymize", commands.clip_run_settings(args))
    report = runner.anonymize_video(run, args.input, args.output)
    report.print()
    return report


if __name__ == "__main__":
    commands.run_main(main)
