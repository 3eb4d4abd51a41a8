"""What a folder run did (written, skipped, passed over, notes, faces, clips) and its
exit status; every line printed through `errors.printable` (file names may hold
control characters)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Protocol

from dbaf_jax.core.errors import printable
from dbaf_jax.storage import images

# Exit statuses of a run that finished but did not do all it was asked (README): 1 is
# an error that stopped it, 2 a usage error (argparse).
EXIT_SKIPPED = 3  # an input was skipped (unreadable, unusable metadata, ...), or a clip ended before its declared end
EXIT_FACES_LEFT = 4  # a detected face was left as it was (--min-face-size)
EXIT_FALLBACK = 5  # with --strict: a face was hidden by the fallback instead of anonymized


class ClipOutcome(Protocol):
    """What one clip of a folder run did (`dbaf_jax.video.runner.VideoReport`)."""

    written: list[Path]  # the clip and its sidecar
    notes: list[str]
    hidden: int  # faces hidden by the fallback, over all frames

    @property
    def status(self) -> int: ...

    def summary(self) -> str: ...


@dataclasses.dataclass
class Report:
    """What a folder run did: written outputs, skipped inputs with reasons, files passed
    over, warnings, the clips (through the video path), and for photos the faces found,
    processed (anonymized or recovered), hidden by the fallback (`faces.paste.hide`) and
    left by the user's choice; `status` is the command's exit status."""

    written: list[Path] = dataclasses.field(default_factory=list)
    skipped: list[images.Skipped] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(
        default_factory=list
    )  # per photo: no face found, faces hidden or left
    faces: int = 0  # faces processed (anonymized or recovered) in photos
    photos: int = 0  # photos read (0 for aligned runs)
    faces_found: int = 0
    faces_hidden: int = 0
    faces_left: int = 0
    strict: bool = False  # the fallback counts as a failure (EXIT_FALLBACK)
    kept: list[Path] = dataclasses.field(
        default_factory=list
    )  # --resume: complete outputs of an earlier run
    operation: str = "anonymize"
    unverified: int = (
        0  # recovery without metadata: detections not matched to the key file's face ledger
    )
    passed_over: list[images.Skipped] = dataclasses.field(
        default_factory=list
    )  # files an earlier run wrote beside an output
    clips: list[ClipOutcome] = dataclasses.field(
        default_factory=list
    )  # the folder's clips, through the video path

    @property
    def status(self) -> int:
        """0 when every input was written and every face found was processed as asked;
        a run that wrote nothing from a folder that held files is never 0."""
        clips = [clip.status for clip in self.clips]
        if (
            self.skipped
            or EXIT_SKIPPED in clips
            or (self.passed_over and not self.written and not self.kept)
        ):
            return EXIT_SKIPPED
        if self.faces_left or EXIT_FACES_LEFT in clips:
            return EXIT_FACES_LEFT
        if self.strict and (self.faces_hidden or any(clip.hidden for clip in self.clips)):
            return EXIT_FALLBACK
        return 0

    def lines(self) -> list[str]:
        """The run's summary as the commands print it, one line each (`errors.printable`):
        warnings, notes, skipped and passed-over files with why, each clip's line, and
        the counts."""
        out = [f"warning: {warning}" for warning in self.warnings]
        out += [f"note: {note}" for note in self.notes]
        if self.skipped:
            out.append(f"skipped {len(self.skipped)} file(s):")
            out += [f"  {item.reason}" for item in self.skipped]
        if self.passed_over:
            out.append(
                f"passed over {len(self.passed_over)} file(s) an earlier run wrote beside its outputs:"
            )
            out += [f"  {item.reason}" for item in self.passed_over]
        out += [f"clip: {clip.summary()}" for clip in self.clips]
        out.append(self._counts())
        return [printable(line) for line in out]

    def _counts(self) -> str:
        if self.photos:
            done = "anonymized" if self.operation == "anonymize" else "recovered"
            resumed = f", {len(self.kept)} kept from an earlier run" if self.kept else ""
            return (
                f"summary: {self.photos} photo(s) read, {len(self.written) - self.clip_outputs} written{resumed}, {len(self.skipped)} skipped; "
                f"{self.faces_found} face(s) found, {self.faces} {done}, {self.faces_hidden} hidden by the fallback "
                f"(pixelated, irreversible), {self.faces_left} left as they were (--min-face-size)"
                + (
                    f", {self.unverified} detection(s) not verified as anonymized faces, left as they are"
                    if self.unverified
                    else ""
                )
                + (f"; {len(self.clips)} clip(s) processed (lines above)" if self.clips else "")
            )
        if self.clips:
            return f"summary: {len(self.clips)} clip(s) processed (lines above), no photo; {len(self.skipped)} file(s) skipped"
        return f"wrote {len(self.written)} image(s)"

    def print(self, out=None) -> None:
        for line in self.lines():
            print(line, file=out or sys.stderr)

    def add(self, other: Report) -> None:
        """Counts ``other`` (a run of more photos: the web page runs each file alone) into
        this report: its files, warnings and counts, each note once (the notes every
        file of a run has, which detectors ran, are the run's)."""
        for name in ("written", "skipped", "warnings", "kept", "passed_over", "clips"):
            getattr(self, name).extend(getattr(other, name))
        self.notes += [note for note in other.notes if note not in self.notes]
        for name in ("faces", "photos", "faces_found", "faces_hidden", "faces_left", "unverified"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def add_clip(self, clip: ClipOutcome) -> None:
        """A clip of the run, through the video path: its outputs, its notes (each once)
        and its outcome."""
        self.written += clip.written
        self.notes += [note for note in clip.notes if note not in self.notes]
        self.clips.append(clip)

    @property
    def clip_outputs(self) -> int:
        """How many of `written` the clips wrote (videos and their sidecars)."""
        return sum(len(clip.written) for clip in self.clips)
