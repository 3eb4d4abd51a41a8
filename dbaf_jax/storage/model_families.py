"""The model families a model directory may hold, and loading whichever one it is.

A model directory's ``model.json`` names its family (`model_directory.save_model`);
`load_directory` reads it (once) and builds that family's composition from the
directory's networks, with the model's fingerprint and recorded recovery (`LoadedModel`),
so the commands and the evaluation run any family the same way. Directories written
before ``model.json`` existed are DBAF's. A family is one line of `FAMILIES`: its
composition class (whose fields are its networks, `models.composition.network_names`)
and the networks it may lack.

What inference calls on a loaded model, whatever its family, is
`models.composition.Anonymizer`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from dbaf_jax.core.errors import ModelDirectoryError
from dbaf_jax.models import composition, dbaf, ifadit
from dbaf_jax.storage import model_directory, network_kinds

# family -> (composition class, networks it may lack: DBAF's no-MAAR ablation, iFADIT
# without background refinement)
FAMILIES: dict[str, tuple[type[composition.Anonymizer], tuple[str, ...]]] = {
    dbaf.FAMILY: (dbaf.DBAF, ("maar",)),
    ifadit.FAMILY: (ifadit.IFADIT, ("parser",)),
}


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """A model directory loaded once (`load_directory`): the family's composition, its
    variables ({network: variables}, as stored), the fingerprint outputs carry
    (`network_kinds.model_fingerprint` of ``model.networks()``) and the recovery the
    model was trained for (`model_directory.RECOVERY`; None when not recorded)."""

    family: str
    model: Any
    variables: dict[str, Any]
    fingerprint: str
    recovery: str | None


def _family(manifest: dict[str, Any] | None) -> str | None:
    return dbaf.FAMILY if manifest is None else manifest.get("family")


def family_of(directory: str | Path) -> str | None:
    """The family ``directory``'s model.json names (DBAF without one; None if it names none)."""
    directory = Path(directory)
    return _family(model_directory.read_manifest(directory) if directory.is_dir() else None)


def _load(
    family: str | None, directory: str | Path, without_manifest: bool, manifest: Any
) -> LoadedModel:
    if family not in FAMILIES:
        raise ModelDirectoryError(
            f"{Path(directory) / model_directory.MODEL_FILE}: family {family!r}, this dbaf_jax knows {sorted(FAMILIES)}"
        )
    cls, optional = FAMILIES[family]
    names = composition.network_names(cls)
    required = tuple(n for n in names if n not in optional)
    loaded = model_directory.load_model(
        directory, family, required, optional, without_manifest, manifest
    )
    networks = loaded.networks
    model = cls(**{name: networks[name].module if name in networks else None for name in names})
    variables = {name: network.variables for name, network in networks.items()}
    fingerprint = (
        loaded.fingerprint
        if set(model.networks()) == set(networks)
        else network_kinds.model_fingerprint(model.networks(), variables)
    )
    return LoadedModel(family, model, variables, fingerprint, loaded.recovery)


def load_family(
    family: str | None, directory: str | Path, without_manifest: bool = False
) -> tuple[Any, dict[str, Any]]:
    """(composition, {network: variables}) of a model directory of ``family``; its
    optional networks are None when the directory has none (DBAF: no-MAAR only when
    ``model.json`` lists no ``maar``, or, without one, the directory holds none). Raises
    ModelDirectoryError (NetworkNotFoundError for a missing directory or network)
    naming what is wrong, another family's directory included (`model_directory.load_model`)."""
    loaded = _load(family, directory, without_manifest, model_directory.UNREAD)
    return loaded.model, loaded.variables


def load_directory(directory: str | Path, without_manifest: bool = False) -> LoadedModel:
    """The model directory, whichever family it holds, with ``model.json`` read once and
    the weights hashed once (`model_directory`)."""
    directory = Path(directory)
    manifest = model_directory.read_manifest(directory) if directory.is_dir() else None
    return _load(_family(manifest), directory, without_manifest, manifest)


def load(directory: str | Path, without_manifest: bool = False) -> tuple[Any, dict[str, Any]]:
    """(model, variables) of the model directory, whichever family it holds (`load_directory`)."""
    loaded = load_directory(directory, without_manifest)
    return loaded.model, loaded.variables
