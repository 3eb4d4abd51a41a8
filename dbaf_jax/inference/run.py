"""One anonymize or recover run: the model and its face finder, the password and the key
record it derives the keys from, the key file's face ledger, the settings, and what the
run says once (which recovery it uses). The commands and the web page build it in one
place (`Run.start`), the runners take it with their source and target
(`photo_folders`, `aligned_folders`, `video.runner`, `video.folders.FolderClips` and the
--ray runs of `distributed.runs`).

The model is loaded once (`Model.load`: ``model.json`` read and the weights hashed once,
the detectors' and the parser's too, shared by both operations' face finders): a command
loads it for its one run, the web page when the server starts, for every job it runs.
The password lives in the run only (never printed: it is left out of the run's repr).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Mapping

from dbaf_jax.faces import ledger, photos
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.inference.recovery_modes import recovery_mode
from dbaf_jax.inference.settings import FOLDER_DEFAULTS, FaceFinding, FolderRunSettings, RunSettings
from dbaf_jax.storage import keys

OPERATIONS = ("anonymize", "recover")
DEFAULT_FINDING = (
    FaceFinding()
)  # the commands' defaults: every installed default detector, box masks


@dataclasses.dataclass(frozen=True)
class Model:
    """What runs are made with, loaded once: the anonymizer and, for photos and clips, its
    face finder of each operation (anonymize hides low-confidence detections, recover
    takes them as faces); none for aligned crops."""

    anonymizer: FaceAnonymizer
    finders: Mapping[str, photos.PhotoFaces] = dataclasses.field(default_factory=dict)

    @classmethod
    def load(
        cls,
        model_dir: str | Path,
        dtype: str = "float32",
        without_manifest: bool = False,
        finding: FaceFinding | None = DEFAULT_FINDING,
        operations: tuple[str, ...] = OPERATIONS,
    ) -> Model:
        """The model directory's anonymizer in ``dtype`` and, unless ``finding`` is None
        (aligned crops), a face finder for each of ``operations`` (`FaceFinding.finders`:
        the detectors and the parser loaded once for all of them)."""
        anonymizer = FaceAnonymizer(model_dir, dtype, without_manifest=without_manifest)
        finders = {} if finding is None else finding.finders(anonymizer, operations)
        return cls(anonymizer, finders)


@dataclasses.dataclass(frozen=True)
class Run:
    """One anonymize or recover run (``operation``): the anonymizer, the face finder of
    that operation (None for aligned crops), the password (left out of the repr), the
    key record (a key file's; or, without one, the salt every file of the run shares,
    None: the runner makes one, or takes an earlier run's when resuming), the key file
    (None without one), the face ledger file anonymize appends each file's faces to (the
    key file's, `ledger.ledger_path`; None without a key file), recovery's entries of the
    key file's face ledger (None without a ledger), the settings (`FolderRunSettings` for
    a folder run, `video.settings.ClipRunSettings` for a clip's; the video runner takes
    any, with the video commands' defaults for the rest), the recovery mode (None when
    anonymizing), and the notes and warnings the run's report opens with (the recovery
    mode, a torn ledger line)."""

    operation: str
    anonymizer: FaceAnonymizer
    faces: photos.PhotoFaces | None
    password: str = dataclasses.field(repr=False)
    record: keys.KeyRecord | None = None
    key_file: Path | None = None
    ledger_file: Path | None = None
    face_ledger: list[ledger.Entry] | None = None
    settings: RunSettings = FOLDER_DEFAULTS
    recovery: str | None = None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @classmethod
    def start(
        cls,
        operation: str,
        password: str,
        model: Model | Callable[[], Model],
        settings: RunSettings = FOLDER_DEFAULTS,
        key_file: str | Path | None = None,
        record: keys.KeyRecord | None = None,
        *,
        mode: str | None = None,
        aligned: bool = False,
        untrained: bool = False,
    ) -> Run:
        """The run, read in this order: the key file's record (else ``record``) and,
        recovering, its face ledger; then ``model`` (loaded, or what loads it: a command
        loads it after the key file, so that a mistyped one fails in a second); then,
        recovering, the recovery mode (`recovery_mode`: ``mode`` asked for, ``aligned``
        crops, ``untrained`` allowing a mode the model was not trained for, else
        ConfigError naming the flag)."""
        if operation not in OPERATIONS:
            raise ValueError(f"operation must be one of {OPERATIONS}, got {operation!r}")
        key_path = Path(key_file) if key_file is not None else None
        if key_path is not None:
            record = keys.read_key_file(key_path)
        recovering = operation == "recover"
        ledger_notes: list[str] = []  # a torn last line, said once
        face_ledger = ledger.read_for_key_file(key_path, ledger_notes) if recovering else None
        appended = ledger.ledger_path(key_path) if key_path is not None and not recovering else None
        loaded = model if isinstance(model, Model) else model()
        notes: tuple[str, ...] = ()
        warnings: tuple[str, ...] = ()
        recovery = None
        if recovering:
            recovery, mode_note, warning = recovery_mode(
                loaded.anonymizer, mode, aligned, untrained
            )
            notes, warnings = (mode_note,), (warning,) if warning else ()
        return cls(
            operation,
            loaded.anonymizer,
            loaded.finders.get(operation),
            password,
            record,
            key_path,
            appended,
            face_ledger,
            settings,
            recovery,
            (*notes, *ledger_notes),
            warnings,
        )

    @property
    def folder_settings(self) -> FolderRunSettings:
        """The settings as a folder run takes them; TypeError for a clip run's."""
        if not isinstance(self.settings, FolderRunSettings):
            raise TypeError(
                f"a folder run takes FolderRunSettings, not {type(self.settings).__name__}"
            )
        return self.settings

    @property
    def finder(self) -> photos.PhotoFaces:
        """The face finder of a photo or clip run; TypeError for an aligned-crop run's (none)."""
        if self.faces is None:
            raise TypeError(f"this {self.operation} run has no face finder (aligned crops)")
        return self.faces
