"""Planning a folder run before any work: which inputs, which output each gets, what
exists already, and which inputs were made by this model.

Every entry below the input folder is accounted for (`input_folder.list_inputs`):
images are planned, clips too when the run has a video path (else refused by name),
files our runs wrote beside an output are passed over by name, and the rest are
skipped with their reason. Photo outputs are PNGs named after their inputs
(``face.jpg`` -> ``face.png``, sub-folders kept), clips keep their names; an input
whose output name another input already has is skipped. The output folder is checked
against the input folder (`output_folder.check_location`) and cleared of an
interrupted run's temporaries. Unless ``overwrite`` is set, a run whose outputs exist
stops before writing anything.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Callable, Iterable

from PIL import Image

from dbaf_jax.core.errors import InputError, ModelMismatchError, OutputExistsError
from dbaf_jax.faces import metadata
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.inference.report import Report
from dbaf_jax.storage import file_kinds, images, input_folder, output_folder

LATENTS_SUFFIX = file_kinds.LATENTS_SUFFIX


def output_path(in_dir: Path, out_dir: Path, source: Path) -> Path:
    return (out_dir / source.relative_to(in_dir)).with_suffix(".png")


def latents_path(target: Path) -> Path:
    """Where ``--save-latents`` puts the latents of output ``target``."""
    return target.with_name(target.stem + LATENTS_SUFFIX)


def crop_path(target: Path, index: int) -> Path:
    """Where ``save_crops`` puts face ``index`` of output ``target``."""
    return target.with_name(f"{target.stem}.face{index}.png")


def check_outputs(targets: Iterable[Path], overwrite: bool, resumable: bool = False) -> None:
    """Raises OutputExistsError, before anything is written, if outputs exist and
    ``overwrite`` is not set; its line names --overwrite, and --resume for a run that
    can continue (``resumable``: anonymize on photos)."""
    existing = [str(p) for p in targets if p.exists()]
    if existing and not overwrite:
        shown = ", ".join(existing[:5]) + (
            f" and {len(existing) - 5} more" if len(existing) > 5 else ""
        )
        resume = (
            ", or --resume (resume=True) to keep the complete ones and make the rest"
            if resumable
            else ""
        )
        raise OutputExistsError(
            f"{len(existing)} output(s) exist already ({shown}); pass --overwrite (overwrite=True) to replace them{resume}"
        )


@dataclasses.dataclass(frozen=True)
class Plan:
    """A folder run's inputs and where each goes; ``skipped``: entries not processed,
    each with why (`input_folder`; inputs whose output name another input already has,
    ``a.jpg`` beside ``a.png``); ``notes``: temporaries of an interrupted run removed
    from the output folder; ``videos``: clips for the video path, each with its output
    in ``video_targets``; ``passed_over``: files an earlier run wrote beside an output."""

    in_dir: Path
    out_dir: Path
    sources: list[Path]
    targets: dict[Path, Path]
    skipped: list[images.Skipped]
    notes: list[str]
    videos: list[Path] = dataclasses.field(default_factory=list)
    video_targets: dict[Path, Path] = dataclasses.field(default_factory=dict)
    passed_over: list[images.Skipped] = dataclasses.field(default_factory=list)


Judge = Callable[[Path], "str | None"]  # a reason about an input, or None


def _no_reason(path: Path) -> None:
    return None


def plan_outputs(
    in_dir: str | Path,
    out_dir: str | Path,
    refuse: Judge = _no_reason,
    pass_over: Judge = _no_reason,
    videos: bool = False,
) -> Plan:
    """Every entry below ``in_dir`` accounted for (module docstring): the images that
    neither ``refuse`` (skipped, with its reason) nor ``pass_over`` (named, not
    counted) gives a reason for, each with its output path; with ``videos`` the clips
    too, else they are skipped as a kind this run does not read. The output folder is
    checked and its stale temporaries removed (`output_folder`) before any work."""
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    listing = input_folder.list_inputs(in_dir)
    skipped, passed = list(listing.refused), list(listing.companions)
    sources, targets, clips, clip_targets = [], {}, [], {}
    first: dict[Path, Path] = {}
    for source in sorted(listing.images + listing.videos):
        is_video = source in listing.videos
        if is_video and not videos:
            skipped.append(
                images.Skipped(
                    source,
                    f"{source}: a video, which this run does not read (the anonymize and recover commands "
                    "read clips beside photos, without --aligned; or use anonymize_video)",
                )
            )
            continue
        why = None if is_video else refuse(source)
        if why is not None:
            skipped.append(images.Skipped(source, why))
            continue
        why = None if is_video else pass_over(source)
        if why is not None:
            passed.append(images.Skipped(source, why))
            continue
        target = (
            out_dir / source.relative_to(in_dir)
            if is_video
            else output_path(in_dir, out_dir, source)
        )
        if target in first:
            skipped.append(
                images.Skipped(
                    source, f"{source}: its output {target} is already {first[target]}'s"
                )
            )
            continue
        first[target] = source
        if is_video:
            clips.append(source)
            clip_targets[source] = target
        else:
            sources.append(source)
            targets[source] = target
    companions = [Path(f"{target}{file_kinds.SIDECAR_SUFFIX}") for target in clip_targets.values()]
    output_folder.check_location(
        in_dir,
        out_dir,
        listing.images + listing.videos,
        [*targets.values(), *clip_targets.values(), *companions],
    )
    return Plan(
        in_dir,
        out_dir,
        sources,
        targets,
        sorted(skipped, key=lambda s: s.path),
        output_folder.clear_stale_temporaries(out_dir),
        clips,
        clip_targets,
        sorted(passed, key=lambda s: s.path),
    )


def plan_photo_outputs(
    in_dir: str | Path,
    out_dir: str | Path,
    overwrite: bool,
    save_crops: bool,
    refuse: Judge = _no_reason,
    pass_over: Judge = _no_reason,
    videos: bool = False,
    resumable: bool = False,
) -> Plan:
    """`plan_outputs`, refusing (before anything is written) existing outputs and, with
    ``save_crops``, existing crops of them, unless ``overwrite`` (`check_outputs`;
    ``resumable``: the refusal names --resume too)."""
    plan = plan_outputs(in_dir, out_dir, refuse, pass_over, videos)
    check_outputs(plan.targets.values(), overwrite, resumable)
    if save_crops:
        check_outputs(
            [p for t in plan.targets.values() for p in t.parent.glob(f"{t.stem}.face*.png")],
            overwrite,
            resumable,
        )
    return plan


def anonymized_already(path: Path) -> str | None:
    """Why anonymize refuses ``path`` unless asked: it carries our metadata as an
    anonymized image or a saved face crop (anonymizing it again would make an output
    without its recovery record, which the user may not notice is gone); None for
    other files, recovered photos (their faces are the originals) and files that cannot
    be read (the run names those when it reads them). Only the header is read: our
    chunk is written before the pixels, where PIL's ``info`` has it without decoding."""
    try:
        with Image.open(path) as img:
            text = img.info.get(images.METADATA_CHUNK)
    except Exception:  # noqa: BLE001 - not readable as an image: the run says so when it decodes it
        return None
    if text is None:
        return None
    try:
        operation = json.loads(text).get("operation")
    except (ValueError, RecursionError, AttributeError):  # our chunk, damaged: still ours
        operation = None
    if operation == metadata.RECOVER:
        return None
    what = (
        "a face crop saved by anonymize --save-crops"
        if operation == metadata.CROP
        else "already an output of anonymize"
    )
    return (
        f"{path}: {what} (its {images.METADATA_CHUNK} metadata says so); anonymizing it again would leave an output without "
        "its recovery record, so it is not processed (pass --allow-anonymized-input to anonymize it again)"
    )


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
        named = ", ".join(
            f"{fingerprint} (e.g. {source})" for fingerprint, source in sorted(others.items())
        )
        message = (
            f"images below {plan.in_dir} were anonymized by another model ({named}) than {anonymizer.model_dir} "
            f"(fingerprint {anonymizer.fingerprint}): their recovery would not give the original faces"
        )
        if not ignore_model_mismatch:
            raise ModelMismatchError(
                f"{message}; pass --ignore-model-mismatch to recover them anyway"
            )
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


def saved_crop(path: Path) -> str | None:
    """`pass_over` for recovery: the reason a crop `is_saved_crop` is passed over."""
    return (
        f"{path}: a face crop saved by anonymize --save-crops: not recovered (recover --save-crops makes its own)"
        if is_saved_crop(path)
        else None
    )
