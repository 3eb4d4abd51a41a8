"""What a user sets for a run: the anonymize and recover commands' options, each concern
one frozen object built once from the command line (`dbaf_jax.commands`) and passed
whole to the runners (`photo_folders`, `aligned_folders`, and the clips'
`video.settings.ClipRunSettings`) in the run (`run.Run`), beside the password, the key
record and the loaded model, which are not settings.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

from dbaf_jax.faces import photos
from dbaf_jax.inference.anonymizer import FaceAnonymizer, default_batch_size, load_photo_faces
from dbaf_jax.storage import images


@dataclasses.dataclass(frozen=True)
class FaceFinding:
    """How faces are found and masked: the detector weights (None: in the model
    directory), the detectors by name ('mtcnn,dlib-hog'; None: every installed default
    one), BiSeNet's directory for soft masks (None: a blurred box) and the crop side
    below which faces are left as they were."""

    detector: str | Path | None = None
    detectors: str | None = None
    parser: str | Path | None = None
    min_face_size: float = photos.MIN_FACE_SIZE

    def load(self, anonymizer: FaceAnonymizer, recovering: bool = False) -> photos.PhotoFaces:
        """The `PhotoFaces` for ``anonymizer`` (`load_photo_faces`): anonymizing hides
        low-confidence detections, ``recovering`` takes them as faces."""
        return load_photo_faces(
            anonymizer, self.detector, self.parser, self.min_face_size, self.detectors, recovering
        )

    def finders(
        self, anonymizer: FaceAnonymizer, operations: Sequence[str]
    ) -> dict[str, photos.PhotoFaces]:
        """`load`'s finder for each of ``operations`` ('anonymize', 'recover'), the
        detectors and the parser loaded (their weights hashed) once and shared: the
        finders differ only in what they do with low-confidence detections."""
        if not operations:
            return {}
        loaded = self.load(anonymizer)
        return {operation: loaded.sharing(operation != "recover") for operation in operations}


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What every run takes: faces per model call (None: `default_batch_size`), whether
    existing outputs are replaced, whether inputs that are already anonymize's outputs
    are anonymized again, whether another model's outputs are recovered."""

    batch_size: int | None = None
    overwrite: bool = False
    allow_anonymized_input: bool = False
    ignore_model_mismatch: bool = False

    @property
    def batch(self) -> int:
        """The batch size to run: the one asked for, else `default_batch_size`."""
        return self.batch_size or default_batch_size()

    def common(self) -> dict:
        """The `RunSettings` fields of these settings, to build another concern's from."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(RunSettings)}


@dataclasses.dataclass(frozen=True)
class FolderRunSettings(RunSettings):
    """A folder run's (`photo_folders`, `aligned_folders`): also each face's crop written
    (photos), faces hidden by the fallback failing the run (``strict``), an interrupted
    run continued (``resume``, photos), the latents for latent recovery written
    (``save_latents``, aligned crops) and the most pixels a photo may have
    (``max_pixels``: a larger one is skipped before it is decoded)."""

    save_crops: bool = False
    strict: bool = False
    resume: bool = False
    save_latents: bool = False
    max_pixels: int = images.MAX_PIXELS


FOLDER_DEFAULTS = FolderRunSettings()  # the runners' default: every option as the commands' default
