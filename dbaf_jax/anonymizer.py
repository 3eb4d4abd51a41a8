"""Anonymize aligned faces with a password and recover them with it: the Python API.

``FaceAnonymizer(model_dir)`` runs a DBAF model directory on arrays;
`anonymize_folder` and `recover_folder` run it over folders of images and are what
the commands ``python -m dbaf_jax.anonymize`` and ``python -m dbaf_jax.recover`` call.

Each folder run draws a fresh random salt; password + salt give the key
(`dbaf_jax.keys`). Every output PNG carries, in its ``dbaf_jax`` text chunk, the salt
and KDF parameters and which model made it (`model_directory.model_fingerprint` of
its weights), never the password. Recovery reads them back, so only the password is
needed. A wrong password is not an error: it yields another face, which is what keeps
the original private. Recovering with another model than the one that anonymized is
reported as a warning.

Inputs are read at the encoder's input size (256 for the public checkpoints; other
sizes are resized); outputs are PNGs at the generator's size, named after their
inputs (``face.jpg`` -> ``face.png``, sub-folders kept). Unreadable files are skipped
and reported; an existing output is never replaced unless ``overwrite`` is set.

Recovery from the anonymized image alone re-encodes it and applies KRIA with the key
(the paper's path). ``save_latents`` additionally writes ``NAME.latents.npz`` beside
each output with what the reference's latent-space recovery needs (the anonymized
identity code, the attribute code and MAAR's maps of the original); recover with
``mode='latent'`` to use it. Those files describe the original face: keep them private.

Errors the user can cause raise `dbaf_jax.errors` types (OutputExistsError,
PasswordFileError, InputError, ModelDirectoryError), never exit the interpreter.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from pathlib import Path
from typing import Iterable

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dbaf_jax import __version__, images, keys, model_directory
from dbaf_jax.errors import InputError, ModelDirectoryError, OutputExistsError, PasswordFileError
from dbaf_jax.faces import paste, photos
from dbaf_jax.faces.detect import FaceDetector
from dbaf_jax.models import dbaf

LATENTS_SUFFIX = ".latents.npz"
RECOVERY_MODES = ("image", "latent")


def read_password(path: str | Path) -> str:
    """The first line of the UTF-8 file ``path``, without its line ending.

    Raises PasswordFileError for a missing or unreadable file, one that is not UTF-8,
    or an empty password.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise PasswordFileError(f"cannot read the password file {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise PasswordFileError(f"the password file {path} is not UTF-8 text") from None
    password = text.splitlines()[0] if text else ""
    if not password:
        raise PasswordFileError(f"the password file {path} has an empty first line")
    return password


@dataclasses.dataclass
class Report:
    """What a folder run did: written outputs, skipped inputs with reasons, warnings."""

    written: list[Path] = dataclasses.field(default_factory=list)
    skipped: list[images.Skipped] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)  # per photo: no face found, small faces left alone
    faces: int = 0  # faces processed in photos

    def print(self, out=None) -> None:
        out = out or sys.stderr
        for warning in self.warnings:
            print(f"warning: {warning}", file=out)
        for note in self.notes:
            print(f"note: {note}", file=out)
        if self.faces:
            print(f"processed {self.faces} face(s)", file=out)
        print(f"wrote {len(self.written)} image(s)", file=out)
        if self.skipped:
            print(f"skipped {len(self.skipped)} file(s):", file=out)
            for item in self.skipped:
                print(f"  {item.reason}", file=out)


def _key_axes(key: jax.Array) -> jax.Array:
    """One key (L, D) for the whole batch, or one per image (B, L, D) -> the model's (K=1, B or 1, L, D)."""
    return key[None] if key.ndim == 3 else key[None, None]


# Jitted with the model static: instances of one architecture share their compiled code.
@functools.partial(jax.jit, static_argnums=0)
def _anonymize(model: dbaf.DBAF, variables, images, key):
    encoding, _ = model.encode(variables, images)
    anonymized = model.anonymize(variables, encoding, _key_axes(key))
    return anonymized.images[0], (anonymized.identity_code[0], encoding.attribute_code, encoding.attribute_maps)


@functools.partial(jax.jit, static_argnums=0)
def _recover_image(model: dbaf.DBAF, variables, anonymized, key):
    return model.recover_image(variables, anonymized, _key_axes(key))[0][0]


@functools.partial(jax.jit, static_argnums=0)
def _recover_latent(model: dbaf.DBAF, variables, anonymized_identity, attribute_code, maps, key):
    encoding = dbaf.Encoding(None, attribute_code, None, tuple(maps))  # what latent recovery reads
    return model.recover_latent(variables, encoding, anonymized_identity, _key_axes(key))[0][0]


@dataclasses.dataclass
class PhotoResult:
    """A processed photo (H, W, 3) uint8, its faces, the processed crops (N, s, s, 3) in
    [-1, 1] (s the generator's size) and the quad sides of faces left alone as too small."""

    photo: np.ndarray
    faces: list[photos.AlignedFace]
    crops: np.ndarray
    too_small: list[float]


class FaceAnonymizer:
    """A loaded DBAF model with jitted anonymize and recover functions (the Python API).

    ``FaceAnonymizer(model_dir).anonymize(images, key)`` with aligned images
    (B, input_size, input_size, 3) in [-1, 1] (256 x 256 for the public checkpoints) and
    a key (L, D) from `key_for`, or one key per image (B, L, D) from `face_keys`;
    ``recover`` likewise. Each image is processed as if alone (`DBAF.for_inference`),
    so results do not depend on the batch. Whole photos: `anonymize_photo` and
    `recover_photo` with a `photos.PhotoFaces` (detector, masks, paste-back).
    """

    def __init__(self, model_dir: str | Path):
        self.model_dir = Path(model_dir)
        model, self.variables = dbaf.load(self.model_dir)
        self.fingerprint = model_directory.model_fingerprint(model.networks(), self.variables)
        self.model = model.for_inference()
        self.input_size = self.model.e4e.input_size

    def key_for(self, password: str, record: keys.KeyRecord) -> jax.Array:
        """The (L, D) key of ``password`` under ``record`` (salt and KDF parameters)."""
        model = self.model
        return keys.derive_key(password, record, model.key_generator, self.variables[dbaf.KEY_GENERATOR], model.kria.groups)

    def face_keys(self, seed: bytes, indices: Iterable[int]) -> jax.Array:
        """The keys (N, L, D) of the faces ``indices`` of a photo, from the seed
        `keys.derive_seed(password, record)` (derived once per record: scrypt is slow)."""
        model = self.model
        z = np.stack([keys.key_latents(keys.face_seed(seed, i), len(model.kria.groups), model.key_generator.style_dim) for i in indices])
        return model.key_from_z(self.variables, jnp.asarray(z))

    def _batched(self, step, crops: np.ndarray, face_keys: jax.Array, batch_size: int) -> np.ndarray:
        """``step(batch, keys)`` over crops in zero-padded batches of ``batch_size`` (one compiled shape)."""
        outputs = []
        for start in range(0, len(crops), batch_size):
            chunk = slice(start, start + batch_size)
            count = len(crops[chunk])
            outputs.append(step(pad_batch(crops[chunk], batch_size), pad_batch(np.asarray(face_keys[chunk]), batch_size))[:count])
        return np.concatenate(outputs)

    def anonymize_photo(
        self, photo: np.ndarray, seed: bytes, faces: photos.PhotoFaces, batch_size: int = 8
    ) -> PhotoResult:
        """Anonymizes every large enough face of ``photo`` (H, W, 3) uint8, each with its
        own key (``seed`` is `keys.derive_seed(password, record)`), pasted back."""
        found = faces.find(photo)
        if not found.faces:
            return PhotoResult(photo.copy(), [], np.zeros((0, 0, 0, 3), np.float32), found.too_small)
        crops = faces.crops(photo, found.faces)
        face_keys = self.face_keys(seed, [face.index for face in found.faces])
        anonymized = self._batched(lambda b, k: self.anonymize(b, k)[0], crops, face_keys, batch_size)
        out = faces.paste(photo, found.faces, anonymized, faces.masks(crops, anonymized))
        return PhotoResult(out, found.faces, anonymized, found.too_small)

    def recover_photo(
        self,
        photo: np.ndarray,
        seed: bytes,
        faces: photos.PhotoFaces,
        recorded: list[photos.AlignedFace] | None = None,
        batch_size: int = 8,
    ) -> PhotoResult:
        """Recovers the faces of an anonymized photo: at their ``recorded`` places (from
        its metadata), or where detection finds them again when None."""
        found = photos.FoundFaces(recorded, []) if recorded is not None else faces.find(photo)
        if not found.faces:
            return PhotoResult(photo.copy(), [], np.zeros((0, 0, 0, 3), np.float32), found.too_small)
        crops = faces.crops(photo, found.faces)
        face_keys = self.face_keys(seed, [face.index for face in found.faces])
        recovered = self._batched(self.recover, crops, face_keys, batch_size)
        out = faces.paste(photo, found.faces, recovered, faces.masks(crops, recovered))
        return PhotoResult(out, found.faces, recovered, found.too_small)

    def _check_size(self, batch: np.ndarray) -> None:
        if tuple(batch.shape[1:]) != (self.input_size, self.input_size, 3):
            raise ValueError(f"expected images (B, {self.input_size}, {self.input_size}, 3), got {batch.shape}")

    def anonymize(self, batch: np.ndarray, key: jax.Array) -> tuple[np.ndarray, dict]:
        """Images (B, input_size, input_size, 3) -> (anonymized images at the generator's
        size, latents for `recover_from_latents`)."""
        self._check_size(batch)
        anonymized, (identity, attribute, maps) = _anonymize(self.model, self.variables, jnp.asarray(batch), key)
        latents = {"anonymized_identity": identity, "attribute_code": attribute}
        latents.update({f"attribute_map_{i}": m for i, m in enumerate(maps)})
        return np.asarray(anonymized), jax.device_get(latents)

    def recover(self, anonymized: np.ndarray, key: jax.Array) -> np.ndarray:
        """The paper's recovery from anonymized images alone, (B, input_size, input_size, 3)."""
        self._check_size(anonymized)
        return np.asarray(_recover_image(self.model, self.variables, jnp.asarray(anonymized), key))

    def recover_from_latents(self, latents: dict, key: jax.Array) -> np.ndarray:
        """The reference's latent-space recovery from what `anonymize` returned."""
        maps = [value for name, value in sorted(latents.items()) if name.startswith("attribute_map_")]
        return np.asarray(
            _recover_latent(self.model, self.variables, latents["anonymized_identity"], latents["attribute_code"], maps, key)
        )


def _other_models_warning(fingerprints: set[str], own: str) -> list[str]:
    if not fingerprints:
        return []
    return [
        f"some inputs were anonymized by another model (fingerprint {', '.join(sorted(fingerprints))}, "
        f"this one is {own}): their recovery will not give the original faces"
    ]


def load_photo_faces(
    anonymizer: FaceAnonymizer,
    detector_dir: str | Path | None = None,
    parser_dir: str | Path | None = None,
    min_face_size: float = photos.MIN_FACE_SIZE,
) -> photos.PhotoFaces:
    """The photo path's `PhotoFaces` for ``anonymizer``: MTCNN from ``detector_dir``
    (default MODEL/mtcnn, `convert.mtcnn`), BiSeNet masks from ``parser_dir`` if given."""
    detector_dir = Path(detector_dir) if detector_dir is not None else anonymizer.model_dir / "mtcnn"
    if not detector_dir.is_dir():
        raise ModelDirectoryError(
            f"{detector_dir}: no MTCNN face detector (python -m convert.mtcnn --out {detector_dir.parent}, or --aligned for aligned crops)"
        )
    parser = paste.FaceParser.load(parser_dir) if parser_dir is not None else None
    return photos.PhotoFaces(FaceDetector.load(detector_dir), anonymizer.input_size, parser, min_face_size)


def output_path(in_dir: Path, out_dir: Path, source: Path) -> Path:
    return (out_dir / source.relative_to(in_dir)).with_suffix(".png")


def latents_path(target: Path) -> Path:
    """Where ``--save-latents`` puts the latents of output ``target``."""
    return target.with_name(target.stem + LATENTS_SUFFIX)


def plan_outputs(
    in_dir: Path, out_dir: Path, sources: list[Path]
) -> tuple[list[Path], dict[Path, Path], list[images.Skipped]]:
    """(sources to process, their output paths, sources skipped because another input
    has the same output name, e.g. ``a.jpg`` beside ``a.png``)."""
    kept, targets, skipped = [], {}, []
    first: dict[Path, Path] = {}
    for source in sources:
        target = output_path(in_dir, out_dir, source)
        if target in first:
            skipped.append(images.Skipped(source, f"{source}: its output {target} is already {first[target]}'s"))
            continue
        first[target] = source
        kept.append(source)
        targets[source] = target
    return kept, targets, skipped


def pad_batch(batch: np.ndarray, size: int) -> np.ndarray:
    """Zero-pads axis 0 to ``size``: every call then has one shape and compiles once
    (images do not interact at inference, so the padding does not change the others)."""
    return np.concatenate([batch, np.zeros((size - len(batch), *batch.shape[1:]), batch.dtype)])


def check_outputs(targets: Iterable[Path], overwrite: bool) -> None:
    """Raises OutputExistsError, before anything is written, if outputs exist and
    ``overwrite`` is not set."""
    existing = [str(p) for p in targets if p.exists()]
    if existing and not overwrite:
        shown = ", ".join(existing[:5]) + (f" and {len(existing) - 5} more" if len(existing) > 5 else "")
        raise OutputExistsError(
            f"{len(existing)} output(s) exist already ({shown}); pass --overwrite (overwrite=True) to replace them"
        )


def input_images(in_dir: Path) -> list[Path]:
    """The images below ``in_dir`` (`images.list_images`); InputError if it is no folder."""
    if not in_dir.is_dir():
        raise InputError(f"{in_dir}: no such input folder")
    return images.list_images(in_dir)


def anonymize_folder(
    anonymizer: FaceAnonymizer,
    password: str,
    in_dir: str | Path,
    out_dir: str | Path,
    batch_size: int = 8,
    overwrite: bool = False,
    save_latents: bool = False,
) -> Report:
    """Anonymizes every image below ``in_dir`` into ``out_dir`` with one fresh salt."""
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    sources, targets, collisions = plan_outputs(in_dir, out_dir, input_images(in_dir))
    outputs = list(targets.values())
    check_outputs(outputs + [latents_path(t) for t in outputs] if save_latents else outputs, overwrite)
    record = keys.new_key_record()
    key = anonymizer.key_for(password, record)
    metadata = {
        "dbaf_jax": __version__,
        "operation": "anonymize",
        "key": record.to_dict(),
        "model": {"path": str(anonymizer.model_dir), "fingerprint": anonymizer.fingerprint},
    }
    report = Report(skipped=collisions)
    with tqdm(total=len(sources), unit="img", desc="anonymize") as bar:
        for paths, batch, skipped in images.iter_batches(sources, anonymizer.input_size, batch_size):
            report.skipped += skipped
            if paths:
                anonymized, latents = anonymizer.anonymize(pad_batch(batch, batch_size), key)
                for i, source in enumerate(paths):
                    target = targets[source]
                    images.write_png(target, anonymized[i], metadata)
                    if save_latents:
                        np.savez_compressed(latents_path(target), **{k: v[i] for k, v in latents.items()})
                    report.written.append(target)
            bar.update(len(paths) + len(skipped))
    return report


def recover_folder(
    anonymizer: FaceAnonymizer,
    password: str,
    in_dir: str | Path,
    out_dir: str | Path,
    batch_size: int = 8,
    overwrite: bool = False,
    mode: str = "image",
) -> Report:
    """Recovers the PNGs of an anonymize run; each file's own salt gives its key."""
    if mode not in RECOVERY_MODES:
        raise ValueError(f"mode must be one of {RECOVERY_MODES}, got {mode!r}")
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    sources = [p for p in input_images(in_dir) if p.suffix.lower() == ".png"]
    check_outputs((output_path(in_dir, out_dir, s) for s in sources), overwrite)
    report = Report()
    other_models: set[str] = set()
    key_cache: dict[keys.KeyRecord, jax.Array] = {}
    readable: list[tuple[Path, dict, keys.KeyRecord]] = []
    for source in sources:
        try:
            meta = images.read_metadata(source)
            if meta.get("operation") != "anonymize" or "key" not in meta:
                raise ValueError(f"{source}: not an anonymized image (operation {meta.get('operation')!r})")
            record = keys.KeyRecord.from_dict(meta["key"])
            readable.append((source, meta, record))
        except (ValueError, KeyError, TypeError) as err:
            report.skipped.append(images.Skipped(source, f"{source}: unusable metadata ({err})"))
            continue
        made_by = meta.get("model", {}).get("fingerprint")
        if made_by != anonymizer.fingerprint:
            other_models.add(str(made_by))
    report.warnings += _other_models_warning(other_models, anonymizer.fingerprint)
    def load(source: Path):
        """The input of one recovery: the anonymized image, or its saved latents."""
        if mode == "image":
            return images.read_image(source, anonymizer.input_size)
        side = latents_path(source)
        if not side.is_file():
            raise ValueError(f"{source}: no {side.name} (anonymize with --save-latents for --mode latent)")
        try:
            with np.load(side) as data:
                return {k: data[k] for k in data.files}
        except Exception as err:  # noqa: BLE001 - any reader failure means "not usable"
            raise ValueError(f"{side}: cannot read latents ({err})") from None

    with tqdm(total=len(readable), unit="img", desc="recover") as bar:
        for start in range(0, len(readable), batch_size):
            chunk = readable[start : start + batch_size]
            for record in {r for _, _, r in chunk} - key_cache.keys():
                key_cache[record] = anonymizer.key_for(password, record)
            # One batch per key (an anonymize run uses one salt, so usually one per chunk).
            for record in dict.fromkeys(r for _, _, r in chunk):
                loaded, kept = [], []
                for source, meta, _ in (item for item in chunk if item[2] == record):
                    try:
                        loaded.append(load(source))
                        kept.append((source, meta))
                    except ValueError as err:
                        report.skipped.append(images.Skipped(source, str(err)))
                if not kept:
                    continue
                if mode == "image":
                    recovered = anonymizer.recover(pad_batch(np.stack(loaded), batch_size), key_cache[record])
                else:
                    latents = {k: pad_batch(np.stack([d[k] for d in loaded]), batch_size) for k in loaded[0]}
                    recovered = anonymizer.recover_from_latents(latents, key_cache[record])
                for i, (source, meta) in enumerate(kept):
                    target = output_path(in_dir, out_dir, source)
                    images.write_png(target, recovered[i], {**meta, "operation": "recover", "mode": mode})
                    report.written.append(target)
            bar.update(len(chunk))
    return report


def crop_path(target: Path, index: int) -> Path:
    """Where ``save_crops`` puts face ``index`` of output ``target``."""
    return target.with_name(f"{target.stem}.face{index}.png")


def is_saved_crop(path: Path) -> bool:
    """Whether ``path`` is a crop written by ``save_crops`` (recover passes over them)."""
    if not re.fullmatch(r".+\.face\d+", path.stem) or path.suffix != ".png":
        return False
    try:
        return images.read_metadata(path).get("operation") == "crop"
    except ValueError:
        return False


def _photo_notes(source: Path, result: PhotoResult) -> list[str]:
    notes = []
    if not result.faces:
        notes.append(f"{source}: no face found, copied unchanged")
    if result.too_small:
        sides = ", ".join(f"{side:.0f}" for side in result.too_small)
        notes.append(f"{source}: {len(result.too_small)} face(s) below the minimum size left alone (sides {sides} px)")
    return notes


def _write_photo(target: Path, result: PhotoResult, metadata: dict, save_crops: bool, report: Report) -> None:
    images.write_png(target, result.photo, {**metadata, **photos.photo_metadata(result.photo.shape, result.faces)})
    if save_crops:
        for face, face_crop in zip(result.faces, result.crops):
            images.write_png(crop_path(target, face.index), face_crop, {"operation": "crop", "of": target.name, "face": face.index})
    report.written.append(target)
    report.faces += len(result.faces)


def _plan_photo_outputs(
    in_dir: Path, out_dir: Path, inputs: list[Path], overwrite: bool, save_crops: bool
) -> tuple[list[Path], dict[Path, Path], list[images.Skipped]]:
    """`plan_outputs`, refusing (before anything is written) existing outputs and, with
    ``save_crops``, existing crops of them, unless ``overwrite``."""
    sources, targets, collisions = plan_outputs(in_dir, out_dir, inputs)
    check_outputs(targets.values(), overwrite)
    if save_crops:
        check_outputs([p for t in targets.values() for p in t.parent.glob(f"{t.stem}.face*.png")], overwrite)
    return sources, targets, collisions


def anonymize_photo_folder(
    anonymizer: FaceAnonymizer,
    faces: photos.PhotoFaces,
    password: str,
    in_dir: str | Path,
    out_dir: str | Path,
    batch_size: int = 8,
    overwrite: bool = False,
    record: keys.KeyRecord | None = None,
    save_crops: bool = False,
) -> Report:
    """Anonymizes every face of every photo below ``in_dir`` into same-size PNGs in
    ``out_dir``; ``record`` (a key file's) or one fresh salt for the run."""
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    sources, targets, collisions = _plan_photo_outputs(in_dir, out_dir, input_images(in_dir), overwrite, save_crops)
    record = record or keys.new_key_record()
    seed = keys.derive_seed(password, record)
    metadata = {
        "dbaf_jax": __version__,
        "operation": "anonymize",
        "key": record.to_dict(),
        "model": {"path": str(anonymizer.model_dir), "fingerprint": anonymizer.fingerprint},
    }
    report = Report(skipped=collisions)
    for source in tqdm(sources, unit="photo", desc="anonymize"):
        try:
            photo = images.read_photo(source)
        except ValueError as err:
            report.skipped.append(images.Skipped(source, str(err)))
            continue
        result = anonymizer.anonymize_photo(photo, seed, faces, batch_size)
        report.notes += _photo_notes(source, result)
        _write_photo(targets[source], result, metadata, save_crops, report)
    return report


def _recorded_faces(source: Path, photo: np.ndarray, size: int) -> tuple[dict | None, keys.KeyRecord | None, list | None]:
    """(metadata, its key record, its faces) of an anonymized photo; (None, None, None)
    when it has no metadata; ValueError or InputError when the metadata is unusable."""
    try:
        meta = images.read_metadata(source)
    except ValueError:
        return None, None, None
    if meta.get("operation") != "anonymize" or "key" not in meta:
        raise ValueError(f"{source}: not an anonymized photo (operation {meta.get('operation')!r})")
    if "faces" not in meta:
        raise ValueError(f"{source}: an anonymized aligned crop; recover it with --aligned")
    try:
        record = keys.KeyRecord.from_dict(meta["key"])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{source}: unusable key record ({err})") from None
    try:
        recorded = photos.faces_from_metadata(meta, photo.shape, size)
    except InputError as err:
        raise ValueError(f"{source}: {err}") from None
    return meta, record, recorded


def recover_photo_folder(
    anonymizer: FaceAnonymizer,
    faces: photos.PhotoFaces,
    password: str,
    in_dir: str | Path,
    out_dir: str | Path,
    batch_size: int = 8,
    overwrite: bool = False,
    record: keys.KeyRecord | None = None,
    save_crops: bool = False,
) -> Report:
    """Recovers the photos of an anonymize run. A photo's own metadata gives its key
    record and face transforms; without metadata (e.g. re-encoded after sharing),
    ``record`` (a key file's) gives the key and detection finds the faces again."""
    in_dir, out_dir = Path(in_dir), Path(out_dir)
    inputs = [p for p in input_images(in_dir) if not is_saved_crop(p)]
    sources, targets, collisions = _plan_photo_outputs(in_dir, out_dir, inputs, overwrite, save_crops)
    report = Report(skipped=collisions)
    seeds: dict[keys.KeyRecord, bytes] = {}
    other_models: set[str] = set()
    for source in tqdm(sources, unit="photo", desc="recover"):
        try:
            photo = images.read_photo(source)
            meta, photo_record, recorded = _recorded_faces(source, photo, anonymizer.input_size)
        except ValueError as err:
            report.skipped.append(images.Skipped(source, str(err)))
            continue
        if meta is None:
            if record is None:
                report.skipped.append(images.Skipped(source, f"{source}: no dbaf_jax metadata; pass a key file to find its faces by detection"))
                continue
            photo_record, meta = record, {"key": record.to_dict(), "detected": True}
        elif meta.get("model", {}).get("fingerprint") != anonymizer.fingerprint:
            other_models.add(str(meta.get("model", {}).get("fingerprint")))
        if photo_record not in seeds:
            seeds[photo_record] = keys.derive_seed(password, photo_record)
        result = anonymizer.recover_photo(photo, seeds[photo_record], faces, recorded, batch_size)
        report.notes += _photo_notes(source, result)
        _write_photo(targets[source], result, {**meta, "operation": "recover", "mode": "image"}, save_crops, report)
    report.warnings += _other_models_warning(other_models, anonymizer.fingerprint)
    return report
