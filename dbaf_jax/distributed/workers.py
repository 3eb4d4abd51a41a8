"""What runs on the Ray workers: the photos' detection tasks, the model actors, and the
clip tasks. Each calls the one-machine code on its part of the run.

Between the stages travel `Job`s and `Work`s (paths, the faces found: their transforms
and boxes, the key record they are keyed under, the photo's tag), never decoded
pixels: the detection task decodes a photo to find its faces, and the model actor
decodes it again to crop, run and paste them back (`photo_pipeline.run_photos`, the
one-machine loop, on the actor's batch of photos). The actor writes every output into
the run's staging folder under its own relative name and answers one `PhotoStatus` per
photo: what was written and the photo's counts, notes and face-ledger entries, which
the driver alone appends (`runs`). A clip is one task (`run_clip`): the folder run's
clip path (`video.folders.FolderClips`) into the staging folder, its ledger entries
to a ledger of its own that the task reads back and answers.

Each worker process loads what it needs once (`compilation_cache.enable` first, so its
programs compile as the command's would): the face finder in a detection task's
process (`_worker_faces`), the model and finder in an actor. A model actor checks that
the model it loaded has the driver's fingerprint, so a node with another model under
the same path stops the run instead of writing outputs that name the wrong model.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np

from dbaf_jax.core import compilation_cache
from dbaf_jax.core.errors import ConfigError
from dbaf_jax.faces import ledger, photos
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.inference.photo_folders import ledger_entries, recovery_found
from dbaf_jax.inference.photo_pipeline import Photo, photo_notes, run_photos
from dbaf_jax.inference.planning import Plan, crop_path
from dbaf_jax.inference.report import Report
from dbaf_jax.inference.run import Run
from dbaf_jax.inference.settings import FaceFinding, FolderRunSettings
from dbaf_jax.storage import images, keys
from dbaf_jax.video.folders import FolderClips

COLUMN = "work"  # the one column of every stage's rows: a pickled Job, Work or PhotoStatus


@dataclasses.dataclass(frozen=True)
class ModelFiles:
    """What a face finder reads of the run's model (`FaceFinding.load`): where the model
    lies (the detectors' default weights are in it) and its input size (the crops'
    side). A detection task builds its finder from this, without loading the model."""

    model_dir: Path
    input_size: int


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """The run's model as the actors load it: its folder, compute dtype, whether a folder
    without model.json may run, and the fingerprint the driver's copy has."""

    model_dir: Path
    dtype: str
    without_manifest: bool
    fingerprint: str

    def load(self) -> FaceAnonymizer:
        """The model, on this worker's devices; ConfigError when it is not the driver's."""
        compilation_cache.enable()
        anonymizer = FaceAnonymizer(
            self.model_dir, self.dtype, without_manifest=self.without_manifest
        )
        if anonymizer.fingerprint != self.fingerprint:
            raise ConfigError(
                f"{self.model_dir}: a Ray worker loaded a model with fingerprint {anonymizer.fingerprint}, "
                f"the driver {self.fingerprint}: every node must hold the same model at that path"
            )
        return anonymizer


@functools.cache
def _worker_faces(finding: FaceFinding, model: ModelFiles, recovering: bool) -> photos.PhotoFaces:
    """The face finder of a detection task's process, built once per process."""
    compilation_cache.enable()
    return finding.load(model, recovering)  # type: ignore[arg-type] - reads model_dir and input_size


@dataclasses.dataclass(frozen=True)
class Job:
    """A photo to process: its path, where its output is staged, and for recovery its
    checked metadata (None: none; found again by detection with the key file)."""

    source: Path
    staged: Path
    made: Any = None  # metadata.Anonymization | None


@dataclasses.dataclass(frozen=True)
class Work:
    """A photo found (a detection task's answer): the faces to process, the key record
    they are keyed under and its `Photo` tag; the decoder's note; or why it is skipped."""

    job: Job
    found: photos.FoundFaces | None = None
    record: keys.KeyRecord | None = None
    tag: Photo | None = None
    note: str | None = None
    skipped: str | None = None
    seconds: float = 0.0  # decoding and detection


@dataclasses.dataclass
class PhotoStatus:
    """One input's row back to the driver: the staged outputs written (the photo, then
    its crops), or why it was skipped; its notes, its counts (as `Report` counts them)
    and the face-ledger entries of its anonymized faces."""

    source: Path
    outputs: list[Path] = dataclasses.field(default_factory=list)
    skipped: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    faces: int = 0
    found: int = 0
    hidden: int = 0
    left: int = 0
    unverified: int = 0
    entries: list[ledger.Entry] = dataclasses.field(default_factory=list)
    # Where its time went: its detection task's, and its share of its model batch's.
    detection_seconds: float = 0.0
    model_seconds: float = 0.0
    start_seconds: float = (
        0.0  # its actor's start (the model and finder loaded), on its first row only
    )


@dataclasses.dataclass(frozen=True)
class Finder:
    """A detection task's work on one photo (`__call__`): decode it, then anonymize's
    detection (``meta``, ``record``: the run's) or recovery's (`recovery_found`: its
    metadata, else detection verified against the key file's ledger ``ledger_ref``)."""

    finding: FaceFinding
    model: ModelFiles
    max_pixels: int
    recovering: bool
    meta: dict | None = None
    record: keys.KeyRecord | None = None
    ledger_ref: Any = None  # a Ray object reference to the key file's ledger entries, or None

    def __call__(self, job: Job) -> Work:
        start = time.perf_counter()
        work = self._found(job)
        return dataclasses.replace(work, seconds=time.perf_counter() - start)

    def _found(self, job: Job) -> Work:
        faces = _worker_faces(self.finding, self.model, self.recovering)
        try:
            photo, note = images.read_photo_noted(job.source, max_pixels=self.max_pixels)
        except ValueError as err:  # as `run_photos` skips an unreadable photo
            return Work(job, skipped=str(err))
        if not self.recovering:
            found = faces.find(photo)
            return Work(
                job, found, self.record, Photo(job.source, self.meta, found.too_small), note
            )
        face_ledger = _ledger(self.ledger_ref) if self.ledger_ref is not None else None
        recovered = recovery_found(
            faces, job.source, photo, job.made, self.record, face_ledger, self.model.input_size
        )
        if isinstance(recovered, images.Skipped):
            return Work(job, note=note, skipped=recovered.reason)
        found, record, tag = recovered
        return Work(job, found, record, tag, note)


_LEDGERS: dict[str, list[ledger.Entry]] = {}


def _ledger(ref: Any) -> list[ledger.Entry]:
    """The key file's ledger entries, fetched once per process (not with every task)."""
    import ray

    key = ref.hex()
    if key not in _LEDGERS:
        _LEDGERS[key] = ray.get(ref)
    return _LEDGERS[key]


def detect(batch: dict[str, np.ndarray], find: Finder) -> dict[str, list[bytes]]:
    """Ray Data's detection stage: each `Job` of ``batch`` found (`Finder`)."""
    return {COLUMN: [pickle.dumps(find(pickle.loads(blob))) for blob in batch[COLUMN]]}


class PhotoModel:
    """A model actor: the model and face finder loaded once, then each batch of found
    photos run through `run_photos` into the staging folder ``staging``.
    ``seeds``: the seed of each key record the photos are keyed under, derived on the
    driver; ``with_ledger``: anonymize with a key file (each photo's entries answered)."""

    def __init__(
        self,
        model: ModelSpec,
        finding: FaceFinding,
        recovering: bool,
        seeds: dict[keys.KeyRecord, bytes],
        settings: FolderRunSettings,
        staging: Path,
        with_ledger: bool,
    ):
        start = time.perf_counter()
        self.anonymizer = model.load()
        self.faces = finding.load(self.anonymizer, recovering)
        self.recovering, self.seeds, self.settings = recovering, seeds, settings
        self.staging, self.with_ledger = staging, with_ledger
        self.step = self.anonymizer.recover_faces if recovering else self.anonymizer.anonymize_faces
        self.start_seconds = time.perf_counter() - start  # said once, with the first row

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[bytes]]:
        start = time.perf_counter()
        works: list[Work] = [pickle.loads(blob) for blob in batch[COLUMN]]
        statuses = {
            work.job.source: PhotoStatus(
                work.job.source,
                skipped=work.skipped,
                notes=[work.note] if work.note else [],
                detection_seconds=work.seconds,
            )
            for work in works
        }
        todo = {work.job.source: work for work in works if work.skipped is None}
        report = Report()

        def prepare(source: Path, photo: np.ndarray):
            work = todo[source]
            assert work.found is not None and work.record is not None
            return self.anonymizer.photo_item(
                photo, self.seeds[work.record], self.faces, work.found, work.tag
            )

        def made(done, result) -> None:
            tag: Photo = done.item.tag
            status = statuses[tag.source]
            staged = todo[tag.source].job.staged
            status.outputs = [staged] + (
                [crop_path(staged, face.index) for face in result.faces]
                if self.settings.save_crops
                else []
            )
            status.notes += photo_notes(tag.source, result, tag.meta)
            status.faces, status.found = len(result.faces), result.found
            status.hidden, status.left = len(result.hidden), len(result.too_small)
            status.unverified = result.unverified
            if self.with_ledger and result.faces:
                status.entries = ledger_entries(self.faces, done, result)

        plan = Plan(
            self.staging,
            self.staging,
            list(todo),
            {source: work.job.staged for source, work in todo.items()},
            [],
            [],
        )
        run_photos(
            plan,
            list(todo),
            prepare,
            self.step,
            self.faces,
            self.anonymizer.padded_size(self.settings.batch),
            report,
            "recover" if self.recovering else "anonymize",
            self.settings.save_crops,
            True,  # the staging folder is the run's own: a batch run twice writes its files again
            made,
            self.settings.max_pixels,
        )
        for skipped in report.skipped:  # unreadable here though the detection task read it
            statuses[skipped.path].skipped = skipped.reason
            statuses[skipped.path].outputs = []
        share = (time.perf_counter() - start) / len(works)
        for status in statuses.values():
            status.model_seconds = share
        statuses[works[0].job.source].start_seconds, self.start_seconds = self.start_seconds, 0.0
        return {COLUMN: [pickle.dumps(statuses[work.job.source]) for work in works]}


@dataclasses.dataclass
class ClipStatus:
    """A clip task's answer: the report of the folder run's clip path on this one clip
    (its written files staged) and the face-ledger entries its anonymization made."""

    source: Path
    report: Report
    entries: list[ledger.Entry]


def run_clip(
    model: ModelSpec,
    finding: FaceFinding,
    run: dict[str, Any],
    source: Path,
    staged: Path,
    own_ledger: Path | None,
    record: keys.KeyRecord | None,
    redo: bool,
) -> ClipStatus:
    """A clip task: the clip ``source`` through `FolderClips` (of the folder's run, built
    from ``run``: its fields but the model, the finder and the ledger file) into
    ``staged``, its ledger entries (anonymize with a key file) appended to
    ``own_ledger``, emptied first (a retried task starts again) and read back."""
    anonymizer = model.load()
    recovering = run["operation"] == "recover"
    if own_ledger is not None:
        own_ledger.unlink(missing_ok=True)
    faces = finding.load(anonymizer, recovering)
    folder_clips = FolderClips(
        Run(anonymizer=anonymizer, faces=faces, ledger_file=own_ledger, **run)
    )
    plan = Plan(source.parent, staged.parent, [], {}, [], [], [source], {source: staged})
    report = Report(operation=run["operation"])
    folder_clips.run(plan, report, record=record, redo=redo)
    entries = ledger.read(own_ledger) if own_ledger is not None and own_ledger.exists() else []
    return ClipStatus(source, report, entries)
