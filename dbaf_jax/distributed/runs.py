"""The driver's side of a Ray run: `RayRuns` has the folder runners' signatures
(`photo_folders.anonymize_photo_folder`, `recover_photo_folder`), so a command hands
the same run (`inference.run.Run`: model, finder, password, key record, ledger,
settings), folders and clips to either.

What the driver keeps of one machine: it plans the run with the one-machine planning
(`planned_anonymization`, `planned_recovery`: the outputs, --resume's kept outputs and
the run's key record, drawn once here; recovery's checked metadata), derives the seeds
of the key records once and hands them to the model actors, so a batch run twice
writes the same bytes. Every node is checked to see the run's paths before any work
(`cluster.check_paths`). Photos stream through Ray Data (detection tasks, then the
model actors: `workers`); each answers one status row, and the driver, alone, appends
its face-ledger entries and then moves its outputs from the staging folder into place
(`staging`), showing progress per input. A row that comes twice (a retried batch) is
taken once. The clips follow, one task each. The report is counted in the plan's
order from the rows, so its summary and exit status are the one-machine run's; an
input that no row came back for is named and counted as skipped, never lost.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import pickle
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

from tqdm import tqdm

from dbaf_jax import commands
from dbaf_jax.core.errors import DbafError, OutputWriteError, printable
from dbaf_jax.distributed import cluster, workers
from dbaf_jax.distributed.options import ray_options
from dbaf_jax.distributed.staging import Staging, clear_stale
from dbaf_jax.faces import ledger, metadata
from dbaf_jax.inference.anonymizer import ACCELERATOR_BATCH, CPU_BATCH, FaceAnonymizer
from dbaf_jax.inference.photo_folders import planned_anonymization, planned_recovery
from dbaf_jax.inference.planning import Plan, checked_anonymizations
from dbaf_jax.inference.report import Report
from dbaf_jax.inference.run import Run
from dbaf_jax.inference.settings import FaceFinding, FolderRunSettings
from dbaf_jax.storage import images, keys
from dbaf_jax.video.folders import FolderClips

RETRIES = (
    3  # a task, or an actor, that dies this many times more stops the run (Ray's default: never)
)
PATH_SAMPLES = 3  # inputs each node must read in the path check
MAX_BLOCKS = 10_000  # detection tasks per run at most (Ray Data tracks each block)


def join(parser: argparse.ArgumentParser, args: argparse.Namespace) -> RayRuns | None:
    """The `RayRuns` of a command's ``--ray`` options (`options.ray_options`; None without
    them), with its face finding and --allow-unchecked-model, joined to the cluster now:
    a command calls this before it loads the model, so that Ray starts before JAX does
    in this process."""
    options = ray_options(parser, args)
    if options is None:
        return None
    finding = commands.face_finding(args)
    return RayRuns(
        cluster.join(options.address), options.actors, finding, args.allow_unchecked_model
    )


def _absolute(path: str | Path) -> Path:
    """``path`` from the root, as every node must see it (links kept: the workers follow them)."""
    return Path(os.path.abspath(path))


def _user_error(err: BaseException) -> DbafError | None:
    """The DbafError a worker raised, out of the exceptions Ray wrapped it in; None if
    there is none (a bug, which keeps its traceback)."""
    todo: list[BaseException | None] = [err]
    seen: set[int] = set()
    while todo:
        found = todo.pop(0)
        if found is None or id(found) in seen:
            continue
        seen.add(id(found))
        cause = getattr(found, "cause", None)
        if isinstance(cause, DbafError):
            return cause
        if isinstance(found, DbafError) and cause is None:
            return found
        todo += [cause, found.__cause__, found.__context__]
    return None


@contextlib.contextmanager
def _worker_errors() -> Iterator[None]:
    """A user's error a worker raised comes out as itself (one line), not Ray's wrapping."""
    try:
        yield
    except Exception as err:
        cause = _user_error(err)
        if cause is None:
            raise
        raise cause from None


@dataclasses.dataclass(frozen=True)
class Timings:
    """Where a run's photo time went: the seconds of the photos' part of the run (from
    the dataset's start to its last row), until its first row came back, the longest
    start of a model actor (loading the model, the finder and their compiled programs),
    the detection tasks' and the model actors' seconds (each summed over its workers),
    and the count of model actors. `benchmarks.speed.distributed` prints them."""

    photos: float
    first_answer: float
    actor_start: float
    detection: float
    actors: float
    actor_count: int

    @property
    def overhead(self) -> float:
        """What the photos' part took beyond the actors' start and their share of the
        work: scheduling, transfers, the driver's moves into place, idle actors."""
        return self.photos - self.actor_start - self.actors / self.actor_count


@dataclasses.dataclass
class RayRuns:
    """The folder runs on the cluster ``ray`` (the joined module): ``actors`` model actors
    (None: `cluster.layout`'s default), the run's ``finding`` (rebuilt on each worker)
    and whether a model folder without model.json may run."""

    ray: Any
    actors: int | None
    finding: FaceFinding
    without_manifest: bool
    timings: Timings | None = None  # the last run's

    def anonymize_photo_folder(
        self, run: Run, in_dir: str | Path, out_dir: str | Path, clips: FolderClips | None = None
    ) -> Report:
        """`photo_folders.anonymize_photo_folder` on the cluster (module docstring)."""
        anonymizer, faces, settings = run.anonymizer, run.finder, run.folder_settings
        in_dir, out_dir = _absolute(in_dir), _absolute(out_dir)
        stale = clear_stale(out_dir)
        plan, kept, redo, kept_clips, record = planned_anonymization(
            anonymizer, in_dir, out_dir, settings, run.record, clips
        )
        seed = keys.derive_seed(run.password, record)
        meta = metadata.anonymization(record, anonymizer.fingerprint)
        report = Report(
            skipped=list(plan.skipped),
            notes=stale + list(plan.notes),
            strict=settings.strict,
            kept=kept,
            passed_over=list(plan.passed_over),
        )
        face_ledger = _absolute(run.ledger_file) if run.ledger_file is not None else None
        if face_ledger is not None:  # before any photo: one entry each at least
            report.notes += [
                note for note in [ledger.check_appendable(face_ledger, len(plan.sources))] if note
            ]
        report.notes += [faces.describe(), *faces.notes]
        sources = [source for source in plan.sources if plan.targets[source] not in kept]
        find = self._finder(anonymizer, settings, False, meta=meta, record=record)
        with Staging(out_dir) as stage:
            layout = self._start(anonymizer, plan, sources, stage)
            jobs = [workers.Job(source, stage.path(plan.targets[source])) for source in sources]
            self._photos(
                *(layout, anonymizer, stage, plan, jobs, report, settings, find),
                {record: seed},
                face_ledger,
                lambda target: settings.overwrite or target in redo,
            )
            if clips is not None:
                self._clips(
                    *(layout, anonymizer, stage, plan, report, clips),
                    record,
                    kept_clips,
                    settings.resume,
                    face_ledger,
                )
        return report

    def recover_photo_folder(
        self, run: Run, in_dir: str | Path, out_dir: str | Path, clips: FolderClips | None = None
    ) -> Report:
        """`photo_folders.recover_photo_folder` on the cluster (module docstring)."""
        anonymizer, settings, record = run.anonymizer, run.folder_settings, run.record
        in_dir, out_dir = _absolute(in_dir), _absolute(out_dir)
        stale = clear_stale(out_dir)
        plan = planned_recovery(in_dir, out_dir, settings, clips)
        report = Report(
            skipped=list(plan.skipped),
            notes=stale + list(plan.notes),
            operation="recover",
            passed_over=list(plan.passed_over),
        )
        anonymizations = checked_anonymizations(
            anonymizer, plan, report, settings.ignore_model_mismatch
        )
        records = {made.record for made in anonymizations.values() if made is not None}
        seeds = {r: keys.derive_seed(run.password, r) for r in records | ({record} - {None})}
        ledger_ref = self.ray.put(run.face_ledger) if run.face_ledger else None
        find = self._finder(anonymizer, settings, True, record=record, ledger_ref=ledger_ref)
        with Staging(out_dir) as stage:
            layout = self._start(anonymizer, plan, list(anonymizations), stage)
            jobs = [
                workers.Job(source, stage.path(plan.targets[source]), made)
                for source, made in anonymizations.items()
            ]
            self._photos(
                *(layout, anonymizer, stage, plan, jobs, report, settings, find),
                seeds,
                None,
                lambda target: settings.overwrite,
            )
            if clips is not None:
                self._clips(layout, anonymizer, stage, plan, report, clips, None, {}, False, None)
        return report

    # ------------------------------------------------------------------ the parts

    def _finding(self) -> FaceFinding:
        """The run's finding with its folders from the root, as every worker must read them."""
        return dataclasses.replace(
            self.finding,
            detector=_absolute(self.finding.detector) if self.finding.detector else None,
            parser=_absolute(self.finding.parser) if self.finding.parser else None,
        )

    def _model(self, anonymizer: FaceAnonymizer) -> workers.ModelSpec:
        return workers.ModelSpec(
            _absolute(anonymizer.model_dir),
            anonymizer.dtype,
            self.without_manifest,
            anonymizer.fingerprint,
        )

    def _finder(
        self, anonymizer: FaceAnonymizer, settings: FolderRunSettings, recovering: bool, **state
    ) -> workers.Finder:
        files = workers.ModelFiles(_absolute(anonymizer.model_dir), anonymizer.input_size)
        return workers.Finder(self._finding(), files, settings.max_pixels, recovering, **state)

    def _start(
        self, anonymizer: FaceAnonymizer, plan: Plan, sources: list[Path], stage: Staging
    ) -> cluster.Layout:
        """The run's `cluster.Layout`, said on stderr, and every node's view of its paths
        checked, before any work."""
        layout = cluster.layout(self.ray.cluster_resources(), self.actors)
        print(printable(layout.describe()), file=sys.stderr)
        finding = self._finding()
        folders = [plan.in_dir, _absolute(anonymizer.model_dir)]
        folders += [Path(p) for p in (finding.detector, finding.parser) if p is not None]
        samples = sources[:PATH_SAMPLES] + plan.videos[:1]
        cluster.check_paths(self.ray, cluster.path_check(samples, folders, stage.root, stage.token))
        return layout

    def _photos(
        self,
        layout: cluster.Layout,
        anonymizer: FaceAnonymizer,
        stage: Staging,
        plan: Plan,
        jobs: list[workers.Job],
        report: Report,
        settings: FolderRunSettings,
        find: workers.Finder,
        seeds: dict[keys.KeyRecord, bytes],
        face_ledger: Path | None,
        replace: Callable[[Path], bool],
    ) -> None:
        """The photos of ``jobs`` through the cluster, each put in place as its row comes
        back, then counted into ``report`` in the plan's order."""
        statuses: dict[Path, workers.PhotoStatus] = {}
        start, first = time.perf_counter(), None
        if jobs:
            dataset = self._dataset(
                layout, anonymizer, stage, jobs, settings, find, seeds, face_ledger
            )
            with (
                _worker_errors(),
                contextlib.closing(iter(dataset.iter_rows())) as rows,
                tqdm(total=len(jobs), unit="photo", desc=report.operation) as bar,
            ):
                for row in rows:
                    status: workers.PhotoStatus = pickle.loads(row[workers.COLUMN])
                    if status.source in statuses:  # a batch that ran twice
                        continue
                    first = first or time.perf_counter() - start
                    self._put_in_place(stage, status, face_ledger, replace)
                    statuses[status.source] = status
                    bar.update()
        self.timings = Timings(
            time.perf_counter() - start,
            first or 0.0,
            max((status.start_seconds for status in statuses.values()), default=0.0),
            sum(status.detection_seconds for status in statuses.values()),
            sum(status.model_seconds for status in statuses.values()),
            layout.actors,
        )
        for job in jobs:
            status = statuses.get(job.source) or workers.PhotoStatus(
                job.source,
                skipped=f"{job.source}: no answer came back from the Ray workers; not processed",
            )
            report.photos += 1
            report.notes += status.notes
            if status.skipped is not None:
                report.skipped.append(images.Skipped(job.source, status.skipped))
                continue
            report.written.append(plan.targets[job.source])
            report.faces += status.faces
            report.faces_found += status.found
            report.faces_hidden += status.hidden
            report.faces_left += status.left
            report.unverified += status.unverified

    def _dataset(
        self,
        layout: cluster.Layout,
        anonymizer: FaceAnonymizer,
        stage: Staging,
        jobs: list[workers.Job],
        settings: FolderRunSettings,
        find: workers.Finder,
        seeds: dict[keys.KeyRecord, bytes],
        face_ledger: Path | None,
    ) -> Any:
        """Ray Data's plan: the jobs, detection tasks, then the model actors' pool."""
        data = self.ray.data
        per_call = settings.batch_size or (ACCELERATOR_BATCH if layout.gpus else CPU_BATCH)
        dataset = data.from_items(
            [{workers.COLUMN: pickle.dumps(job)} for job in jobs],
            # One photo per detection task, so that photos stream; a large folder's in fewer.
            override_num_blocks=min(len(jobs), MAX_BLOCKS),
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
            dataset = dataset.map_batches(
                workers.detect,
                fn_kwargs={"find": find},
                batch_size=None,
                max_retries=RETRIES,
                **layout.detection(),
            )
        with warnings.catch_warnings():
            # Ray 2.60 takes an actor's retry counts only as the "ray_remote_args" it calls deprecated.
            warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
            return dataset.map_batches(
                workers.PhotoModel,
                fn_constructor_kwargs={
                    "model": self._model(anonymizer),
                    "finding": find.finding,
                    "recovering": find.recovering,
                    "seeds": seeds,
                    "settings": settings,
                    "staging": stage.root,
                    "with_ledger": face_ledger is not None,
                },
                batch_size=per_call,
                compute=data.ActorPoolStrategy(size=layout.actors),
                max_restarts=RETRIES,
                max_task_retries=RETRIES,
                **layout.model(),
            )

    @staticmethod
    def _put_in_place(
        stage: Staging,
        status: workers.PhotoStatus,
        face_ledger: Path | None,
        replace: Callable[[Path], bool],
    ) -> None:
        """A written photo's ledger entries appended, then its outputs put in place: no
        output is in place without its entries."""
        if face_ledger is not None and status.entries:
            try:
                ledger.append(face_ledger, status.entries)
            except OutputWriteError as err:
                raise OutputWriteError(
                    f"{err}: the faces of {status.source} are not in it, so it and the inputs after it were not put "
                    "in place; the outputs already in place are kept, with their entries (--resume makes the rest)"
                ) from None
        for staged in status.outputs:
            stage.commit(staged, replace(stage.target(staged)))

    def _clips(
        self,
        layout: cluster.Layout,
        anonymizer: FaceAnonymizer,
        stage: Staging,
        plan: Plan,
        report: Report,
        clips: FolderClips,
        record: keys.KeyRecord | None,
        kept: dict[Path, keys.KeyRecord],
        redo: bool,
        face_ledger: Path | None,
    ) -> None:
        """The clips of ``plan`` but those ``kept``, one task each (`workers.run_clip`),
        put in place as each ends (its ledger entries first), then added to ``report`` in
        the plan's order as `FolderClips.run` adds them."""
        report.kept += [plan.video_targets[source] for source in plan.videos if source in kept]
        todo = [source for source in plan.videos if source not in kept]
        if not todo:
            return
        run = clips.folder_run
        fields = {  # the run's but its model, finder and ledger file (the task's own)
            "operation": run.operation,
            "password": run.password,
            "record": run.record,
            "face_ledger": run.face_ledger,
            # Staged names are the run's own: a task run twice writes them again.
            "settings": dataclasses.replace(run.settings, overwrite=True),
        }
        task = self.ray.remote(workers.run_clip).options(max_retries=RETRIES, **layout.model())
        model, finding = self._model(anonymizer), self._finding()
        pending = {
            task.remote(
                model,
                finding,
                fields,
                source,
                stage.path(plan.video_targets[source]),
                stage.root / f"clip{number}{ledger.SUFFIX}" if face_ledger is not None else None,
                record,
                redo,
            ): source
            for number, source in enumerate(todo)
        }
        done: dict[Path, workers.ClipStatus] = {}
        replace = run.settings.overwrite or redo
        with _worker_errors(), tqdm(total=len(todo), unit="clip", desc=run.operation) as bar:
            waiting = list(pending)
            while waiting:
                ready, waiting = self.ray.wait(waiting, num_returns=1)
                status: workers.ClipStatus = self.ray.get(ready[0])
                if face_ledger is not None and status.entries:
                    ledger.append(face_ledger, status.entries)
                for staged in status.report.written:
                    stage.commit(staged, replace)
                done[status.source] = status
                bar.update()
        for source in todo:
            made = done[source].report
            moved = lambda text: text.replace(str(stage.root), str(stage.out_dir))  # noqa: E731
            for outcome in made.clips:
                outcome.written = [stage.target(path) for path in outcome.written]
                outcome.notes = [moved(note) for note in outcome.notes]
            report.skipped += made.skipped
            report.written += [stage.target(path) for path in made.written]
            report.notes += [moved(note) for note in made.notes]
            report.clips += made.clips
