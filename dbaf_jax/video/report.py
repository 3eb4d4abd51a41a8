"""What a clip's run did (`VideoReport`): its outputs, frames, tracks and faces, the
notes, and the exit status the video commands give."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from dbaf_jax.core.errors import printable
from dbaf_jax.inference.report import EXIT_FACES_LEFT, EXIT_SKIPPED


@dataclasses.dataclass
class VideoReport:
    written: list[Path] = dataclasses.field(default_factory=list)
    frames: int = 0
    tracks: int = 0
    faces: int = 0  # faces processed over all frames
    interpolated: int = 0  # of those, on frames where their track was not detected
    hidden: int = 0  # detections the model cannot take, pixelated (irreversible)
    left: int = 0  # detections below --min-face-size, left as they were
    notes: list[str] = dataclasses.field(default_factory=list)
    unverified: int = 0  # recovery without a sidecar: re-detected tracks the face ledger did not verify, left as they were
    short: bool = False  # the clip decoded fewer frames than its container declares (`clip.shortfall`, a note says so)

    @property
    def status(self) -> int:
        """The command's exit status: as for photos, `report.EXIT_SKIPPED` when part of the
        clip was not there to process, `report.EXIT_FACES_LEFT` when a face was left as it was."""
        return EXIT_SKIPPED if self.short else EXIT_FACES_LEFT if self.left else 0

    def summary(self) -> str:
        return (
            f"{self.written[0] if self.written else 'nothing written'}: processed {self.faces} face(s) in {self.frames} frame(s), "
            f"{self.tracks} track(s) ({self.interpolated} interpolated); {self.hidden} face(s) hidden by the fallback (pixelated,"
            f" irreversible), {self.left} left as they were (--min-face-size)"
            + (
                f"; {self.unverified} re-detected track(s) not verified as anonymized, left as they were"
                if self.unverified
                else ""
            )
        )

    def print(self, out=None) -> None:
        out = out or sys.stderr
        for note in self.notes:
            print(printable(f"note: {note}"), file=out)
        print(printable(self.summary()), file=out)
        for path in self.written:
            print(printable(f"wrote {path}"), file=out)
