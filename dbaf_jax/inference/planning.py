"""Planning a folder run before any work: which inputs, which output each gets, what
exists already, and which inputs were made by this model.

Outputs are PNGs named after their inputs (``face.jpg`` -> ``face.png``, sub-folders
kept); an input whose output name another input already has is skipped. The output
folder is checked against the input folder (`output_folder.check_location`) and
cleared of an interrupted run's temporaries. Unless ``overwrite`` is set, a run whose
outputs exist stops before writing anything.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable, Iterable

from dbaf_jax import images, metadata, output_folder
from dbaf_jax.errors import InputError, ModelMismatchError, OutputExistsError
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.inference.report import Report


LATENTS_SUFFIX = ".latents.npz"


def output_path(in_dir: Path, out_dir: Path, source: Path) -> Path:
    return (out_dir / source.relative_to(in_dir)).with_suffix(".png")


def latents_path(target: Path) -> Path:
    """Where ``--save-latents`` puts the latents of output ``target``."""
    return target.with_name(target.stem + LATENTS_SUFFIX)


def crop_path(target: Path, index: int) -> Path:
    """Where ``save_crops`` puts face ``index`` of output ``target``."""
    return target.with_name(f"{target.stem}.face{index}.png")


def check_outputs(targets: Iterable[Path], overwrite: bool) -> None:
    """Raises OutputExistsError, before anything is written, if outputs exist and
    ``overwrite`` is not set."""
    existing = [str(p) for p in targets if p.exists()]
    if existing and not overwrite:
        shown = ", ".join(existing[:5]) + (f" and {len(existing) - 5} more" if len(existing) > 5 else "")
        raise OutputExistsError(
            f"{len(existing)} output(s) exist already ({shown}); pass --overwrite (overwrite=True) to replace them"
        )


@dataclasses.dataclass(frozen=True)
class Plan:
    """A folder run's inputs and where each goes; ``skipped``: inputs whose output name
    another input already has (``a.jpg`` beside ``a.png``); ``notes``: temporaries of
    an interrupted run removed from the output folder."""

    in_dir: Path
    out_dir: Path
    sources: list[Path]
    targets: dict[Path, Path]
    skipped: list[images.Skipped]
    notes: list[str]


def plan_outputs(in_dir: str | Path, out_dir: str | Path, keep: Callable[[Path], bool] = lambda path: True) -> Plan:
    """The images below ``in_dir`` that ``keep`` accepts, each with its output path;
    the output folder checked and made (`output_folder.check_location`) before any work."""
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    inputs = images.input_images(in_dir)
    sources, targets, skipped = [], {}, []
    first: dict[Path, Path] = {}
    for source in filter(keep, inputs):
        target = output_path(in_dir, out_dir, source)
        if target in first:
            skipped.append(images.Skipped(source, f"{source}: its output {target} is already {first[target]}'s"))
            continue
        first[target] = source
        sources.append(source)
        targets[source] = target
    output_folder.check_location(in_dir, out_dir, inputs, targets.values())
    return Plan(in_dir, out_dir, sources, targets, skipped, output_folder.clear_stale_temporaries(out_dir))


def plan_photo_outputs(
    in_dir: str | Path, out_dir: str | Path, overwrite: bool, save_crops: bool, keep: Callable[[Path], bool] = lambda path: True
) -> Plan:
    """`plan_outputs`, refusing (before anything is written) existing outputs and, with
    ``save_crops``, existing crops of them, unless ``overwrite``."""
    plan = plan_outputs(in_dir, out_dir, keep)
    check_outputs(plan.targets.values(), overwrite)
    if save_crops:
        check_outputs([p for t in plan.targets.values() for p in t.parent.glob(f"{t.stem}.face*.png")], overwrite)
    return plan


def checked_anonymizations(
    anonymizer: FaceAnonymizer, plan: Plan, report: Report, ignore_model_mismatch: bool
) -> dict[Path, metadata.Anonymization | None]:
    """Each input's checked metadata (None: it has none), read before anything is
    written. Inputs with unusable metadata are skipped into ``report``. Images made by
    another model raise ModelMismatchError naming both fingerprints, or with
    ``ignore_model_mismatch`` become a warning."""
    found: dict[Path, metadata.Anonymization | None] = {}
    for source in plan.sources:
        try:
            found[source] = metadata.read_anonymization(source)
        except InputError as err:
            report.skipped.append(images.Skipped(source, str(err)))
    others: dict[str, Path] = {}
    for source, made in found.items():
        if made is not None and made.fingerprint != anonymizer.fingerprint:
            others.setdefault(made.fingerprint, source)
    if others:
        named = ", ".join(f"{fingerprint} (e.g. {source})" for fingerprint, source in sorted(others.items()))
        message = (
            f"images below {plan.in_dir} were anonymized by another model ({named}) than {anonymizer.model_dir} "
            f"(fingerprint {anonymizer.fingerprint}): their recovery would not give the original faces"
        )
        if not ignore_model_mismatch:
            raise ModelMismatchError(f"{message}; pass --ignore-model-mismatch to recover them anyway")
        report.warnings.append(message)
    return found


def is_saved_crop(path: Path) -> bool:
    """Whether ``path`` is a crop written by ``save_crops`` (recover passes over them)."""
    if not re.fullmatch(r".+\.face\d+", path.stem) or path.suffix != ".png":
        return False
    try:
        return metadata.is_crop(images.read_metadata(path))
    except ValueError:
        return False
