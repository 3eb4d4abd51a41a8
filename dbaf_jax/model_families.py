"""The model families a model directory may hold, and loading whichever one it is.

A model directory's ``model.json`` names its family (`model_directory.save_model`);
`load` reads it and builds that family's composition from the directory's networks,
so the commands and the evaluation run any family the same way. Directories written
before ``model.json`` existed are DBAF's. A family is one line of `FAMILIES`: its
composition class (whose fields are its networks, `models.composition.network_names`)
and the networks it may lack.

What inference calls on a loaded model, whatever its family, is
`models.composition.Anonymizer`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dbaf_jax import model_directory
from dbaf_jax.errors import ModelDirectoryError
from dbaf_jax.models import composition, dbaf, ifadit

# family -> (composition class, networks it may lack: DBAF's no-MAAR ablation, iFADIT
# without background refinement)
FAMILIES: dict[str, tuple[type[composition.Anonymizer], tuple[str, ...]]] = {
    dbaf.FAMILY: (dbaf.DBAF, ("maar",)),
    ifadit.FAMILY: (ifadit.IFADIT, ("parser",)),
}


def family_of(directory: str | Path) -> str | None:
    """The family ``directory``'s model.json names (DBAF without one; None if it names none)."""
    directory = Path(directory)
    manifest = model_directory.read_manifest(directory) if directory.is_dir() else None
    return dbaf.FAMILY if manifest is None else manifest.get("family")


def load_family(
    family: str | None, directory: str | Path, without_manifest: bool = False
) -> tuple[Any, dict[str, Any]]:
    """(composition, {network: variables}) of a model directory of ``family``; its
    optional networks are None when the directory has none (DBAF: no-MAAR only when
    ``model.json`` lists no ``maar``, or, without one, the directory holds none). Raises
    ModelDirectoryError (NetworkNotFoundError for a missing directory or network)
    naming what is wrong, another family's directory included (`model_directory.load_model`)."""
    if family not in FAMILIES:
        raise ModelDirectoryError(
            f"{Path(directory) / model_directory.MODEL_FILE}: family {family!r}, this dbaf_jax knows {sorted(FAMILIES)}"
        )
    cls, optional = FAMILIES[family]
    names = composition.network_names(cls)
    required = tuple(n for n in names if n not in optional)
    networks = model_directory.load_model(directory, family, required, optional, without_manifest)
    model = cls(**{name: networks[name].module if name in networks else None for name in names})
    return model, {name: network.variables for name, network in networks.items()}


def load(directory: str | Path, without_manifest: bool = False) -> tuple[Any, dict[str, Any]]:
    """(model, variables) of the model directory, whichever family it holds."""
    return load_family(family_of(directory), directory, without_manifest)
