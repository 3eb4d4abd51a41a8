"""Running a web job: each dropped file through the runners the commands use.

A thin adapter, no anonymization of its own. The job's run is built as the commands
build theirs (`inference.run.Run.start`: the server's model and settings, the job's
password and key file); each photo goes through
`inference.photo_folders.anonymize_photo_folder` (or ``recover_photo_folder``) as a
folder of one, each clip through `video.runner.anonymize_video` (or ``recover_video``),
each with the job's run and the file's source and target.
Their reports are read as data: each file's line comes from its report's counts, and
every report is counted into one `inference.report.Report` of the job, whose summary
(`Report.lines`) is the one the folder commands print for a folder of the same files,
with the private paths replaced by the names the browser gave. The commands' rules
hold: a file that fails is named with why and has no result, faces the model cannot
take are hidden, and `Job.status` is the exit status the commands would give.
"""

from __future__ import annotations

import dataclasses
import sys
import traceback
from pathlib import Path

from dbaf_jax.core.errors import DbafError, InputError
from dbaf_jax.faces import ledger, photos
from dbaf_jax.inference.photo_folders import anonymize_photo_folder, recover_photo_folder
from dbaf_jax.inference.recovery_modes import UNTRAINED_FLAG
from dbaf_jax.inference.report import EXIT_SKIPPED, Report
from dbaf_jax.inference.run import Model, Run
from dbaf_jax.inference.settings import FOLDER_DEFAULTS, FolderRunSettings
from dbaf_jax.storage import file_kinds, images, keys
from dbaf_jax.video import runner
from dbaf_jax.web.jobs import KEY_FILE_NAME, Entry, Job, Output

KEY_CHOICES = ("none", "new", "file")  # no key file, a new one, the uploaded one
# The commands' flags the server takes for every run (serve.py): what the page's text calls them.
SERVER_FLAGS = (UNTRAINED_FLAG, "--allow-anonymized-input")
INTERNAL_ERROR = "internal error ({}); the server's log has the details"


@dataclasses.dataclass(frozen=True)
class Serving:
    """What every job of this server runs with: the model, loaded once with its face
    finders for both operations (`Model.load`, as the commands load it), the runs'
    settings (the batch size; whether outputs of anonymize are anonymized again, the
    server's --allow-anonymized-input), and whether photos and clips may be recovered in
    a mode the model was not trained for (the server's --untrained-mode)."""

    model: Model
    settings: FolderRunSettings = FOLDER_DEFAULTS
    untrained_mode: bool = False


def run_job(serving: Serving, job: Job, password: str, key_choice: str) -> None:
    """Runs every stored file of ``job`` with ``password`` (never kept: it lives in this
    call and its run only) and the key file ``key_choice`` names; sets each entry's
    state, message and outputs, and the job's summary and status. Never raises for a
    file's fault."""
    job.state = "running"
    total = Report(operation=job.operation)
    try:
        media = any(_is_media(entry) for entry in job.entries)
        run = _start(serving, job, password, key_choice) if media else None
        sidecars = _sidecars(job)
        for entry in job.entries:
            if run is not None and _is_media(entry):
                _run_file(run, job, entry, sidecars.get(entry.name), total)
            elif entry.state == "skipped":
                total.skipped.append(images.Skipped(Path(entry.name), entry.message))
        if run is not None:
            total.notes[:0], total.warnings[:0] = run.notes, run.warnings
            job.extras = _key_outputs(run.key_file)
    except Exception as err:  # the run as a whole cannot start (its key file, face ledger or recovery mode; or a bug, logged)
        if not isinstance(err, DbafError):
            traceback.print_exc(file=sys.stderr)
        job.error = (
            str(err) if isinstance(err, DbafError) else INTERNAL_ERROR.format(type(err).__name__)
        )
        for entry in job.entries:
            if entry.state in ("uploaded", "queued"):
                _fail(entry, total, job.error)
    job.summary = _for_the_page(job, "".join(line + "\n" for line in total.lines()))
    job.status = EXIT_SKIPPED if job.error else total.status
    job.error = _for_the_page(job, job.error)
    for entry in job.entries:
        entry.message = _for_the_page(job, entry.message)
    job.state = "done"


def _is_media(entry: Entry) -> bool:
    """A stored photo or clip: what the runners take."""
    return entry.kind in ("photo", "clip") and entry.stored is not None


def _start(serving: Serving, job: Job, password: str, key_choice: str) -> Run:
    """The job's run (`Run.start`): its key file the uploaded or a new one, else one
    fresh salt for all its files (each file is a runner call of its own), as a command
    run uses one."""
    key_file, record = None, None
    if key_choice == "file":
        if job.key_file is None:
            raise InputError("no key file was given; drop it again or choose another key option")
        key_file = job.key_file
    elif key_choice == "new" and job.operation == "anonymize":
        key_file = job.folder / "key" / KEY_FILE_NAME
        key_file.parent.mkdir(mode=0o700, exist_ok=True)
        keys.write_key_file(key_file, keys.new_key_record())
    elif job.operation == "anonymize":
        record = keys.new_key_record()
    return Run.start(
        job.operation,
        password,
        serving.model,
        serving.settings,
        key_file,
        record,
        untrained=serving.untrained_mode,
    )


def _key_outputs(key_file: Path | None) -> list[Output]:
    """The key file and its face ledger, when there is one, offered for download."""
    if key_file is None:
        return []
    kept = ledger.ledger_path(key_file)
    return [Output(KEY_FILE_NAME, key_file)] + ([Output(kept.name, kept)] if kept.is_file() else [])


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


def _run_file(run: Run, job: Job, entry: Entry, side: Path | None, total: Report) -> None:
    """One photo or clip through its runner, counted into ``total``; a failure is the
    file's alone (a bug is logged)."""
    entry.state = "working"
    try:
        if entry.kind == "photo":
            _run_photo(run, job, entry, total)
        else:
            _run_clip(run, job, entry, side, total)
    except DbafError as err:
        _fail(entry, total, str(err))
    except (
        Exception
    ) as err:  # a bug: the file is failed and named, the run goes on, the trace goes to the log
        traceback.print_exc(file=sys.stderr)
        _fail(entry, total, INTERNAL_ERROR.format(type(err).__name__))


def _run_photo(run: Run, job: Job, entry: Entry, total: Report) -> None:
    runs = anonymize_photo_folder if run.operation == "anonymize" else recover_photo_folder
    report = runs(run, entry.stored.parent, job.output_path(entry))
    total.add(report)
    stem = entry.name.rsplit(".", 1)[0]
    entry.outputs = [Output(f"{stem}.png", path) for path in report.written]
    done = "anonymized" if run.operation == "anonymize" else "recovered"
    if report.skipped:
        entry.state, entry.message = "skipped", "; ".join(item.reason for item in report.skipped)
    else:
        entry.state = "done"
        entry.message = "; ".join(
            [
                f"{report.faces_found} face(s) found, {report.faces} {done}, {report.faces_hidden} hidden by "
                f"the fallback, {report.faces_left} left as they were",
                *_own_notes(report.notes, run.faces),
            ]
        )


def _run_clip(run: Run, job: Job, entry: Entry, side: Path | None, total: Report) -> None:
    target = job.output_path(entry) / entry.stored.name
    if run.operation == "anonymize":
        report = runner.anonymize_video(run, entry.stored, target)
    else:
        report = runner.recover_video(run, entry.stored, target, side)
    total.add_clip(report)
    entry.outputs = [
        Output(entry.name if path == target else entry.name + path.name[len(target.name) :], path)
        for path in report.written
    ]
    entry.state = "done"
    done = "anonymized" if run.operation == "anonymize" else "recovered"
    entry.message = "; ".join(
        [
            f"{report.faces} face(s) {done} in {report.frames} frame(s), {report.tracks} track(s); "
            f"{report.hidden} hidden by the fallback, {report.left} left as they were",
            *_own_notes(report.notes, run.faces),
        ]
    )


def _own_notes(notes: list[str], faces: photos.PhotoFaces | None) -> list[str]:
    """A file's notes but those every file of the run has (which detectors ran): the
    summary says those once."""
    shared = (faces.describe(), *faces.notes) if faces is not None else ()
    return [note for note in notes if note not in shared]


def _fail(entry: Entry, report: Report, why: str) -> None:
    entry.state, entry.message, entry.outputs = "failed", why, []
    report.skipped.append(images.Skipped(Path(entry.name), why))


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
