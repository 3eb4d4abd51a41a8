"""A test double of a trained model for whole photos: its "anonymization" keeps a face
a detector finds again, so recovery without metadata (re-detection, the face ledger's
verification, restoration) can be exercised end to end with the real MTCNN on real
photos, which a random-weight model cannot do (its outputs are not faces).

`InvertibleDouble` is a `FaceAnonymizer` whose anonymization of an aligned crop x in
[-1, 1] is a key-dependent colour change and mirror image, y = flip_k(a_k * x + b_k)
with per-channel gain a_k in [0.55, 0.85] and offset b_k in [-0.15, 0.15] drawn from the
face's key latents (`keys.key_latents` of its face seed, as a real model's keys are);
recovery is the exact inverse under the same key, and another key gives another
colour. What it proves: the photo path's plumbing (which faces are found again, which
ledger entries they match, which key each gets, which pixels recovery may change). What
only a trained model can show: how far re-detection moves a generated face, and how
close recovery comes to the original face.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import jax.numpy as jnp
import numpy as np

from dbaf_jax import keys
from dbaf_jax.inference.anonymizer import FaceAnonymizer

KEY_SHAPE = (1, 8)  # the double's key latents: 7 numbers used (3 gains, 3 offsets, the flip)


class InvertibleDouble(FaceAnonymizer):
    """A `FaceAnonymizer` with the key-dependent colour change and mirror (module doc)
    in place of a model; crops of ``size`` in and out."""

    def __init__(self, size: int = 256):  # no model directory: nothing to load
        self.model_dir = Path("invertible-double")
        self.fingerprint = "d0d0d0d0d0d0d0d0"
        self.trained_recovery = "image"
        self.dtype = "float32"
        self.batch_multiple = 1
        self.input_size = self.output_size = size

    def face_latents(self, seed: bytes, indices: Iterable[int]) -> np.ndarray | None:
        """(N, 1, 8) key latents of the faces ``indices``; None for none."""
        z = [keys.key_latents(keys.face_seed(seed, i), *KEY_SHAPE) for i in indices]
        return np.stack(z) if z else None

    def keys_from_latents(self, z: np.ndarray) -> np.ndarray:
        """The double's keys are its latents."""
        return np.asarray(z)

    @staticmethod
    def _colour(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per image (B, 1, 1, 3) gains and offsets and (B,) flips from keys (B, 1, 8)."""
        z = np.asarray(key, np.float64)[:, 0]
        gain = 0.55 + 0.3 / (1 + np.exp(-z[:, 0:3]))
        offset = 0.15 * np.tanh(z[:, 3:6])
        return gain[:, None, None, :], offset[:, None, None, :], z[:, 6] > 0

    def anonymize_async(self, batch: np.ndarray, key: np.ndarray, with_latents: bool = False):
        gain, offset, flip = self._colour(key)
        out = gain * np.asarray(batch, np.float64) + offset
        out[flip] = out[flip, :, ::-1]
        return jnp.asarray(out, jnp.float32), None

    def recover_async(self, anonymized: np.ndarray, key: np.ndarray):
        gain, offset, flip = self._colour(key)
        out = np.asarray(anonymized, np.float64).copy()
        out[flip] = out[flip, :, ::-1]
        return jnp.asarray(np.clip((out - offset) / gain, -1, 1), jnp.float32)
