"""The network classes a model directory may hold (`KINDS`, each with the version of its
stored form), and how a module is named (`module_kind`), described (`module_config`) and
rebuilt from its stored description (`build_module`), and the content hashes that
identify a network (`content_hash`) or a model (`model_fingerprint`). Only the classes listed here can
be stored: a directory names a kind, never code to import (`model_directory`).

A kind's version goes up when a change to its class would make old directories load
wrongly or not at all; `build_module` refuses another version. Directories written
before kinds had versions have no ``kind_version`` and are read as version 1 of their
kind. Their kind names are the ``module:Class`` strings that `KINDS` still uses, so
they load unchanged (and keep their `model_fingerprint`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import flax.linen as nn
import numpy as np
from flax import traverse_util

from dbaf_jax.core.errors import ModelDirectoryError
from dbaf_jax.models.arcface import ArcFace
from dbaf_jax.models.centerface import CenterFace
from dbaf_jax.models.dbaf.cid import CID, LatentMLP
from dbaf_jax.models.dbaf.kria import KRIA
from dbaf_jax.models.dbaf.maar import MAAR
from dbaf_jax.models.e4e import Encoder4Editing, GradualStyleEncoder
from dbaf_jax.models.facenet import InceptionResnetV1
from dbaf_jax.models.ifadit.icl import IdentityCompensation
from dbaf_jax.models.ifadit.mapper import IdentityAttributeMapper
from dbaf_jax.models.ifadit.sif import SecureIdentityFlow
from dbaf_jax.models.inception import FIDInceptionV3
from dbaf_jax.models.lpips import LPIPS
from dbaf_jax.models.mtcnn import ONet, PNet, RNet
from dbaf_jax.models.parsers import BiSeNet, UNetParser
from dbaf_jax.models.stylegan2 import Discriminator, Generator

# kind_version of directories written before kinds had versions.
UNVERSIONED_KIND = 1
# Hex digits of a `model_fingerprint` (the output metadata's model.fingerprint).
FINGERPRINT_DIGITS = 16


class Kind(NamedTuple):
    """A class a model directory may hold and the version of its stored form."""

    module: type[nn.Module]
    version: int


# Every class the converters and the training export write. The names are the
# ``module:Class`` strings older directories carry, kept so that those still load.
KINDS: dict[str, Kind] = {
    "arcface:ArcFace": Kind(ArcFace, 1),
    "centerface:CenterFace": Kind(CenterFace, 1),
    "cid:CID": Kind(CID, 1),
    "cid:LatentMLP": Kind(LatentMLP, 1),
    "e4e:Encoder4Editing": Kind(Encoder4Editing, 1),
    "e4e:GradualStyleEncoder": Kind(GradualStyleEncoder, 1),
    "facenet:InceptionResnetV1": Kind(InceptionResnetV1, 1),
    "icl:IdentityCompensation": Kind(IdentityCompensation, 1),
    "inception:FIDInceptionV3": Kind(FIDInceptionV3, 1),
    "kria:KRIA": Kind(KRIA, 1),
    "lpips:LPIPS": Kind(LPIPS, 1),
    "maar:MAAR": Kind(MAAR, 1),
    "mapper:IdentityAttributeMapper": Kind(IdentityAttributeMapper, 1),
    "mtcnn:ONet": Kind(ONet, 1),
    "mtcnn:PNet": Kind(PNet, 1),
    "mtcnn:RNet": Kind(RNet, 1),
    "parsers:BiSeNet": Kind(BiSeNet, 1),
    "parsers:UNetParser": Kind(UNetParser, 1),
    "sif:SecureIdentityFlow": Kind(SecureIdentityFlow, 1),
    "stylegan2:Discriminator": Kind(Discriminator, 1),
    "stylegan2:Generator": Kind(Generator, 1),
}
_KIND_NAMES = {kind.module: name for name, kind in KINDS.items()}


def module_kind(module: nn.Module) -> str:
    """The `KINDS` name of ``module``'s class, e.g. 'stylegan2:Generator'."""
    try:
        return _KIND_NAMES[type(module)]
    except KeyError:
        raise TypeError(
            f"{type(module).__name__} is not a kind a model directory holds (see KINDS)"
        ) from None


def module_config(module: nn.Module) -> dict[str, Any]:
    """The module's constructor fields (parent and name excluded), JSON-ready."""
    fields = {
        f.name for f in dataclasses.fields(module) if f.init and f.name not in ("parent", "name")
    }
    return {name: getattr(module, name) for name in sorted(fields)}


def build_module(info: Mapping[str, Any], source: Path) -> nn.Module:
    """The module a ``network.json`` describes (JSON lists become tuples again).

    Raises ModelDirectoryError, naming ``source``, for an unknown kind, another version
    of a kind, or a config the class does not take.
    """
    name = info.get("kind")
    if name not in KINDS:
        raise ModelDirectoryError(
            f"{source}: unknown network kind {name!r} (this dbaf_jax holds {sorted(KINDS)})"
        )
    kind = KINDS[name]
    version = info.get("kind_version", UNVERSIONED_KIND)
    if version != kind.version:
        raise ModelDirectoryError(
            f"{source}: {name} version {version}, this dbaf_jax reads version {kind.version}; "
            "re-run the converter or the training export with this version"
        )
    config = info.get("config")
    if not isinstance(config, Mapping):
        raise ModelDirectoryError(f"{source}: no config object for {name}")
    as_tuple = lambda v: tuple(as_tuple(x) for x in v) if isinstance(v, list) else v  # noqa: E731
    try:
        return kind.module(**{k: as_tuple(v) for k, v in config.items()})
    except TypeError as err:
        raise ModelDirectoryError(f"{source}: the config does not fit {name} ({err})") from None


def hash_network(digest: Any, name: str, module: nn.Module, variables: Mapping[str, Any]) -> None:
    """Feeds one network into ``digest`` (a hashlib object): its name, kind and
    constructor fields, then every variable's path, dtype, shape and values in sorted
    path order. Nothing about the files enters (Orbax names them at random and stamps
    them), so the same weights saved twice, or copied elsewhere, hash alike."""
    hash_network_into([(digest, name)], module, variables)


def hash_network_into(
    named_digests: Sequence[tuple[Any, str]], module: nn.Module, variables: Mapping[str, Any]
) -> None:
    """`hash_network` into several digests at once, each under its own name (a network's
    `content_hash` under '' and a model's fingerprint under the network's name), reading
    each variable once."""
    config = module_config(module)
    for digest, name in named_digests:
        digest.update(json.dumps([name, module_kind(module), config], sort_keys=True).encode())
    for leaf_path, leaf in sorted(traverse_util.flatten_dict(variables).items()):
        leaf = np.ascontiguousarray(leaf)
        described = json.dumps(["/".join(leaf_path), str(leaf.dtype), list(leaf.shape)]).encode()
        for digest, _ in named_digests:
            digest.update(described)
            digest.update(leaf)


def content_hash(module: nn.Module, variables: Mapping[str, Any]) -> str:
    """sha256 (hex) of one network's kind, constructor fields and variables: `hash_network`
    under an empty name, so that a network keeps its hash wherever it is stored."""
    digest = hashlib.sha256()
    hash_network(digest, "", module, variables)
    return digest.hexdigest()


def fingerprint_of(digest: Any) -> str:
    """The model fingerprint a sha256 digest fed as `model_fingerprint` feeds it gives."""
    return digest.hexdigest()[:FINGERPRINT_DIGITS]


def model_fingerprint(networks: Mapping[str, nn.Module], variables: Mapping[str, Any]) -> str:
    """16 hex digits of one sha256 over ``networks`` (name -> module, e.g.
    ``DBAF.networks()``) in name order, each fed by `hash_network` with its variables."""
    digest = hashlib.sha256()
    for name in sorted(networks):
        hash_network(digest, name, networks[name], variables[name])
    return fingerprint_of(digest)
