"""Running a web job: each dropped file through the runners the commands use.

A thin adapter, no anonymization of its own: a photo goes through
`inference.photo_folders.anonymize_photo_folder` (or ``recover_photo_folder``) as a
folder of one, a clip through `video.runner.anonymize_video` (or ``recover_video``),
with the key record and face ledger the page chose. The run's summary is the command
line's (`inference.report.Report.print` and `video.runner.VideoReport.print`) with the
private paths replaced by the names the browser gave; its rules hold: a file that fails
is named with why and has no result, faces the model cannot take are hidden, and
`Job.status` is the exit status the commands would give.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import sys
import traceback
from pathlib import Path
from typing import Any

from dbaf_jax import file_kinds, images, keys
from dbaf_jax.errors import ConfigError, DbafError, InputError
from dbaf_jax.faces import ledger, photos
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.inference.photo_folders import anonymize_photo_folder, recover_photo_folder
from dbaf_jax.inference.recovery_modes import UNTRAINED_FLAG, recovery_mode
from dbaf_jax.inference.report import EXIT_SKIPPED, Report
from dbaf_jax.inference.settings import FolderRunSettings
from dbaf_jax.video import runner
from dbaf_jax.video.settings import ClipRunSettings
from dbaf_jax.web.jobs import KEY_FILE_NAME, Entry, Job, Output

KEY_CHOICES = ("none", "new", "file")  # no key file, a new one, the uploaded one
# The commands' flags the server takes for every run (serve.py): what the page's text calls them.
SERVER_FLAGS = (UNTRAINED_FLAG, "--allow-anonymized-input")


@dataclasses.dataclass
class Model:
    """What every job runs with: the loaded model, its face finders for anonymizing
    (low-confidence detections hidden) and for recovering (taken as faces), as the
    commands load them (`FaceFinding.load`), the runs' settings (the batch size; whether
    outputs of anonymize are anonymized again, the server's --allow-anonymized-input), and
    whether photos and clips may be recovered in a mode the model was not trained for
    (the server's --untrained-mode)."""

    anonymizer: FaceAnonymizer
    faces: photos.PhotoFaces
    recover_faces: photos.PhotoFaces
    settings: FolderRunSettings = FolderRunSettings()
    untrained_mode: bool = False


def run_job(model: Model, job: Job, password: str, key_choice: str) -> None:
    """Runs every stored file of ``job`` with ``password`` (never kept: it lives in this
    call only) and the key file ``key_choice`` names; sets each entry's state, message and
    outputs, and the job's summary and status. Never raises for a file's fault."""
    job.state = "running"
    photo_report = Report(operation=job.operation)
    clip_reports: list[runner.VideoReport] = []
    try:
        record, key_file = _key_record(job, key_choice)
        notes, refusal = _recovery_mode(model, job, photo_report)
        # Recovery reads the key file's face ledger once (a torn last line is said once, as the commands say it).
        face_ledger = (
            ledger.read_for_key_file(key_file, notes) if job.operation == "recover" else None
        )
        job_keys = _JobKeys(password, record, key_file, face_ledger)
        sidecars = _sidecars(job)
        for entry in job.entries:
            if entry.kind in ("photo", "clip") and refusal:
                _fail(entry, photo_report, refusal)
            elif entry.kind in ("photo", "clip") and entry.stored is not None:
                entry.state = "working"
                try:
                    if entry.kind == "photo":
                        _run_photo(model, job, entry, job_keys, photo_report)
                    else:
                        clip_reports.append(
                            _run_clip(model, job, entry, job_keys, sidecars.get(entry.name))
                        )
                except DbafError as err:
                    _fail(entry, photo_report, str(err))
                except Exception as err:  # a bug: the file is failed and named, the run goes on, the trace goes to the log
                    traceback.print_exc(file=sys.stderr)
                    _fail(
                        entry,
                        photo_report,
                        f"internal error ({type(err).__name__}); the server's log has the details",
                    )
            elif entry.state == "skipped":
                photo_report.skipped.append(images.Skipped(Path(entry.name), entry.message))
        photo_report.notes[:0] = notes
        if key_file is not None:
            kept = ledger.ledger_path(key_file)
            job.extras = [Output(KEY_FILE_NAME, key_file)] + (
                [Output(kept.name, kept)] if kept.is_file() else []
            )
    except (
        Exception
    ) as err:  # the run as a whole cannot start (its key file or face ledger; or a bug, logged)
        if not isinstance(err, DbafError):
            traceback.print_exc(file=sys.stderr)
        job.error = (
            str(err)
            if isinstance(err, DbafError)
            else f"internal error ({type(err).__name__}); the server's log has the details"
        )
        for entry in job.entries:
            if entry.state in ("uploaded", "queued"):
                _fail(entry, photo_report, job.error)
    job.summary = _for_the_page(job, _summary(photo_report, clip_reports))
    job.status = (
        EXIT_SKIPPED
        if job.error
        else max([photo_report.status, *(report.status for report in clip_reports)])
    )
    job.error = _for_the_page(job, job.error)
    for entry in job.entries:
        entry.message = _for_the_page(job, entry.message)
    job.state = "done"


def _key_record(job: Job, key_choice: str) -> tuple[keys.KeyRecord, Path | None]:
    """The run's key record and the key file beside which its face ledger lives (None
    without a key file): one fresh salt for the run, as the commands use, or the uploaded
    or a new key file's."""
    if key_choice == "file":
        if job.key_file is None:
            raise InputError("no key file was given; drop it again or choose another key option")
        return keys.read_key_file(job.key_file), job.key_file
    if key_choice == "new" and job.operation == "anonymize":
        path = job.folder / "key" / KEY_FILE_NAME
        path.parent.mkdir(mode=0o700, exist_ok=True)
        record = keys.new_key_record()
        keys.write_key_file(path, record)
        return record, path
    return keys.new_key_record(), None


def _recovery_mode(model: Model, job: Job, report: Report) -> tuple[list[str], str]:
    """Recovering photos or clips: (the recover commands' note on the mode, "") with its
    warning added to ``report``, or ([], why) when the commands would refuse the mode
    (photos and clips then fail with why)."""
    if job.operation != "recover" or not any(
        entry.kind in ("photo", "clip") for entry in job.entries
    ):
        return [], ""
    try:
        _, note, warning = recovery_mode(model.anonymizer, None, False, model.untrained_mode)
    except ConfigError as err:
        return [], str(err)
    report.warnings += [warning] if warning else []
    return [note], ""


def _sidecars(job: Job) -> dict[str, Path]:
    """The dropped sidecars by the name of the clip they belong to, each put beside its
    clip's stored file, where a clip's sidecar lies (so that anonymize sees the clip is
    its own output, as the folder commands do); one without its clip among the files is
    skipped and said."""
    clips = {entry.name: entry for entry in job.entries if entry.kind == "clip"}
    found = {}
    for entry in job.entries:
        if entry.kind != "sidecar" or entry.stored is None:
            continue
        clip_name = entry.name[: -len(file_kinds.SIDECAR_SUFFIX)]
        clip = clips.get(clip_name)
        if clip is not None and clip.stored is not None:
            beside = clip.stored.with_name(clip.stored.name + file_kinds.SIDECAR_SUFFIX)
            entry.stored = entry.stored.replace(beside)
            found[clip_name] = entry.stored
            entry.state, entry.message = (
                "done",
                f"the sidecar of the clip {clip_name}: read with it",
            )
        else:
            entry.state, entry.message = (
                "skipped",
                f"{entry.name}: a clip's sidecar, but no clip named {clip_name} was dropped with it",
            )
    return found


@dataclasses.dataclass
class _JobKeys:
    """What a job's files are keyed with: the password (this call only), the run's key
    record, the key file beside which the face ledger lives (None without one) and, when
    recovering, that ledger's entries."""

    password: str
    record: keys.KeyRecord
    key_file: Path | None
    face_ledger: list[ledger.Entry] | None

    def for_run(self, model: Model, operation: str) -> tuple[photos.PhotoFaces, Any, Any]:
        """(face finder, key record, face ledger) of an ``operation`` run: anonymize with
        the run's record, appending to the key file's ledger if any; recovery finds faces
        again only with a key file's record, verified against its ledger's entries."""
        if operation == "anonymize":
            with_file = ledger.ledger_path(self.key_file) if self.key_file is not None else None
            return model.faces, self.record, with_file
        with_key = self.record if self.key_file is not None else None
        return model.recover_faces, with_key, self.face_ledger


def _run_photo(model: Model, job: Job, entry: Entry, job_keys: _JobKeys, total: Report) -> None:
    run = anonymize_photo_folder if job.operation == "anonymize" else recover_photo_folder
    faces, *keyed = job_keys.for_run(model, job.operation)  # keyed: the record, the ledger
    where = (entry.stored.parent, job.output_path(entry))
    report = run(model.anonymizer, faces, job_keys.password, *where, model.settings, *keyed)
    for name in ("written", "skipped", "warnings"):
        getattr(total, name).extend(getattr(report, name))
    total.notes += [note for note in report.notes if note not in total.notes]
    for name in ("faces", "photos", "faces_found", "faces_hidden", "faces_left", "unverified"):
        setattr(total, name, getattr(total, name) + getattr(report, name))
    stem = entry.name.rsplit(".", 1)[0]
    entry.outputs = [Output(f"{stem}.png", path) for path in report.written]
    done = "anonymized" if job.operation == "anonymize" else "recovered"
    if report.skipped:
        entry.state, entry.message = "skipped", "; ".join(item.reason for item in report.skipped)
    else:
        entry.state = "done"
        entry.message = "; ".join(
            [
                f"{report.faces_found} face(s) found, {report.faces} {done}, {report.faces_hidden} hidden by "
                f"the fallback, {report.faces_left} left as they were",
                *_own_notes(report.notes, faces),
            ]
        )


def _run_clip(
    model: Model, job: Job, entry: Entry, job_keys: _JobKeys, side: Path | None
) -> runner.VideoReport:
    target = job.output_path(entry) / entry.stored.name
    settings = ClipRunSettings.of_run(model.settings)
    run = (
        runner.anonymize_video
        if job.operation == "anonymize"
        else functools.partial(runner.recover_video, sidecar_path=side)
    )
    faces, *keyed = job_keys.for_run(model, job.operation)  # keyed: the record, the ledger
    where = (entry.stored, target)
    report = run(model.anonymizer, faces, job_keys.password, *where, settings, *keyed)
    entry.outputs = [
        Output(entry.name if path == target else entry.name + path.name[len(target.name) :], path)
        for path in report.written
    ]
    entry.state = "done"
    done = "anonymized" if job.operation == "anonymize" else "recovered"
    entry.message = "; ".join(
        [
            f"{report.faces} face(s) {done} in {report.frames} frame(s), {report.tracks} track(s); "
            f"{report.hidden} hidden by the fallback, {report.left} left as they were",
            *_own_notes(report.notes, faces),
        ]
    )
    return report


def _own_notes(notes: list[str], faces: photos.PhotoFaces) -> list[str]:
    """A file's notes but those every file of the run has (which detectors ran): the
    summary says those once."""
    return [note for note in notes if note not in (faces.describe(), *faces.notes)]


def _fail(entry: Entry, report: Report, why: str) -> None:
    entry.state, entry.message, entry.outputs = "failed", why, []
    report.skipped.append(images.Skipped(Path(entry.name), why))


def _summary(photo_report: Report, clip_reports: list[runner.VideoReport]) -> str:
    """The commands' summaries of the run's photos and clips, each note once (every
    file is a run of its own; which detectors ran is the run's), without the photo
    report's "wrote 0 image(s)" when only clips ran."""
    out = io.StringIO()
    photo_report.print(out)
    if not photo_report.photos and clip_reports:
        out = io.StringIO(
            "".join(
                line for line in out.getvalue().splitlines(True) if not line.startswith("wrote ")
            )
        )
        out.seek(0, io.SEEK_END)
    said = set(photo_report.notes)
    for report in clip_reports:
        notes = [note for note in report.notes if note not in said]
        said.update(notes)
        dataclasses.replace(report, notes=notes).print(out)
    return out.getvalue()


def _for_the_page(job: Job, text: str) -> str:
    """``text`` as the page shows it: every private path of ``job`` replaced by the
    browser's name for it, and the commands' flags the server takes for every run
    (`SERVER_FLAGS`) named as the server's."""
    names = {}
    for entry in job.entries:
        if entry.stored is not None:
            names[str(entry.stored)] = entry.name
        names.update((str(output.path), output.name) for output in entry.outputs)
    names.update((str(extra.path), extra.name) for extra in job.extras)
    for path in sorted(names, key=len, reverse=True):
        text = text.replace(path, names[path])
    for flag in SERVER_FLAGS:
        text = text.replace(f"pass {flag}", f"start the server with {flag}")
    return text.replace(str(job.folder), "(this run)")
