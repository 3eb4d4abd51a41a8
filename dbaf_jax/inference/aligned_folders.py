"""Folder runs over aligned face crops (``--aligned``): anonymize with one salt (the
run's, `run.Run`: else a fresh one), recover with each file's own. The runners take the
run (no face finder: the crops are the faces) with their source and target folders.

Inputs are read at the encoder's input size (other sizes are resized) and decoded on
worker threads ahead of the model; outputs are encoded behind it (`dbaf_jax.core.pipeline`),
so the device is kept busy. ``save_latents`` also writes ``NAME.latents.npz`` beside
each output with what DBAF's latent-space recovery needs (``mode='latent'``); those
files describe the original face: keep them private.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Iterator

import jax
import numpy as np
from tqdm import tqdm

from dbaf_jax.core import pipeline, sidecars
from dbaf_jax.faces import metadata
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.inference.planning import (
    Plan,
    anonymized_already,
    check_outputs,
    checked_anonymizations,
    latents_path,
    plan_outputs,
)
from dbaf_jax.inference.programs import pad_batch
from dbaf_jax.inference.recovery_modes import RECOVERY_MODES
from dbaf_jax.inference.report import Report
from dbaf_jax.inference.run import Run
from dbaf_jax.storage import atomic_files, images, keys


def _write_latents(path: Path, latents: dict[str, np.ndarray], overwrite: bool) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as file:
            np.savez_compressed(file, **latents)

    atomic_files.write_file(path, write, overwrite)


def anonymize_folder(run: Run, in_dir: str | Path, out_dir: str | Path) -> Report:
    """Anonymizes every aligned face image below ``in_dir`` into ``out_dir`` with ``run``
    and one salt (the run's record, else a fresh one); its settings: the batch size,
    ``overwrite``, ``save_latents`` and ``allow_anonymized_input`` (else crops that are
    already outputs of anonymize are skipped and named, as photos are: their copies
    would lose the recovery record)."""
    anonymizer, settings = run.anonymizer, run.folder_settings
    overwrite, save_latents = settings.overwrite, settings.save_latents
    refuse = (lambda path: None) if settings.allow_anonymized_input else anonymized_already
    plan = plan_outputs(in_dir, out_dir, refuse)
    outputs = list(plan.targets.values())
    check_outputs(
        outputs + [latents_path(t) for t in outputs] if save_latents else outputs, overwrite
    )
    batch_size = anonymizer.padded_size(settings.batch)
    record = run.record or keys.new_key_record()
    key = anonymizer.key_for(run.password, record)
    meta = metadata.anonymization(record, anonymizer.fingerprint)
    report = Report(skipped=plan.skipped, notes=list(plan.notes), passed_over=plan.passed_over)

    def dispatched() -> Iterator:
        for paths, batch, skipped in images.iter_batches(
            plan.sources, anonymizer.input_size, batch_size
        ):
            report.skipped += skipped
            outputs = (
                anonymizer.anonymize_async(pad_batch(batch, batch_size), key, save_latents)
                if paths
                else None
            )
            yield paths, len(skipped), outputs

    def write(target: Path, image: np.ndarray, latents: dict | None) -> None:
        images.write_png(target, image, meta, overwrite)
        if latents is not None:
            _write_latents(latents_path(target), latents, overwrite)

    with (
        tqdm(total=len(plan.sources), unit="img", desc="anonymize") as bar,
        pipeline.Writer(2 * batch_size) as writer,
    ):
        for paths, skipped, outputs in pipeline.one_behind(dispatched()):
            anonymized, latents = jax.device_get(outputs) if paths else (None, None)
            for i, source in enumerate(paths):
                row = (
                    {name: value[i] for name, value in latents.items()}
                    if latents is not None
                    else None
                )
                writer.submit(functools.partial(write, plan.targets[source], anonymized[i], row))
                report.written.append(plan.targets[source])
            bar.update(len(paths) + skipped)
    return report


def _recoverable(
    anonymizer: FaceAnonymizer, plan: Plan, report: Report, ignore_model_mismatch: bool
) -> list[tuple[Path, metadata.Anonymization]]:
    """The planned files that are aligned outputs of anonymize, with their metadata;
    the others (no metadata, whole photos) skipped in ``report`` with the reason."""
    readable: list[tuple[Path, metadata.Anonymization]] = []
    for source, made in checked_anonymizations(
        anonymizer, plan, report, ignore_model_mismatch
    ).items():
        if made is None:
            report.skipped.append(
                images.Skipped(
                    source,
                    f"{source}: no {images.METADATA_CHUNK} metadata (not written by dbaf_jax.commands.anonymize)",
                )
            )
        elif made.is_photo:
            report.skipped.append(
                images.Skipped(
                    source, f"{source}: an anonymized whole photo; recover it without --aligned"
                )
            )
        else:
            readable.append((source, made))
    return readable


def _recovery_input(
    anonymizer: FaceAnonymizer,
    mode: str,
    spec: dict | None,
    item: tuple[Path, metadata.Anonymization],
):
    """The input of one recovery: the anonymized image, or its saved latents checked
    against ``spec`` (`FaceAnonymizer.latent_spec`; ValueError when they are missing)."""
    source = item[0]
    if mode == "image":
        return images.read_image(source, anonymizer.input_size)
    side = latents_path(source)
    if not side.is_file():
        raise ValueError(
            f"{source}: no {side.name} (anonymize with --save-latents for --mode latent)"
        )
    return sidecars.read_latents(side, spec)


def _recoveries(
    anonymizer: FaceAnonymizer,
    password: str,
    readable: list[tuple[Path, metadata.Anonymization]],
    load: Callable[[tuple[Path, metadata.Anonymization]], Any],
    mode: str,
    batch_size: int,
    report: Report,
) -> Iterator:
    """(items, how many of the batch were dropped, recovered on the device) per batch of
    inputs recorded with one key (an anonymize run uses one salt, so usually one batch
    per read batch); ``load``: an item's input (`_recovery_input`), read ahead on worker
    threads; inputs that could not be read skipped in ``report``."""
    key_cache: dict[keys.KeyRecord, jax.Array] = {}
    loaded = pipeline.read_ahead(readable, load, depth=2 * batch_size)
    for chunk in pipeline.chunks(loaded, batch_size):
        for record in dict.fromkeys(made.record for (_, made), _ in chunk):
            if record not in key_cache:
                key_cache[record] = anonymizer.key_for(password, record)
            kept = []
            for (source, made), value in chunk:
                if made.record != record:
                    continue
                if isinstance(value, ValueError):
                    report.skipped.append(images.Skipped(source, str(value)))
                else:
                    kept.append((source, made, value))
            if not kept:
                yield [], len(chunk), None
                continue
            values = [value for _, _, value in kept]
            if mode == "image":
                recovered = anonymizer.recover_async(
                    pad_batch(np.stack(values), batch_size), key_cache[record]
                )
            else:
                latents = {
                    k: pad_batch(np.stack([v[k] for v in values]), batch_size) for k in values[0]
                }
                recovered = anonymizer.recover_from_latents_async(latents, key_cache[record])
            yield (
                [(source, made) for source, made, _ in kept],
                len(chunk) - len(kept),
                recovered,
            )


def recover_folder(run: Run, in_dir: str | Path, out_dir: str | Path) -> Report:
    """Recovers the aligned PNGs of an anonymize run below ``in_dir`` into ``out_dir``
    with ``run``, in its recovery mode (`Run.start`'s; 'image' when unset); each file's
    own salt gives its key. Its settings: the batch size, ``overwrite``,
    ``ignore_model_mismatch``."""
    anonymizer, settings, mode = run.anonymizer, run.folder_settings, run.recovery or "image"
    overwrite = settings.overwrite
    if mode not in RECOVERY_MODES:
        raise ValueError(f"mode must be one of {RECOVERY_MODES}, got {mode!r}")
    plan = plan_outputs(
        in_dir,
        out_dir,
        refuse=lambda path: (
            None
            if path.suffix.lower() == ".png"
            else f"{path}: not a PNG, so not an output of anonymize --aligned: not recovered"
        ),
    )
    check_outputs(plan.targets.values(), overwrite)
    batch_size = anonymizer.padded_size(settings.batch)
    report = Report(skipped=plan.skipped, notes=list(plan.notes), passed_over=plan.passed_over)
    readable = _recoverable(anonymizer, plan, report, settings.ignore_model_mismatch)
    spec = anonymizer.latent_spec() if mode == "latent" else None
    load = functools.partial(_recovery_input, anonymizer, mode, spec)
    recoveries = _recoveries(anonymizer, run.password, readable, load, mode, batch_size, report)
    with (
        tqdm(total=len(readable), unit="img", desc="recover") as bar,
        pipeline.Writer(2 * batch_size) as writer,
    ):
        for kept, dropped, recovered in pipeline.one_behind(recoveries):
            pixels = np.asarray(recovered) if kept else None
            for i, (source, made) in enumerate(kept):
                target = plan.targets[source]
                writer.submit(
                    functools.partial(
                        images.write_png,
                        target,
                        pixels[i],
                        metadata.recovery(made, mode),
                        overwrite,
                    )
                )
                report.written.append(target)
            bar.update(len(kept) + dropped)
    return report
