"""The model families a model directory may hold, and loading whichever one it is.

A model directory's ``model.json`` names its family (`model_directory.save_model`);
`load` reads it and hands the directory to that family's loader, so the user commands
(`dbaf_jax.anonymizer`) and the evaluation run any family the same way. Directories
written before ``model.json`` existed are DBAF's.

What the commands call on a loaded model, whatever its family (the DBAF and iFADIT
classes both provide it): ``FAMILY``; ``input_size`` and ``output_size``;
``key_shape`` (the (n, style_dim) standard normals a key is made from) and
``key_from_z(variables, z)``; ``networks()``; ``for_inference()``;
``with_compute_dtype(dtype)`` and ``compute_variables(variables)``;
``anonymize_images(variables, images, keys)`` and ``recover_images(variables,
anonymized, keys)`` with keys (K, B or 1, L, D) giving (K, B, s, s, 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from dbaf_jax import model_directory
from dbaf_jax.errors import ModelDirectoryError
from dbaf_jax.models import dbaf, ifadit

LOADERS: dict[str, Callable[[Any, bool], tuple[Any, dict]]] = {dbaf.FAMILY: dbaf.load, ifadit.FAMILY: ifadit.load}


def family_of(directory: str | Path) -> str:
    """The family ``directory``'s model.json names (DBAF without one)."""
    directory = Path(directory)
    manifest = model_directory.read_manifest(directory) if directory.is_dir() else None
    return dbaf.FAMILY if manifest is None else manifest.get("family")


def load(directory: str | Path, without_manifest: bool = False) -> tuple[Any, dict]:
    """(model, variables) of the model directory, whichever family it holds; the
    family's loader raises ModelDirectoryError for anything wrong inside it."""
    family = family_of(directory)
    if family not in LOADERS:
        raise ModelDirectoryError(
            f"{Path(directory) / model_directory.MODEL_FILE}: family {family!r}, this dbaf_jax knows {sorted(LOADERS)}"
        )
    return LOADERS[family](directory, without_manifest)
