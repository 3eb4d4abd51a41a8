"""Anonymize faces with a password and recover them with it: the Python API.

``FaceAnonymizer(model_dir)`` runs a DBAF model directory on arrays of aligned faces
(`anonymize`, `recover`, `recover_from_latents`) and on whole photos
(`anonymize_photo`, `recover_photo`); `anonymize_folder`, `recover_folder` and their
photo counterparts run it over folders of images and are what the commands
``python -m dbaf_jax.anonymize`` and ``python -m dbaf_jax.recover`` call.

Each folder run draws a fresh random salt (or takes a key file's); password + salt
give the key (`dbaf_jax.keys`). Every output PNG carries `dbaf_jax.metadata`: the salt
and KDF parameters and which model made it (`model_directory.model_fingerprint` of
its weights), never the password. Recovery reads them back, checked as untrusted
input, so only the password is needed. A wrong password is not an error: it yields
another face, which is what keeps the original private. Images anonymized by another
model are refused (`ModelMismatchError`) unless ``ignore_model_mismatch`` is set.

Aligned inputs are read at the encoder's input size (256 for the public checkpoints;
other sizes are resized); outputs are PNGs named after their inputs (``face.jpg`` ->
``face.png``, sub-folders kept). Unreadable files are skipped and reported. Outputs are
created atomically and, unless ``overwrite`` is set, exclusively: an existing file is
never replaced, even one another run wrote meanwhile (`images.write_file`).

The weights are placed on the devices once; a batch is split over all local devices.
Inputs decode on worker threads ahead of the model and outputs encode behind it
(`dbaf_jax.pipeline`), so the device is kept busy. ``dtype='bfloat16'`` computes every
network in bfloat16 (`docs/decisions.md` gives the measured difference from float32).

Recovery from the anonymized image alone re-encodes it and applies KRIA with the key
(the paper's path). ``save_latents`` additionally writes ``NAME.latents.npz`` beside
each output with what the reference's latent-space recovery needs (the anonymized
identity code, the attribute code and MAAR's maps of the original); recover with
``mode='latent'`` to use it. Those files describe the original face: keep them private.

Errors the user can cause raise `dbaf_jax.errors` types (OutputExistsError,
PasswordFileError, InputError, ModelMismatchError, ModelDirectoryError), never exit
the interpreter.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dbaf_jax import images, keys, metadata, model_directory, output_folder, pipeline, precision, sharding, sidecars
from dbaf_jax.errors import InputError, ModelDirectoryError, ModelMismatchError, OutputExistsError, PasswordFileError
from dbaf_jax.faces import ledger, paste, photos
from dbaf_jax.faces.detect import FaceDetector
from dbaf_jax.models import dbaf, families

LATENTS_SUFFIX = ".latents.npz"
RECOVERY_MODES = ("image", "latent")
# Per device: on an accelerator 32 faces (~5 GB of activations at 256 px) keep it busy;
# on a CPU larger batches are not faster and only delay the first outputs.
ACCELERATOR_BATCH = 32
CPU_BATCH = 8


def default_devices() -> list:
    """Every local accelerator; on a CPU host, its first device only: forced host
    devices split one CPU's threads, so a batch split over them gains nothing."""
    devices = jax.local_devices()
    return devices[:1] if devices[0].platform == "cpu" else devices


def default_batch_size(devices: list | None = None) -> int:
    """The batch the commands use unless told: 32 per local accelerator, 8 on CPUs."""
    devices = devices or jax.local_devices()
    return CPU_BATCH if devices[0].platform == "cpu" else ACCELERATOR_BATCH * len(devices)


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


# Exit statuses of a run that finished but did not do all it was asked (README): 1 is
# an error that stopped it, 2 a usage error (argparse).
EXIT_SKIPPED = 3  # an input was skipped (unreadable, unusable metadata, ...)
EXIT_FACES_LEFT = 4  # a detected face was left as it was (--min-face-size)
EXIT_FALLBACK = 5  # with --strict: a face was hidden by the fallback instead of anonymized


@dataclasses.dataclass
class Report:
    """What a folder run did: written outputs, skipped inputs with reasons, warnings,
    and for photos the faces found, processed (anonymized or recovered), hidden by
    the fallback (`faces.paste.hide`) and left by the user's choice; `status` is the
    command's exit status."""

    written: list[Path] = dataclasses.field(default_factory=list)
    skipped: list[images.Skipped] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)  # per photo: no face found, faces hidden or left
    faces: int = 0  # faces processed (anonymized or recovered) in photos
    photos: int = 0  # photos read (0 for aligned runs)
    faces_found: int = 0
    faces_hidden: int = 0
    faces_left: int = 0
    strict: bool = False  # the fallback counts as a failure (EXIT_FALLBACK)
    kept: list[Path] = dataclasses.field(default_factory=list)  # --resume: complete outputs of an earlier run
    operation: str = "anonymize"
    unverified: int = 0  # recovery without metadata: detections not matched to the key file's face ledger

    @property
    def status(self) -> int:
        """0 when every input was written and every face found was processed as asked."""
        if self.skipped:
            return EXIT_SKIPPED
        if self.faces_left:
            return EXIT_FACES_LEFT
        if self.strict and self.faces_hidden:
            return EXIT_FALLBACK
        return 0

    def print(self, out=None) -> None:
        out = out or sys.stderr
        for warning in self.warnings:
            print(f"warning: {warning}", file=out)
        for note in self.notes:
            print(f"note: {note}", file=out)
        if self.skipped:
            print(f"skipped {len(self.skipped)} file(s):", file=out)
            for item in self.skipped:
                print(f"  {item.reason}", file=out)
        if self.photos:
            done = "anonymized" if self.operation == "anonymize" else "recovered"
            resumed = f", {len(self.kept)} kept from an earlier run" if self.kept else ""
            print(
                f"summary: {self.photos} photo(s) read, {len(self.written)} written{resumed}, {len(self.skipped)} skipped; "
                f"{self.faces_found} face(s) found, {self.faces} {done}, {self.faces_hidden} hidden by the fallback "
                f"(pixelated, irreversible), {self.faces_left} left as they were (--min-face-size)"
                + (f", {self.unverified} detection(s) not verified as anonymized faces, left as they are" if self.unverified else ""),
                file=out,
            )
        else:
            print(f"wrote {len(self.written)} image(s)", file=out)


def _key_axes(key: jax.Array) -> jax.Array:
    """One key (L, D) for the whole batch, or one per image (B, L, D) -> the model's (K=1, B or 1, L, D)."""
    return key[None] if key.ndim == 3 else key[None, None]


# Jitted with the model static: instances of one architecture share their compiled code.
@functools.partial(jax.jit, static_argnums=(0, 4))
def anonymize_program(model, variables, images, key, with_latents: bool):
    """Anonymized images (B, s, s, 3) float32 of placed images and a placed key (`FaceAnonymizer.place`,
    `place_key`), and with ``with_latents`` DBAF's (identity code, attribute code, attribute maps)."""
    if not with_latents:
        return model.anonymize_images(variables, images, _key_axes(key))[0].astype(jnp.float32), None
    # DBAF's latent-space recovery also needs the codes of this anonymization.
    encoding, _ = model.encode(variables, images)
    anonymized = model.anonymize(variables, encoding, _key_axes(key))
    latents = (anonymized.identity_code[0], encoding.attribute_code, encoding.attribute_maps)
    return anonymized.images[0].astype(jnp.float32), latents


@functools.partial(jax.jit, static_argnums=0)
def _recover_image(model, variables, anonymized, key):
    return model.recover_images(variables, anonymized, _key_axes(key))[0].astype(jnp.float32)


@functools.partial(jax.jit, static_argnums=0)
def _recover_latent(model: dbaf.DBAF, variables, anonymized_identity, attribute_code, maps, key):
    encoding = dbaf.Encoding(None, attribute_code, None, tuple(maps))  # what latent recovery reads
    return model.recover_latent(variables, encoding, anonymized_identity, _key_axes(key))[0][0].astype(jnp.float32)


def _latents_dict(latents) -> dict[str, Any]:
    identity, attribute, maps = latents
    named = {"anonymized_identity": identity, "attribute_code": attribute}
    named.update({f"attribute_map_{i}": m for i, m in enumerate(maps)})
    return named


def _unpadded(outputs, count: int):
    """``outputs`` (a pytree of batch-first arrays) cut back to ``count`` rows; as is when unpadded."""
    return jax.tree.map(lambda x: x if len(x) == count else x[:count], outputs)


@dataclasses.dataclass
class PhotoResult:
    """A processed photo (H, W, 3) uint8, its faces, the processed crops (N, s, s, 3) in
    [-1, 1] (s the generator's size), the quad sides of faces left alone as too small,
    the boxes of faces hidden by the fallback and the count of detections recovery left
    unverified."""

    photo: np.ndarray
    faces: list[photos.AlignedFace]
    crops: np.ndarray
    too_small: list[float]
    hidden: list[np.ndarray] = dataclasses.field(default_factory=list)
    # Recovery without metadata: detections that match no face of the key file's ledger.
    unverified: int = 0
    unverified_why: str = ""

    @property
    def found(self) -> int:
        return len(self.faces) + len(self.too_small) + len(self.hidden) + self.unverified


class FaceAnonymizer:
    """A loaded model of any family (`models.families`: DBAF, iFADIT) with jitted
    anonymize and recover functions (the Python API).

    ``FaceAnonymizer(model_dir).anonymize(images, key)`` with aligned images
    (B, input_size, input_size, 3) in [-1, 1] (256 x 256 for the public checkpoints) and
    a key (L, D) from `key_for`, or one key per image (B, L, D) from `face_keys`;
    ``recover`` likewise. Each image is processed as if alone (`DBAF.for_inference`),
    so results do not depend on the batch. Whole photos: `anonymize_photo` and
    `recover_photo` with a `photos.PhotoFaces` (detector, masks, paste-back).

    The variables are placed once on a mesh over ``devices`` (default:
    `default_devices`), replicated; batches are split over it, padded to a multiple of
    `batch_multiple` (a batch of that multiple needs no padding). ``dtype`` is the
    compute dtype of every network ("float32", or "bfloat16" for about twice the speed on accelerators). The
    ``*_async`` methods return device arrays without waiting for them.
    """

    def __init__(self, model_dir: str | Path, dtype: str = "float32", devices: list | None = None, without_manifest: bool = False):
        precision.check_compute_dtype(dtype)
        self.model_dir = Path(model_dir)
        model, variables = families.load(self.model_dir, without_manifest)  # without_manifest: `model_directory.load_model`
        self.fingerprint = model_directory.model_fingerprint(model.networks(), variables)
        self.trained_recovery = model_directory.trained_recovery(self.model_dir)  # None: not recorded
        self.dtype = dtype
        self.model = model.for_inference().with_compute_dtype(dtype)
        variables = self.model.compute_variables(variables)  # cast once, not per batch
        devices = list(devices or default_devices())
        mesh = sharding.make_mesh(devices=devices)
        self.batch_multiple = len(devices)
        self._batch_sharding = sharding.batch_sharding(mesh)
        self._replicated = sharding.replicated(mesh)
        self.variables = jax.device_put(variables, self._replicated)
        self.input_size = self.model.input_size
        self.output_size = self.model.output_size

    def key_for(self, password: str, record: keys.KeyRecord) -> jax.Array:
        """The (L, D) key of ``password`` under ``record`` (salt and KDF parameters)."""
        return self.model.key_from_z(self.variables, jnp.asarray(keys.key_latents(keys.derive_seed(password, record), *self.model.key_shape)))

    def face_keys(self, seed: bytes, indices: Iterable[int]) -> jax.Array:
        """The keys (N, L, D) of the faces ``indices`` of a photo, from the seed
        `keys.derive_seed(password, record)` (derived once per record: scrypt is slow)."""
        z = np.stack([keys.key_latents(keys.face_seed(seed, i), *self.model.key_shape) for i in indices])
        return self.model.key_from_z(self.variables, jnp.asarray(z))

    def padded_size(self, batch_size: int) -> int:
        """``batch_size`` rounded up to a multiple of the devices the batch is split over."""
        return -(-batch_size // self.batch_multiple) * self.batch_multiple

    def place(self, batch: np.ndarray) -> jax.Array:
        """``batch`` on the devices, padded to split evenly (`padded_size`, `pad_batch`)."""
        self._check_size(batch)
        return jax.device_put(pad_batch(np.asarray(batch), self.padded_size(len(batch))), self._batch_sharding)

    def place_key(self, key: jax.Array, count: int) -> jax.Array:
        """A key (L, D), replicated, or per-image keys (count, L, D), padded and split as `place` splits ``count`` images."""
        if key.ndim == 2:
            return jax.device_put(key, self._replicated)
        return jax.device_put(pad_batch(np.asarray(key), self.padded_size(count)), self._batch_sharding)

    def _batched(self, step, crops: np.ndarray, face_keys: jax.Array, batch_size: int) -> np.ndarray:
        """``step(batch, keys)`` over crops in padded batches of ``batch_size`` (one compiled shape)."""
        size = self.padded_size(batch_size)
        outputs = [
            step(pad_batch(crops[start : start + size], size), pad_batch(np.asarray(face_keys[start : start + size]), size))
            for start in range(0, len(crops), size)
        ]
        return np.concatenate([np.asarray(out) for out in outputs])[: len(crops)]

    def anonymize_photo(
        self, photo: np.ndarray, seed: bytes, faces: photos.PhotoFaces, batch_size: int = CPU_BATCH
    ) -> PhotoResult:
        """Anonymizes every face of ``photo`` (H, W, 3) uint8 that detection finds, each
        with its own key (``seed`` is `keys.derive_seed(password, record)`), pasted back;
        those the model cannot take are hidden (`faces.paste.hide`)."""
        return self.anonymize_found(photo, seed, faces, faces.find(photo), batch_size)

    def anonymize_found(
        self, photo: np.ndarray, seed: bytes, faces: photos.PhotoFaces, found: photos.FoundFaces, batch_size: int = CPU_BATCH
    ) -> PhotoResult:
        """Anonymizes the faces ``found`` in ``photo`` (H, W, 3) uint8 (each face's key
        from its index and ``seed``), pastes them back and hides ``found.unusable``."""
        return self._process_photo(photo, seed, faces, found, lambda b, k: self.anonymize_async(b, k)[0], batch_size)

    def recover_photo(
        self,
        photo: np.ndarray,
        seed: bytes,
        faces: photos.PhotoFaces,
        recorded: list[photos.AlignedFace] | None = None,
        batch_size: int = CPU_BATCH,
    ) -> PhotoResult:
        """Recovers the faces of an anonymized photo: at their ``recorded`` places (from
        its metadata), or where detection finds them again when None."""
        found = photos.FoundFaces(recorded, []) if recorded is not None else faces.find(photo)
        return self._process_photo(photo, seed, faces, found, self.recover_async, batch_size)

    def _process_photo(self, photo, seed, faces: photos.PhotoFaces, found: photos.FoundFaces, step, batch_size) -> PhotoResult:
        out = photo.copy()
        results = np.zeros((0, 0, 0, 3), np.float32)
        if found.faces:
            crops = faces.crops(photo, found.faces)
            face_keys = self.face_keys(seed, [face.index for face in found.faces])
            results = self._batched(step, crops, face_keys, batch_size)
            out = faces.paste(photo, found.faces, results, faces.masks(crops, results))
        for box in found.unusable:
            out = paste.hide(out, box)
        return PhotoResult(out, found.faces, results, found.too_small, list(found.unusable))

    def _check_size(self, batch: np.ndarray) -> None:
        if tuple(batch.shape[1:]) != (self.input_size, self.input_size, 3):
            raise ValueError(f"expected images (B, {self.input_size}, {self.input_size}, 3), got {batch.shape}")

    def anonymize_async(self, batch: np.ndarray, key: jax.Array, with_latents: bool = False) -> tuple[jax.Array, Any]:
        """`anonymize` without waiting: device arrays, the latents a dict or None."""
        if with_latents:
            self._check_latent_recovery()
        count = len(batch)
        outputs = anonymize_program(self.model, self.variables, self.place(batch), self.place_key(key, count), with_latents)
        anonymized, latents = _unpadded(outputs, count)
        return anonymized, (_latents_dict(latents) if with_latents else None)

    def anonymize(self, batch: np.ndarray, key: jax.Array, with_latents: bool = False) -> tuple[np.ndarray, dict | None]:
        """Images (B, input_size, input_size, 3) -> (anonymized images (B, s, s, 3) at the
        generator's size s, float32, and with ``with_latents`` the latents for
        `recover_from_latents` (else None: they are not fetched))."""
        return jax.device_get(self.anonymize_async(batch, key, with_latents))

    def recover_async(self, anonymized: np.ndarray, key: jax.Array) -> jax.Array:
        count = len(anonymized)
        return _unpadded(_recover_image(self.model, self.variables, self.place(anonymized), self.place_key(key, count)), count)

    def recover(self, anonymized: np.ndarray, key: jax.Array) -> np.ndarray:
        """The paper's recovery from anonymized images alone, (B, input_size, input_size, 3)."""
        return np.asarray(self.recover_async(anonymized, key))

    @property
    def latent_recovery(self) -> bool:
        """Whether the model has the reference's latent-space recovery (DBAF's)."""
        return self.model.FAMILY == dbaf.FAMILY

    def _check_latent_recovery(self) -> None:
        if not self.latent_recovery:
            raise InputError(
                f"{self.model_dir}: latent-space recovery (--save-latents, --mode latent) is DBAF's; "
                f"this {self.model.FAMILY} model recovers from the image alone"
            )

    def latent_spec(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Name -> (shape, dtype) of one image's latents as `anonymize` gives them (what
        `sidecars.read_latents` checks a sidecar against); traced, not computed."""
        self._check_latent_recovery()
        images_shape = jax.ShapeDtypeStruct((1, self.input_size, self.input_size, 3), jnp.float32)
        z_shape = jax.ShapeDtypeStruct(tuple(self.model.key_shape), jnp.float32)

        def latents(images, z):
            return anonymize_program(self.model, self.variables, images, self.model.key_from_z(self.variables, z), True)[1]

        named = _latents_dict(jax.eval_shape(latents, images_shape, z_shape))
        return {name: (tuple(value.shape[1:]), np.dtype(value.dtype)) for name, value in named.items()}

    def recover_from_latents_async(self, latents: dict, key: jax.Array) -> jax.Array:
        self._check_latent_recovery()
        count = len(latents["attribute_code"])
        placed = {name: jax.device_put(pad_batch(np.asarray(value), self.padded_size(count)), self._batch_sharding) for name, value in latents.items()}
        maps = [placed[f"attribute_map_{i}"] for i in range(sum(name.startswith("attribute_map_") for name in placed))]
        recovered = _recover_latent(
            self.model, self.variables, placed["anonymized_identity"], placed["attribute_code"], maps, self.place_key(key, count)
        )
        return _unpadded(recovered, count)

    def recover_from_latents(self, latents: dict, key: jax.Array) -> np.ndarray:
        """The reference's latent-space recovery from what `anonymize` returned."""
        return np.asarray(self.recover_from_latents_async(latents, key))


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
        # convert.mtcnn --out D writes D/mtcnn: name the command that makes this very folder.
        if detector_dir.name == "mtcnn":
            hint = f"python -m convert.mtcnn --out {detector_dir.parent} writes it"
        else:
            hint = f"python -m convert.mtcnn --out {detector_dir} writes {detector_dir / 'mtcnn'}: pass that as --detector"
        raise ModelDirectoryError(f"{detector_dir}: no MTCNN face detector ({hint}; or --aligned for aligned crops)")
    parser = paste.FaceParser.load(parser_dir) if parser_dir is not None else None
    return photos.PhotoFaces(FaceDetector.load(detector_dir), anonymizer.input_size, parser, min_face_size)


def output_path(in_dir: Path, out_dir: Path, source: Path) -> Path:
    return (out_dir / source.relative_to(in_dir)).with_suffix(".png")


def latents_path(target: Path) -> Path:
    """Where ``--save-latents`` puts the latents of output ``target``."""
    return target.with_name(target.stem + LATENTS_SUFFIX)


def crop_path(target: Path, index: int) -> Path:
    """Where ``save_crops`` puts face ``index`` of output ``target``."""
    return target.with_name(f"{target.stem}.face{index}.png")


def pad_batch(batch: np.ndarray, size: int) -> np.ndarray:
    """Pads axis 0 to ``size`` with copies of the last entry: every call then has one
    shape and compiles once (images do not interact at inference, so the padding does
    not change the others). Copies, not zeros: an all-zero image is a degenerate input
    (a randomly initialised ArcFace maps it to the zero vector, and iFADIT's identity
    normalisation then gives NaN)."""
    if len(batch) == 0:
        raise ValueError("an empty batch has no entry to pad with")
    return np.concatenate([batch, np.repeat(batch[-1:], size - len(batch), axis=0)])


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
    """The images below ``in_dir`` (`images.list_images`); InputError naming it when it
    is missing or a file."""
    if not in_dir.exists():
        raise InputError(f"{in_dir}: no such input folder")
    if not in_dir.is_dir():
        raise InputError(f"{in_dir}: the input is a file, not a folder of images")
    return images.list_images(in_dir)


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
    inputs = input_images(in_dir)
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


def _anonymization_metadata(anonymizer: FaceAnonymizer, record: keys.KeyRecord) -> dict:
    return metadata.anonymization(record, anonymizer.fingerprint)


def _write_latents(path: Path, latents: dict[str, np.ndarray], overwrite: bool) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as file:
            np.savez_compressed(file, **latents)

    images.write_file(path, write, overwrite)


def anonymize_folder(
    anonymizer: FaceAnonymizer,
    password: str,
    in_dir: str | Path,
    out_dir: str | Path,
    batch_size: int | None = None,
    overwrite: bool = False,
    save_latents: bool = False,
) -> Report:
    """Anonymizes every aligned face image below ``in_dir`` into ``out_dir`` with one fresh salt."""
    plan = plan_outputs(in_dir, out_dir)
    outputs = list(plan.targets.values())
    check_outputs(outputs + [latents_path(t) for t in outputs] if save_latents else outputs, overwrite)
    batch_size = anonymizer.padded_size(batch_size or default_batch_size())
    record = keys.new_key_record()
    key = anonymizer.key_for(password, record)
    meta = _anonymization_metadata(anonymizer, record)
    report = Report(skipped=plan.skipped, notes=list(plan.notes))

    def dispatched() -> Iterator:
        for paths, batch, skipped in images.iter_batches(plan.sources, anonymizer.input_size, batch_size):
            report.skipped += skipped
            outputs = anonymizer.anonymize_async(pad_batch(batch, batch_size), key, save_latents) if paths else None
            yield paths, len(skipped), outputs

    def write(target: Path, image: np.ndarray, latents: dict | None) -> None:
        images.write_png(target, image, meta, overwrite)
        if latents is not None:
            _write_latents(latents_path(target), latents, overwrite)

    with tqdm(total=len(plan.sources), unit="img", desc="anonymize") as bar, pipeline.Writer(2 * batch_size) as writer:
        for paths, skipped, outputs in pipeline.one_behind(dispatched()):
            anonymized, latents = jax.device_get(outputs) if paths else (None, None)
            for i, source in enumerate(paths):
                row = {name: value[i] for name, value in latents.items()} if latents is not None else None
                writer.submit(functools.partial(write, plan.targets[source], anonymized[i], row))
                report.written.append(plan.targets[source])
            bar.update(len(paths) + skipped)
    return report


def _checked_anonymizations(
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


def _recovered_metadata(made: metadata.Anonymization, mode: str) -> dict:
    return {**made.fields, "operation": "recover", "mode": mode}


def recover_folder(
    anonymizer: FaceAnonymizer,
    password: str,
    in_dir: str | Path,
    out_dir: str | Path,
    batch_size: int | None = None,
    overwrite: bool = False,
    mode: str = "image",
    ignore_model_mismatch: bool = False,
) -> Report:
    """Recovers the aligned PNGs of an anonymize run; each file's own salt gives its key."""
    if mode not in RECOVERY_MODES:
        raise ValueError(f"mode must be one of {RECOVERY_MODES}, got {mode!r}")
    plan = plan_outputs(in_dir, out_dir, keep=lambda path: path.suffix.lower() == ".png")
    check_outputs(plan.targets.values(), overwrite)
    batch_size = anonymizer.padded_size(batch_size or default_batch_size())
    report = Report(skipped=plan.skipped, notes=list(plan.notes))
    readable: list[tuple[Path, metadata.Anonymization]] = []
    for source, made in _checked_anonymizations(anonymizer, plan, report, ignore_model_mismatch).items():
        if made is None:
            report.skipped.append(images.Skipped(source, f"{source}: no {images.METADATA_CHUNK} metadata (not written by dbaf_jax.anonymize)"))
        elif made.is_photo:
            report.skipped.append(images.Skipped(source, f"{source}: an anonymized whole photo; recover it without --aligned"))
        else:
            readable.append((source, made))

    spec = anonymizer.latent_spec() if mode == "latent" else None

    def load(item: tuple[Path, metadata.Anonymization]):
        """The input of one recovery: the anonymized image, or its saved latents."""
        source = item[0]
        if mode == "image":
            return images.read_image(source, anonymizer.input_size)
        side = latents_path(source)
        if not side.is_file():
            raise ValueError(f"{source}: no {side.name} (anonymize with --save-latents for --mode latent)")
        return sidecars.read_latents(side, spec)

    key_cache: dict[keys.KeyRecord, jax.Array] = {}

    def dispatched() -> Iterator:
        """(items, recovered on the device) per batch of inputs recorded with one key
        (an anonymize run uses one salt, so usually one batch per read batch)."""
        loaded = pipeline.read_ahead(readable, load, depth=2 * batch_size)
        for chunk in _chunks(loaded, batch_size):
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
                    recovered = anonymizer.recover_async(pad_batch(np.stack(values), batch_size), key_cache[record])
                else:
                    latents = {k: pad_batch(np.stack([v[k] for v in values]), batch_size) for k in values[0]}
                    recovered = anonymizer.recover_from_latents_async(latents, key_cache[record])
                yield [(source, made) for source, made, _ in kept], len(chunk) - len(kept), recovered

    with tqdm(total=len(readable), unit="img", desc="recover") as bar, pipeline.Writer(2 * batch_size) as writer:
        for kept, dropped, recovered in pipeline.one_behind(dispatched()):
            pixels = np.asarray(recovered) if kept else None
            for i, (source, made) in enumerate(kept):
                target = plan.targets[source]
                writer.submit(functools.partial(images.write_png, target, pixels[i], _recovered_metadata(made, mode), overwrite))
                report.written.append(target)
            bar.update(len(kept) + dropped)
    return report


def _chunks(items: Iterable, size: int) -> Iterator[list]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def is_saved_crop(path: Path) -> bool:
    """Whether ``path`` is a crop written by ``save_crops`` (recover passes over them)."""
    if not re.fullmatch(r".+\.face\d+", path.stem) or path.suffix != ".png":
        return False
    try:
        return images.read_metadata(path).get("operation") == "crop"
    except ValueError:
        return False


def _photo_notes(source: Path, result: PhotoResult, meta: dict) -> list[str]:
    """What a photo's outcome needs said, in the words that are true of it."""
    notes = []
    if meta.get("operation") == "recover" and not meta.get("detected"):
        if not result.faces:
            notes.append(f"{source}: its metadata records no face; copied unchanged")
    elif not result.found:
        notes.append(f"{source}: no face found{' by detection' if meta.get('detected') else ''}, copied unchanged")
    if result.too_small:
        sides = ", ".join(f"{side:.0f}" for side in result.too_small)
        notes.append(f"{source}: {len(result.too_small)} face(s) below --min-face-size left as they were (sides {sides} px)")
    if result.hidden:
        notes.append(f"{source}: {len(result.hidden)} face(s) the model cannot take (unusable landmarks) hidden by pixelation")
    if result.unverified:
        notes.append(f"{source}: {result.unverified} detected face(s) not verified as anonymized ({result.unverified_why}): left as they are")
    return notes


def _write_photo(target: Path, result: PhotoResult, meta: dict, save_crops: bool, overwrite: bool) -> None:
    images.write_png(target, result.photo, {**meta, **photos.photo_metadata(result.photo.shape, result.faces)}, overwrite)
    if save_crops:
        for face, face_crop in zip(result.faces, result.crops):
            crop_meta = {"operation": "crop", "of": target.name, "face": face.index}
            images.write_png(crop_path(target, face.index), face_crop, crop_meta, overwrite)


def _plan_photo_outputs(
    in_dir: str | Path, out_dir: str | Path, overwrite: bool, save_crops: bool, keep: Callable[[Path], bool] = lambda path: True
) -> Plan:
    """`plan_outputs`, refusing (before anything is written) existing outputs and, with
    ``save_crops``, existing crops of them, unless ``overwrite``."""
    plan = plan_outputs(in_dir, out_dir, keep)
    check_outputs(plan.targets.values(), overwrite)
    if save_crops:
        check_outputs([p for t in plan.targets.values() for p in t.parent.glob(f"{t.stem}.face*.png")], overwrite)
    return plan


def _photo_run(
    plan: Plan,
    sources: list[Path],
    process: Callable[[Path, np.ndarray], tuple[PhotoResult, dict] | images.Skipped],
    report: Report,
    desc: str,
    save_crops: bool,
    overwrite: bool | Callable[[Path], bool],
) -> Report:
    """Runs ``process(source, photo)`` over ``sources`` (of ``plan``), decoding the next
    photos and encoding finished ones on worker threads; ``process`` returns the result
    and its output's metadata, or a Skipped. ``overwrite`` may be per target. Adds to
    and returns ``report``."""
    with pipeline.Writer(max_pending=4) as writer:
        for source, read in tqdm(pipeline.read_ahead(sources, images.read_photo_noted, depth=4), total=len(sources), unit="photo", desc=desc):
            report.photos += 1
            if isinstance(read, ValueError):
                report.skipped.append(images.Skipped(source, str(read)))
                continue
            photo, note = read
            report.notes += [note] if note else []
            outcome = process(source, photo)
            if isinstance(outcome, images.Skipped):
                report.skipped.append(outcome)
                continue
            result, meta = outcome
            report.notes += _photo_notes(source, result, meta)
            target = plan.targets[source]
            replace = overwrite(target) if callable(overwrite) else overwrite
            writer.submit(functools.partial(_write_photo, target, result, meta, save_crops, replace))
            report.written.append(target)
            report.faces += len(result.faces)
            report.faces_found += result.found
            report.faces_hidden += len(result.hidden)
            report.faces_left += len(result.too_small)
            report.unverified += result.unverified
    return report


def anonymize_photo_folder(
    anonymizer: FaceAnonymizer,
    faces: photos.PhotoFaces,
    password: str,
    in_dir: str | Path,
    out_dir: str | Path,
    batch_size: int | None = None,
    overwrite: bool = False,
    record: keys.KeyRecord | None = None,
    save_crops: bool = False,
    strict: bool = False,
    resume: bool = False,
    face_ledger: Path | None = None,
) -> Report:
    """Anonymizes every face of every photo below ``in_dir`` into same-size PNGs in
    ``out_dir``; ``record`` (a key file's) or one fresh salt for the run. ``strict``:
    faces hidden by the fallback make the run's `Report.status` EXIT_FALLBACK.
    ``face_ledger`` (with a key file: `ledger.ledger_path`) gets each photo's anonymized
    faces, which recovery without metadata needs to tell them from any other face.
    ``resume`` continues an interrupted run (`resumable_outputs`): complete outputs are
    kept and counted, the rest made, with the earlier run's salt."""
    if resume and overwrite:
        raise InputError("--resume keeps complete outputs and --overwrite replaces them: pass one of them")
    if resume:
        plan = plan_outputs(in_dir, out_dir)
        kept, redo, earlier = resumable_outputs(anonymizer, plan, save_crops)
        if record is not None and earlier is not None and earlier != record:
            raise InputError(f"{plan.out_dir}: its outputs were made with another salt than the key file's; resume without --key-file or pass --overwrite")
        record = record or earlier
    else:
        plan = _plan_photo_outputs(in_dir, out_dir, overwrite, save_crops)
        kept, redo = [], set()
    batch_size = batch_size or default_batch_size()
    record = record or keys.new_key_record()
    seed = keys.derive_seed(password, record)
    meta = _anonymization_metadata(anonymizer, record)

    def process(source: Path, photo: np.ndarray):
        result = anonymizer.anonymize_photo(photo, seed, faces, batch_size)
        if face_ledger is not None and result.faces:  # what recovery without metadata may touch (`ledger`)
            published = faces.crops(result.photo, result.faces)
            transforms = [face.transform for face in result.faces]
            ledger.append(face_ledger, ledger.entries(photo.shape, [face.index for face in result.faces], transforms, published))
        return result, meta

    report = Report(skipped=list(plan.skipped), notes=list(plan.notes), strict=strict, kept=kept)
    sources = [source for source in plan.sources if plan.targets[source] not in kept]
    return _photo_run(plan, sources, process, report, "anonymize", save_crops, lambda target: overwrite or target in redo)


def resumable_outputs(
    anonymizer: FaceAnonymizer, plan: Plan, save_crops: bool
) -> tuple[list[Path], set[Path], keys.KeyRecord | None]:
    """What an interrupted anonymize run left in ``plan``'s outputs: (the complete
    outputs to keep, the incomplete ones to make again, the run's key record or None).

    Outputs are written atomically, so an existing photo output is whole; it is
    complete when its metadata is this model's anonymization and, with ``save_crops``,
    every face it records has its crop (the crops are written after the photo). An
    existing file that is not this model's output raises OutputExistsError: resuming
    never replaces what another run or tool wrote. Outputs with different salts are
    refused too: one run, one salt."""
    kept, redo, records = [], set(), set()
    for target in plan.targets.values():
        if not target.exists():
            continue
        try:
            made = metadata.read_anonymization(target)
        except InputError:
            made = None
        if made is None or not made.is_photo or made.fingerprint != anonymizer.fingerprint:
            raise OutputExistsError(f"{target} exists and is not an output of this model's anonymize run; move it or pass --overwrite")
        records.add(made.record)
        indices = [face.get("index") for face in made.fields["faces"] if isinstance(face, dict)]
        if save_crops and not all(crop_path(target, i).exists() for i in indices if isinstance(i, int)):
            redo.add(target)
        else:
            kept.append(target)
    if len(records) > 1:
        raise OutputExistsError(f"{plan.out_dir}: outputs of {len(records)} runs with different salts; resume needs one run's outputs")
    return kept, redo, next(iter(records), None)


def recover_photo_folder(
    anonymizer: FaceAnonymizer,
    faces: photos.PhotoFaces,
    password: str,
    in_dir: str | Path,
    out_dir: str | Path,
    batch_size: int | None = None,
    overwrite: bool = False,
    record: keys.KeyRecord | None = None,
    save_crops: bool = False,
    ignore_model_mismatch: bool = False,
    face_ledger: list[ledger.Entry] | None = None,
) -> Report:
    """Recovers the photos of an anonymize run. A photo's own metadata gives its key
    record and face transforms. Without metadata (e.g. re-encoded after sharing),
    ``record`` (a key file's) gives the key, detection finds candidate faces, and only
    those that match an entry of ``face_ledger`` (the key file's, `ledger`) are
    recovered, each with that entry's key index; every other detection is left as it
    is and counted (without a ledger, all of them)."""
    plan = _plan_photo_outputs(in_dir, out_dir, overwrite, save_crops, keep=lambda path: not is_saved_crop(path))
    batch_size = batch_size or default_batch_size()
    seeds: dict[keys.KeyRecord, bytes] = {}
    report = Report(skipped=list(plan.skipped), notes=list(plan.notes), operation="recover")
    anonymizations = _checked_anonymizations(anonymizer, plan, report, ignore_model_mismatch)

    def verified_candidates(photo: np.ndarray) -> tuple[list[photos.AlignedFace], int]:
        """The re-detected faces of ``photo`` that match the ledger (with its key indices),
        and how many did not."""
        found = faces.find(photo)
        if not found.faces or not face_ledger:
            return [], len(found.faces)
        transforms = [face.transform for face in found.faces]
        candidates = ledger.entries(photo.shape, [0] * len(found.faces), transforms, faces.crops(photo, found.faces))
        verified, taken = [], set()
        for face, candidate in zip(found.faces, candidates):
            position = ledger.match(face_ledger, candidate, taken)
            if position is not None:
                taken.add(position)
                verified.append(photos.AlignedFace(face_ledger[position].index, face.transform, face.size))
        return verified, len(found.faces) - len(verified)

    def process(source: Path, photo: np.ndarray):
        made = anonymizations[source]
        if made is None:
            if record is None:
                return images.Skipped(source, f"{source}: no dbaf_jax metadata; pass a key file to find its faces by detection")
            photo_record, meta = record, {"key": record.to_dict(), "detected": True}
            recorded, unverified = verified_candidates(photo)
        elif not made.is_photo:
            return images.Skipped(source, f"{source}: an anonymized aligned crop; recover it with --aligned")
        else:
            try:
                recorded = photos.faces_from_metadata(made.fields, photo.shape, anonymizer.input_size)
            except InputError as err:
                return images.Skipped(source, f"{source}: {err}")
            photo_record, meta = made.record, made.fields
        if photo_record not in seeds:
            seeds[photo_record] = keys.derive_seed(password, photo_record)
        result = anonymizer.recover_photo(photo, seeds[photo_record], faces, recorded, batch_size)
        if made is None:
            result.unverified = unverified
            result.unverified_why = "no face ledger beside the key file" if face_ledger is None else "no match in the key file's face ledger"
        return result, {**meta, "operation": "recover", "mode": "image"}

    return _photo_run(plan, list(anonymizations), process, report, "recover", save_crops, overwrite)
