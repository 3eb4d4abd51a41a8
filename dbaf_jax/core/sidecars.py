"""Reading a latent sidecar (``NAME.latents.npz``, ``anonymize --save-latents``) safely.

A sidecar is an untrusted file: before its arrays reach the model each is checked
against what the model's `anonymize` writes for one image: the same names, each
array's shape and dtype, and finite values. A sidecar that fails names itself and
what is wrong, and only its own image is skipped; checked sidecars all have one
structure, so a batch of them never mixes another file's arrays into a good one.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Mapping

import numpy as np

# name -> (shape, dtype) of one image's latents
Spec = Mapping[str, tuple[tuple[int, ...], np.dtype]]


def read_latents(path: Path, spec: Spec) -> dict[str, np.ndarray]:
    """The arrays of sidecar ``path``, each checked against ``spec``; ValueError naming
    the file and the fault (not an .npz archive, missing or unexpected arrays, a wrong
    shape or dtype, NaN or infinite values)."""
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{path}: not a NumPy .npz archive of latents (damaged, or another kind of file)"
        )
    try:
        with np.load(path, allow_pickle=False) as archive:
            names = set(archive.files)
            missing, unexpected = sorted(set(spec) - names), sorted(names - set(spec))
            if missing or unexpected:
                parts = ([f"missing {missing}"] if missing else []) + (
                    [f"unexpected {unexpected}"] if unexpected else []
                )
                raise ValueError(f"{path}: not this model's latents: {', '.join(parts)}")
            arrays = {name: archive[name] for name in sorted(spec)}
    except ValueError:
        raise
    except Exception as err:  # noqa: BLE001 - any reader failure (bad zip member, object arrays) means "not usable"
        raise ValueError(f"{path}: cannot read latents ({err})") from None
    for name, value in arrays.items():
        shape, dtype = spec[name]
        if value.shape != tuple(shape) or value.dtype != dtype:
            raise ValueError(
                f"{path}: {name} is {value.dtype} {value.shape}, this model's latents are {np.dtype(dtype)} {tuple(shape)}"
            )
        if not np.isfinite(value).all():
            raise ValueError(f"{path}: {name} holds NaN or infinite values")
    return arrays
