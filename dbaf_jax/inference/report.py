"""What a folder run did (written, skipped, notes, faces) and its exit status."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from dbaf_jax import images


# Exit statuses of a run that finished but did not do all it was asked (README): 1 is
# an error that stopped it, 2 a usage error (argparse).
EXIT_SKIPPED = 3  # an input was skipped (unreadable, unusable metadata, ...)
EXIT_FACES_LEFT = 4  # a detected face was left as it was (--min-face-size)
EXIT_FALLBACK = 5  # with --strict: a face was hidden by the fallback instead of anonymized


@dataclasses.dataclass
class Report:
    """What a folder run did: written outputs, skipped inputs with reasons, warnings,
    and for photos the faces found, processed (anonymized or recovered), hidden by
    the fallback (`faces.paste.hide`) and left by the user's choice; `status` is the
    command's exit status."""

    written: list[Path] = dataclasses.field(default_factory=list)
    skipped: list[images.Skipped] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)  # per photo: no face found, faces hidden or left
    faces: int = 0  # faces processed (anonymized or recovered) in photos
    photos: int = 0  # photos read (0 for aligned runs)
    faces_found: int = 0
    faces_hidden: int = 0
    faces_left: int = 0
    strict: bool = False  # the fallback counts as a failure (EXIT_FALLBACK)
    kept: list[Path] = dataclasses.field(default_factory=list)  # --resume: complete outputs of an earlier run
    operation: str = "anonymize"
    unverified: int = 0  # recovery without metadata: detections not matched to the key file's face ledger

    @property
    def status(self) -> int:
        """0 when every input was written and every face found was processed as asked."""
        if self.skipped:
            return EXIT_SKIPPED
        if self.faces_left:
            return EXIT_FACES_LEFT
        if self.strict and self.faces_hidden:
            return EXIT_FALLBACK
        return 0

    def print(self, out=None) -> None:
        out = out or sys.stderr
        for warning in self.warnings:
            print(f"warning: {warning}", file=out)
        for note in self.notes:
            print(f"note: {note}", file=out)
        if self.skipped:
            print(f"skipped {len(self.skipped)} file(s):", file=out)
            for item in self.skipped:
                print(f"  {item.reason}", file=out)
        if self.photos:
            done = "anonymized" if self.operation == "anonymize" else "recovered"
            resumed = f", {len(self.kept)} kept from an earlier run" if self.kept else ""
            print(
                f"summary: {self.photos} photo(s) read, {len(self.written)} written{resumed}, {len(self.skipped)} skipped; "
                f"{self.faces_found} face(s) found, {self.faces} {done}, {self.faces_hidden} hidden by the fallback "
                f"(pixelated, irreversible), {self.faces_left} left as they were (--min-face-size)"
                + (f", {self.unverified} detection(s) not verified as anonymized faces, left as they are" if self.unverified else ""),
                file=out,
            )
        else:
            print(f"wrote {len(self.written)} image(s)", file=out)
