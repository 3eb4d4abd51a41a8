"""The clips of a folder run: ``anonymize`` and ``recover`` on a folder hand each clip
(`planning.Plan.videos`) to the video runner, so one command takes mixed media.

Each clip keeps its name below the output folder; anonymize writes its sidecar beside
it (``CLIP.dbaf.json``) and, with a key file, its tracks to the key file's face ledger;
recovery reads the clip's sidecar (or its container's copy; or, with a key file, the
ledger). Encoding and tracking are the video commands' defaults. A clip that cannot be
used (damaged, no sidecar, another model's) is skipped and named, as a photo would be;
anonymize refuses a clip that is already an anonymized one unless asked
(`runner.anonymized_clip`), naming it as skipped.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable

from dbaf_jax.core.errors import InputError, OutputExistsError
from dbaf_jax.inference.planning import Plan, check_outputs
from dbaf_jax.inference.report import Report
from dbaf_jax.inference.run import Run
from dbaf_jax.storage import keys
from dbaf_jax.storage.images import Skipped
from dbaf_jax.video import runner, sidecar


@dataclasses.dataclass(frozen=True)
class FolderClips:
    """How a folder run treats its clips: with the folder's run (`inference.run.Run`):
    its model, face finder and password, its settings (the batch size, ``overwrite``,
    ``allow_anonymized_input``, ``ignore_model_mismatch``; tracking and encoding are the
    video commands' defaults, `ClipRunSettings.of_run`); for anonymize its face ledger
    file; for recovery its key record and face ledger, for clips without a sidecar."""

    folder_run: Run

    def _outputs(self, target: Path) -> list[Path]:
        anonymizing = self.folder_run.operation == "anonymize"
        return [target, sidecar.path_for(target)] if anonymizing else [target]

    def check(self, plan: Plan, resume: bool = False) -> dict[Path, keys.KeyRecord]:
        """Before any work: OutputExistsError when a clip's outputs exist (unless
        ``overwrite``). With ``resume`` (anonymize): the clips an earlier run completed
        (clip and sidecar both there, the sidecar this model's), with each one's key
        record, to keep; a sidecar of another model is refused, and a clip without its
        sidecar is made again."""
        targets = [plan.video_targets[source] for source in plan.videos]
        if not resume:
            check_outputs(
                [path for target in targets for path in self._outputs(target)],
                self.folder_run.settings.overwrite,
            )
            return {}
        kept = {}
        for source, target in zip(plan.videos, targets):
            side = sidecar.path_for(target)
            if not (target.exists() and side.exists()):
                continue
            try:
                made = sidecar.read(side).made
            except InputError:
                made = None
            if made is None or made.fingerprint != self.folder_run.anonymizer.fingerprint:
                raise OutputExistsError(
                    f"{side} exists and is not the sidecar of this model's anonymize run; move it or pass --overwrite"
                )
            kept[source] = made.record
        return kept

    def run(
        self,
        plan: Plan,
        report: Report,
        record: keys.KeyRecord | None = None,
        kept: Iterable[Path] = (),
        redo: bool = False,
    ) -> None:
        """Runs every clip of ``plan`` but those ``kept`` into ``report``: anonymize with
        ``record`` (the run's salt, as the photos' runner settled it), recovery with each
        clip's sidecar (else the run's key record and face ledger). ``redo`` (resume): an
        incomplete earlier output of a clip is replaced."""
        kept = set(kept)
        run = self.folder_run
        if run.operation == "anonymize":
            again = dataclasses.replace(run.settings, overwrite=run.settings.overwrite or redo)
            run = dataclasses.replace(run, record=record, settings=again)
        report.kept += [plan.video_targets[source] for source in plan.videos if source in kept]
        for source in plan.videos:
            if source in kept:
                continue
            target = plan.video_targets[source]
            try:
                if run.operation == "anonymize":
                    outcome = runner.anonymize_video(run, source, target)
                else:
                    outcome = runner.recover_video(run, source, target)
            except InputError as err:
                # This clip only: damaged, no sidecar, another model's, already anonymized
                # (`runner.anonymized_clip`), a sidecar recovery would refuse; nothing of it
                # was written.
                report.skipped.append(Skipped(source, str(err)))
                continue
            report.written += outcome.written
            report.notes += outcome.notes
            report.clips.append(outcome)
