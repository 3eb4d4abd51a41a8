"""`FaceAnonymizer`: a model directory of any family loaded onto the devices, the
array-level API of anonymization and recovery.

``FaceAnonymizer(model_dir).anonymize(images, key)`` anonymizes aligned faces
(B, s_in, s_in, 3) in [-1, 1] with a key from `key_for` (one for the batch) or
`face_keys` (one per face); `recover` and, for DBAF, `recover_from_latents` invert it.
`anonymize_photo` and `recover_photo` do the same for every face of a whole photo
(`faces.photos.PhotoFaces`: detector, masks, paste-back). A wrong key is not an error:
it yields another face, which is what keeps the original private.

The weights are cast to the compute dtype and placed on the devices once; a batch is
split over them, padded to one compiled shape (`programs.pad_batch`). ``dtype='bfloat16'``
computes every network in bfloat16 (docs/decisions.md gives the measured difference).
Errors the user can cause raise `dbaf_jax.core.errors` types, never exit the interpreter.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

import jax
import jax.numpy as jnp
import numpy as np

from dbaf_jax.core import precision, sharding
from dbaf_jax.core.errors import InputError
from dbaf_jax.faces import paste, photos
from dbaf_jax.faces.detectors import registry
from dbaf_jax.inference import face_batches
from dbaf_jax.inference.programs import (
    anonymize_program,
    key_program,
    latents_dict,
    pad_batch,
    recover_image_program,
    recover_latent_program,
    unpadded,
)
from dbaf_jax.models import composition
from dbaf_jax.storage import keys, model_families

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


@dataclasses.dataclass
class PhotoResult:
    """A processed photo (H, W, 3) uint8, its faces, the processed crops (N, s, s, 3) in
    [-1, 1] (s the generator's size; None when the run did not keep them:
    `face_batches.Item.keep_results`), the quad sides of faces left alone as too small,
    the boxes of faces hidden by the fallback and the count of detections recovery left
    unverified."""

    photo: np.ndarray
    faces: list[photos.AlignedFace]
    crops: np.ndarray | None
    too_small: list[float]
    hidden: list[np.ndarray] = dataclasses.field(default_factory=list)
    # Recovery without metadata: detections that match no face of the key file's ledger.
    unverified: int = 0
    unverified_why: str = ""

    @property
    def found(self) -> int:
        return len(self.faces) + len(self.too_small) + len(self.hidden) + self.unverified


def photo_result(done: face_batches.Done, too_small: list[float]) -> PhotoResult:
    """The `PhotoResult` of a photo `face_batches.processed` made (``too_small``: the quad sides of faces left alone)."""
    return PhotoResult(
        done.pixels, done.item.faces, done.results, too_small, list(done.item.hidden)
    )


class FaceAnonymizer:
    """A loaded model of any family (`dbaf_jax.storage.model_families`: DBAF, iFADIT) with jitted
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

    def __init__(
        self,
        model_dir: str | Path,
        dtype: str = "float32",
        devices: list | None = None,
        without_manifest: bool = False,
    ):
        precision.check_compute_dtype(dtype)
        self.model_dir = Path(model_dir)
        # model.json read and the weights hashed once (without_manifest: `model_directory.load_model`).
        loaded = model_families.load_directory(self.model_dir, without_manifest)
        variables = loaded.variables
        self.fingerprint = loaded.fingerprint
        self.trained_recovery = loaded.recovery  # None: not recorded
        self.dtype = dtype
        self.model = loaded.model.for_inference().with_compute_dtype(dtype)
        if precision.is_reduced(dtype):
            # Cast once, not per batch, and in one program: eager, every distinct leaf
            # shape would be compiled on its own (a GPU's start) before the first batch.
            variables = jax.jit(self.model.compute_variables)(variables)
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
        return self.model.key_from_z(
            self.variables,
            jnp.asarray(
                keys.key_latents(keys.derive_seed(password, record), *self.model.key_shape)
            ),
        )

    def face_latents(self, seed: bytes, indices: Iterable[int]) -> np.ndarray | None:
        """The key latents z (N, *key_shape) of the faces ``indices`` of a photo, from the
        seed `keys.derive_seed(password, record)` (derived once per record: scrypt is
        slow); None for no face. Computed on the host: the step maps them to keys on the
        device (`keys_from_latents`), without waiting for it."""
        z = [keys.key_latents(keys.face_seed(seed, i), *self.model.key_shape) for i in indices]
        return np.stack(z) if z else None

    def keys_from_latents(self, z: np.ndarray | jax.Array) -> jax.Array:
        """Key latents (N, *key_shape) -> keys (N, L, D), on the device (not waited for)."""
        return key_program(self.model, self.variables, jnp.asarray(z))

    def face_keys(self, seed: bytes, indices: Iterable[int]) -> jax.Array:
        """The keys (N, L, D) of the faces ``indices`` of a photo (`face_latents`)."""
        return self.keys_from_latents(self.face_latents(seed, list(indices)))

    def padded_size(self, batch_size: int) -> int:
        """``batch_size`` rounded up to a multiple of the devices the batch is split over."""
        return -(-batch_size // self.batch_multiple) * self.batch_multiple

    def place(self, batch: np.ndarray) -> jax.Array:
        """``batch`` on the devices, padded to split evenly (`padded_size`, `pad_batch`)."""
        self._check_size(batch)
        return jax.device_put(
            pad_batch(np.asarray(batch), self.padded_size(len(batch))), self._batch_sharding
        )

    def place_key(self, key: jax.Array, count: int) -> jax.Array:
        """A key (L, D), replicated, or per-image keys (count, L, D), padded and split as `place` splits ``count`` images."""
        if key.ndim == 2:
            return jax.device_put(key, self._replicated)
        if isinstance(key, jax.Array) and len(key) == self.padded_size(
            count
        ):  # already padded: not fetched, not waited for
            return jax.device_put(key, self._batch_sharding)
        return jax.device_put(
            pad_batch(np.asarray(key), self.padded_size(count)), self._batch_sharding
        )

    def anonymize_faces(self, crops: np.ndarray, z: np.ndarray) -> jax.Array:
        """A `face_batches` step: crops (B, input_size, input_size, 3) in [-1, 1], each
        anonymized with the key of its latents z (B, *key_shape); not waited for."""
        return self.anonymize_async(crops, self.keys_from_latents(z))[0]

    def recover_faces(self, crops: np.ndarray, z: np.ndarray) -> jax.Array:
        """A `face_batches` step: anonymized crops, each recovered with the key of its latents z."""
        return self.recover_async(crops, self.keys_from_latents(z))

    def photo_item(
        self,
        photo: np.ndarray,
        seed: bytes,
        faces: photos.PhotoFaces,
        found: photos.FoundFaces,
        tag: Any = None,
    ) -> face_batches.Item:
        """What `face_batches.processed` needs of ``photo`` (H, W, 3) uint8: the faces
        ``found`` and their key latents (each face's key from its index and ``seed``);
        their crops are cut batch by batch as the faces are processed."""
        return face_batches.Item(
            photo,
            found.faces,
            None,
            self.face_latents(seed, [f.index for f in found.faces]),
            found.regions,
            found.to_hide,
            tag,
        )

    def anonymize_photo(
        self, photo: np.ndarray, seed: bytes, faces: photos.PhotoFaces, batch_size: int = CPU_BATCH
    ) -> PhotoResult:
        """Anonymizes every face of ``photo`` (H, W, 3) uint8 that detection finds, each
        with its own key (``seed`` is `keys.derive_seed(password, record)`), pasted back;
        those the model cannot take are hidden (`faces.paste.hide`). A folder of photos
        batches faces across photos (`inference.photo_folders`)."""
        return self._one_photo(
            photo, seed, faces, faces.find(photo), self.anonymize_faces, batch_size
        )

    def recover_photo(
        self,
        photo: np.ndarray,
        seed: bytes,
        faces: photos.PhotoFaces,
        recorded: list[photos.AlignedFace] | None = None,
        batch_size: int = CPU_BATCH,
        regions: list[tuple[tuple[float, float], float]] | None = None,
    ) -> PhotoResult:
        """Recovers the faces of an anonymized photo: at their ``recorded`` places (from
        its metadata or verified re-detections), or where detection finds them again
        when None; ``regions`` limits each face's paste (`photos.FoundFaces.regions`)."""
        found = (
            photos.FoundFaces(recorded, [], regions=regions)
            if recorded is not None
            else faces.find(photo)
        )
        return self._one_photo(photo, seed, faces, found, self.recover_faces, batch_size)

    def _one_photo(
        self,
        photo,
        seed: bytes,
        faces: photos.PhotoFaces,
        found: photos.FoundFaces,
        step,
        batch_size: int,
    ) -> PhotoResult:
        """``found`` in ``photo`` through ``step``, as a folder's photo goes (`face_batches`)."""
        (done,) = face_batches.processed(
            [self.photo_item(photo, seed, faces, found)], faces, step, self.padded_size(batch_size)
        )
        return photo_result(done, found.too_small)

    def _check_size(self, batch: np.ndarray) -> None:
        if tuple(batch.shape[1:]) != (self.input_size, self.input_size, 3):
            raise ValueError(
                f"expected images (B, {self.input_size}, {self.input_size}, 3), got {batch.shape}"
            )

    def anonymize_async(
        self, batch: np.ndarray, key: jax.Array, with_latents: bool = False
    ) -> tuple[jax.Array, Any]:
        """`anonymize` without waiting: device arrays, the latents a dict or None."""
        if with_latents:
            self._check_latent_recovery()
        count = len(batch)
        outputs = anonymize_program(
            self.model, self.variables, self.place(batch), self.place_key(key, count), with_latents
        )
        anonymized, latents = unpadded(outputs, count)
        return anonymized, (latents_dict(latents) if with_latents else None)

    def anonymize(
        self, batch: np.ndarray, key: jax.Array, with_latents: bool = False
    ) -> tuple[np.ndarray, dict | None]:
        """Images (B, input_size, input_size, 3) -> (anonymized images (B, s, s, 3) at the
        generator's size s, float32, and with ``with_latents`` the latents for
        `recover_from_latents` (else None: they are not fetched))."""
        return jax.device_get(self.anonymize_async(batch, key, with_latents))

    def recover_async(self, anonymized: np.ndarray, key: jax.Array) -> jax.Array:
        count = len(anonymized)
        return unpadded(
            recover_image_program(
                self.model, self.variables, self.place(anonymized), self.place_key(key, count)
            ),
            count,
        )

    def recover(self, anonymized: np.ndarray, key: jax.Array) -> np.ndarray:
        """The paper's recovery from anonymized images alone, (B, input_size, input_size, 3)."""
        return np.asarray(self.recover_async(anonymized, key))

    @property
    def latent_recovery(self) -> bool:
        """Whether the model has the reference's latent-space recovery (DBAF's):
        `composition.LatentRecovery`, asked of the model, not of its family's name."""
        return isinstance(self.model, composition.LatentRecovery)

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
            return anonymize_program(
                self.model, self.variables, images, self.model.key_from_z(self.variables, z), True
            )[1]

        named = latents_dict(jax.eval_shape(latents, images_shape, z_shape))
        return {
            name: (tuple(value.shape[1:]), np.dtype(value.dtype)) for name, value in named.items()
        }

    def recover_from_latents_async(self, latents: dict, key: jax.Array) -> jax.Array:
        self._check_latent_recovery()
        count = len(latents["attribute_code"])
        placed = {
            name: jax.device_put(
                pad_batch(np.asarray(value), self.padded_size(count)), self._batch_sharding
            )
            for name, value in latents.items()
        }
        maps = [
            placed[f"attribute_map_{i}"]
            for i in range(sum(name.startswith("attribute_map_") for name in placed))
        ]
        recovered = recover_latent_program(
            self.model,
            self.variables,
            placed["anonymized_identity"],
            placed["attribute_code"],
            maps,
            self.place_key(key, count),
        )
        return unpadded(recovered, count)

    def recover_from_latents(self, latents: dict, key: jax.Array) -> np.ndarray:
        """The reference's latent-space recovery from what `anonymize` returned."""
        return np.asarray(self.recover_from_latents_async(latents, key))


def load_photo_faces(
    anonymizer: FaceAnonymizer,
    detector_dir: str | Path | None = None,
    parser_dir: str | Path | None = None,
    min_face_size: float = photos.MIN_FACE_SIZE,
    detectors: str | None = None,
    recovering: bool = False,
) -> photos.PhotoFaces:
    """The photo path's `PhotoFaces` for ``anonymizer``: the detectors named in
    ``detectors`` ('mtcnn,dlib-hog'; None: every installed default one,
    `faces.detectors.registry`) with the detector weights in ``detector_dir`` (default
    in the model directory), BiSeNet masks from ``parser_dir`` if given. Anonymizing
    hides low-confidence detections; ``recovering`` takes them as faces."""
    weights = registry.weights_dir(anonymizer.model_dir, detector_dir)
    names = registry.parse_names(detectors) if detectors is not None else None
    detector, notes = registry.build(weights, names)
    parser = paste.FaceParser.load(parser_dir) if parser_dir is not None else None
    return photos.PhotoFaces(
        detector,
        anonymizer.input_size,
        parser,
        min_face_size,
        hide_doubtful=not recovering,
        notes=notes,
    )
