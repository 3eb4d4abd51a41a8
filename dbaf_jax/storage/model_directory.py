"""The on-disk model directory: one sub-directory per network.

``DIR/<network>/network.json`` says which network it holds: ``kind`` (a name in
`KINDS`), ``kind_version`` (the version of that kind's constructor fields and
variable layout) and ``config`` (the constructor fields); ``DIR/<network>/variables``
is an Orbax checkpoint of the variable tree (collections ``params``, ``batch_stats``,
``buffers``). `load_network` rebuilds both with one call. Writes go to a temporary
name and are renamed into place, so a reader never sees half a network.

Only the classes in `KINDS` can be stored (`network_kinds`); `load_network` refuses,
with a `ModelDirectoryError` naming the file and what is wrong, a missing or damaged
``network.json``, an unknown kind, another version of a kind (re-run the converter
or the training export), or a config the class does not take.

Damage is refused too: ``network.json`` records ``variables_sha256``, the sha256 of
every file of the Orbax checkpoint (checked before Orbax reads them, so a truncated or
altered file is one clean error), ``content_sha256``, the `content_hash` of the
network's kind, fields and variables, and ``info_sha256``, the sha256 of its own other
fields. The weights are hashed once per load: the files' hashes prove the variables
are those written, and ``info_sha256`` that kind, fields and ``content_sha256`` are
the ones written beside them, so the content hash is not recomputed. A network saved
before ``info_sha256`` was recorded has its content hash recomputed after reading (in
the same pass as the model's fingerprint, when one is needed). `load_network` also
refuses NaN or infinite weights (naming the leaf) and a ``NAME.partial`` directory,
which only an interrupted save leaves behind. Networks saved before these were
recorded have none of them and load unverified.

A whole model (several networks that run together, e.g. DBAF's) is written with
`save_model`, which first writes ``DIR/model.json``: its family, the content hash
of every network it holds and the model's fingerprint (`network_kinds.model_fingerprint`
of those networks, which outputs carry). `load_model` reads it once and loads exactly
the networks listed there,
refusing a listed network that is missing or is not the one listed (another model's,
or the remains of an interrupted write), so an optional network (DBAF's MAAR) is
absent only when the model was written without it. A directory without
``model.json`` (written before it existed, or the file deleted) is refused, since
neither MAAR's presence nor the networks' identity can then be checked; with
``without_manifest`` (the commands' --allow-unchecked-model) the networks present
are loaded as before. A model whose ``model.json`` records no fingerprint (written
before it did) has it computed from the weights as they are loaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

import flax.linen as nn
import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import traverse_util

from dbaf_jax.core.errors import ModelDirectoryError, NetworkNotFoundError, OutputExistsError
from dbaf_jax.storage.network_kinds import (
    FINGERPRINT_DIGITS,
    KINDS,
    build_module,
    content_hash,
    fingerprint_of,
    hash_network_into,
    module_config,
    module_kind,
)

FORMAT_VERSION = 1
# The sub-directories the converters (`convert/`) write into a model directory, named
# here once for the converters, training's pretrained tables, inference and evaluation.
GENERATOR_DIR = "generator"  # StyleGAN2's g_ema
GENERATOR_RAW_DIR = "generator_raw"  # its g
DISCRIMINATOR_DIR = "discriminator"
E4E_DIR = "e4e"
E4E_DECODER_DIR = "e4e_decoder"
ARCFACE_DIR = "arcface"
INCEPTION_FID_DIR = "inception_fid"
MTCNN_DIR = "mtcnn"


def lpips_dir(net: str) -> str:
    """``lpips_alex`` for LPIPS on AlexNet (``net`` 'alex'), and so on."""
    return f"lpips_{net}"


def parser_dir(kind: str) -> str:
    """``parser_unet`` (DBAF's parse loss) or ``parser_bisenet`` (soft face masks)."""
    return f"parser_{kind}"


def facenet_dir(variant: str) -> str:
    """``facenet_vggface2`` or ``facenet_casia_webface``."""
    return f"facenet_{variant}"


NETWORK_FILE = "network.json"
VARIABLES_DIR = "variables"
MODEL_FILE = "model.json"
# What recovery a model was trained for (``model.json``'s "recovery"): from the
# anonymized image alone, from the latents anonymize saved beside it, or none (a DBAF
# stage-1 model). Absent in directories written before it was recorded.
RECOVERY = ("image", "latent", "none")
HASH_FIELD = "content_sha256"
FILES_FIELD = "variables_sha256"  # sha256 of every file Orbax wrote, by path in VARIABLES_DIR
INFO_FIELD = "info_sha256"  # sha256 of network.json's other fields (`info_hash`)
FINGERPRINT_FIELD = "fingerprint"  # model.json: `network_kinds.model_fingerprint` of its networks
# What a save writes before renaming into place; finding one means a save was interrupted.
PARTIAL_SUFFIX = ".partial"


@dataclasses.dataclass(frozen=True)
class Network:
    """A loaded network: the Flax module and its variables."""

    module: nn.Module
    variables: dict[str, Any]
    info: dict[str, Any]


def save_network(
    path: str | Path,
    module: nn.Module,
    variables: Mapping[str, Any],
    source: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Writes ``module`` and ``variables`` to ``path`` (a directory)."""
    path = Path(path).absolute()
    if path.exists() and not overwrite:
        raise OutputExistsError(f"{path} exists; pass overwrite=True to replace it")
    host_tree = host_variables(variables)
    return _write_network(path, module, host_tree, content_hash(module, host_tree), source)


def host_variables(variables: Mapping[str, Any]) -> dict[str, Any]:
    """``variables`` as NumPy arrays (what is hashed and written)."""
    return {k: jax.tree.map(np.asarray, v) for k, v in variables.items()}


def info_hash(info: Mapping[str, Any]) -> str:
    """sha256 of a ``network.json``'s fields but `INFO_FIELD`, as sorted compact JSON."""
    fields = {k: v for k, v in info.items() if k != INFO_FIELD}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _write_network(
    path: Path, module: nn.Module, host_tree: Mapping[str, Any], content: str, source: str | None
) -> Path:
    """`save_network` with the variables on the host and their `content_hash` ``content``."""
    kind = module_kind(module)
    info = {
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "kind_version": KINDS[kind].version,
        "config": module_config(module),
        "source": source,
        HASH_FIELD: content,
    }
    tmp = path.with_name(path.name + PARTIAL_SUFFIX)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp / VARIABLES_DIR, host_tree)
    info[FILES_FIELD] = {
        f.relative_to(tmp / VARIABLES_DIR).as_posix(): file_sha256(f)
        for f in sorted((tmp / VARIABLES_DIR).rglob("*"))
        if f.is_file()
    }
    # Through JSON and back first, so that the hash is of what a reader parses (tuples as lists).
    info = json.loads(json.dumps(info))
    info[INFO_FIELD] = info_hash(info)
    (tmp / NETWORK_FILE).write_text(json.dumps(info, indent=2, sort_keys=True))
    if path.exists():
        shutil.rmtree(path)
    tmp.rename(path)
    return path


def read_info(path: Path) -> dict[str, Any]:
    """The parsed ``network.json`` of the network directory ``path``, format checked."""
    info_file = path / NETWORK_FILE
    if path.exists() and not path.is_dir():
        raise ModelDirectoryError(f"{path}: a file where a network directory is expected")
    if not path.is_dir():
        raise NetworkNotFoundError(f"{path}: no such network directory")
    if not info_file.is_file():
        raise NetworkNotFoundError(f"{path}: not a dbaf_jax network directory (no {NETWORK_FILE})")
    try:
        info = json.loads(info_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelDirectoryError(f"{info_file}: damaged, not readable JSON ({err})") from None
    if not isinstance(info, dict):
        raise ModelDirectoryError(f"{info_file}: damaged, not a JSON object")
    if info.get("format_version") != FORMAT_VERSION:
        raise ModelDirectoryError(
            f"{info_file}: format_version {info.get('format_version')!r}, this dbaf_jax reads {FORMAT_VERSION}"
        )
    return info


def load_network(path: str | Path, fingerprint: tuple[Any, str] | None = None) -> Network:
    """Loads a network written by `save_network` (or a converter); see the module docstring
    for what it refuses (always with a ModelDirectoryError naming the file).

    ``fingerprint`` (a sha256 digest and this network's name in the model) feeds the
    network into a model's fingerprint as `network_kinds.model_fingerprint` does, in the
    one pass over the weights that checks their content hash when one is needed."""
    path = Path(path).absolute()
    if path.name.endswith(PARTIAL_SUFFIX):
        raise ModelDirectoryError(
            f"{path}: left by an interrupted save, not a network; remove it and write the network again"
        )
    info = read_info(path)
    module = build_module(info, path / NETWORK_FILE)
    verify_info(path, info)
    verify_files(path, info)
    try:
        with ocp.StandardCheckpointer() as checkpointer:
            variables = checkpointer.restore(path / VARIABLES_DIR)
    except Exception as err:  # noqa: BLE001 - whatever Orbax raises, the variables are unusable
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelDirectoryError(
            f"{path / VARIABLES_DIR}: cannot read the variables ({reason})"
        ) from None
    verify_content(path, info, module, variables, fingerprint)
    return Network(module, variables, info)


def verify_info(path: Path, info: Mapping[str, Any]) -> None:
    """Refuses a ``network.json`` whose fields differ from those `save_network` wrote
    (its `INFO_FIELD`; a network saved before that field has none)."""
    recorded = info.get(INFO_FIELD)
    if recorded is not None and recorded != info_hash(info):
        raise ModelDirectoryError(
            f"{path}: damaged, its {NETWORK_FILE} changed since it was written "
            f"(its {INFO_FIELD} does not match); re-run the converter or the training export"
        )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_files(path: Path, info: Mapping[str, Any]) -> None:
    """Refuses a variables file that is missing or differs from the sha256 `save_network`
    recorded, before Orbax reads any (its failures on damaged files are not all clean)."""
    recorded = info.get(FILES_FIELD)
    if recorded is None:
        return
    if not isinstance(recorded, Mapping) or not all(isinstance(d, str) for d in recorded.values()):
        raise ModelDirectoryError(
            f"{path / NETWORK_FILE}: damaged, {FILES_FIELD} is not an object of file -> sha256"
        )
    for name, digest in sorted(recorded.items()):
        file = path / VARIABLES_DIR / name
        if not file.is_file():
            raise ModelDirectoryError(
                f"{file}: missing, the variables are incomplete; re-run the converter or the training export"
            )
        if file_sha256(file) != digest:
            raise ModelDirectoryError(
                f"{file}: damaged, not the file that was written (its sha256 differs from {NETWORK_FILE}'s); "
                "re-run the converter or the training export"
            )


def content_bound(info: Mapping[str, Any]) -> bool:
    """Whether the recorded hashes alone prove the variables are those ``content_sha256``
    describes: the files' hashes (checked by `verify_files`) and ``network.json``'s own
    (`verify_info`), both written by `save_network` beside the content hash."""
    return info.get(FILES_FIELD) is not None and info.get(INFO_FIELD) is not None


def verify_content(
    path: Path,
    info: Mapping[str, Any],
    module: nn.Module,
    variables: Mapping[str, Any],
    fingerprint: tuple[Any, str] | None = None,
) -> None:
    """Refuses variables that differ from what `save_network` hashed (recomputed only where
    `content_bound` does not prove it), or hold NaN or inf. ``fingerprint``: see
    `load_network`."""
    stored = info.get(HASH_FIELD)
    digests = [] if fingerprint is None else [fingerprint]
    check = stored is not None and not content_bound(info)
    if check:
        digests.append((hashlib.sha256(), ""))
    if digests:
        hash_network_into(digests, module, variables)
    if check and digests[-1][0].hexdigest() != stored:
        raise ModelDirectoryError(
            f"{path}: damaged, its variables or {NETWORK_FILE} changed since it was written "
            f"(the {HASH_FIELD} does not match); re-run the converter or the training export"
        )
    for leaf_path, leaf in sorted(traverse_util.flatten_dict(variables).items()):
        leaf = np.asarray(leaf)
        if jax.dtypes.issubdtype(leaf.dtype, np.inexact) and not np.isfinite(leaf).all():
            raise ModelDirectoryError(
                f"{path}: weight {'/'.join(leaf_path)} holds NaN or infinite values"
            )


def save_model(
    directory: str | Path,
    family: str,
    networks: Mapping[str, tuple[nn.Module, Mapping[str, Any]]],
    sources: Mapping[str, str | None],
    overwrite: bool = False,
    recovery: str | None = None,
) -> Path:
    """Writes ``networks`` (name -> (module, variables)) as the model ``directory`` of
    ``family`` (e.g. 'dbaf'), each network with `save_network` and its ``sources[name]``;
    ``recovery`` (one of `RECOVERY`) is the recovery it was trained for, when known.

    ``model.json`` goes first, listing every network's content hash, so a write that
    is interrupted leaves a directory `load_model` refuses rather than a mix of old and
    new networks. Raises OutputExistsError, before writing anything, if the model file
    or a network exists and ``overwrite`` is not set.
    """
    directory = Path(directory).absolute()
    targets = [directory / MODEL_FILE] + [directory / name for name in networks]
    existing = [str(t) for t in targets if t.exists()]
    if existing and not overwrite:
        raise OutputExistsError(f"{', '.join(existing)} exist(s); pass overwrite=True to replace")
    directory.mkdir(parents=True, exist_ok=True)
    host = {
        name: (module, host_variables(variables)) for name, (module, variables) in networks.items()
    }
    # Every network's content hash and the model's fingerprint, in one pass over the weights.
    fingerprint = hashlib.sha256()
    hashes = {}
    for name in sorted(host):
        module, variables = host[name]
        content = hashlib.sha256()
        hash_network_into([(content, ""), (fingerprint, name)], module, variables)
        hashes[name] = content.hexdigest()
    manifest = {
        "format_version": FORMAT_VERSION,
        "family": family,
        "networks": hashes,
        FINGERPRINT_FIELD: fingerprint_of(fingerprint),
    }
    if recovery is not None:
        if recovery not in RECOVERY:
            raise ValueError(f"recovery {recovery!r}: expected one of {RECOVERY}")
        manifest["recovery"] = recovery
    tmp = directory / (MODEL_FILE + PARTIAL_SUFFIX)
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    os.replace(tmp, directory / MODEL_FILE)
    for name, (module, variables) in host.items():
        _write_network(directory / name, module, variables, hashes[name], sources.get(name))
    return directory


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The parsed ``model.json`` of a model directory, format checked; None if it has none."""
    manifest_file = directory / MODEL_FILE
    if not manifest_file.exists():
        return None
    try:
        manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelDirectoryError(
            f"{manifest_file}: damaged, not readable JSON ({reason})"
        ) from None
    networks = manifest.get("networks") if isinstance(manifest, dict) else None
    if not isinstance(networks, dict) or not all(isinstance(h, str) for h in networks.values()):
        raise ModelDirectoryError(
            f"{manifest_file}: damaged, no networks object of name -> content hash"
        )
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ModelDirectoryError(
            f"{manifest_file}: format_version {manifest.get('format_version')!r}, this dbaf_jax reads {FORMAT_VERSION}"
        )
    if manifest.get("recovery", RECOVERY[0]) not in RECOVERY:
        raise ModelDirectoryError(
            f"{manifest_file}: damaged, recovery {str(manifest.get('recovery'))[:40]!r} is none of {RECOVERY}"
        )
    fingerprint = manifest.get(FINGERPRINT_FIELD)
    if fingerprint is not None and not (
        isinstance(fingerprint, str)
        and len(fingerprint) == FINGERPRINT_DIGITS
        and all(c in "0123456789abcdef" for c in fingerprint)
    ):
        raise ModelDirectoryError(
            f"{manifest_file}: damaged, {FINGERPRINT_FIELD} {str(fingerprint)[:40]!r} is not {FINGERPRINT_DIGITS} hex digits"
        )
    return manifest


def trained_recovery(directory: str | Path) -> str | None:
    """The recovery the model ``directory`` was trained for (`RECOVERY`); None when its
    ``model.json`` does not say (written before it did, or missing)."""
    manifest = read_manifest(Path(directory))
    return None if manifest is None else manifest.get("recovery")


@dataclasses.dataclass(frozen=True)
class Model:
    """What `load_model` loaded: the networks, the model's fingerprint
    (`network_kinds.model_fingerprint` of exactly these networks) and the recovery its
    ``model.json`` records (`trained_recovery`)."""

    networks: dict[str, Network]
    fingerprint: str
    recovery: str | None


# `load_model`'s ``manifest`` when the caller has not read model.json.
UNREAD: Any = object()


def load_model(
    directory: str | Path,
    family: str,
    required: tuple[str, ...],
    optional: tuple[str, ...] = (),
    without_manifest: bool = False,
    manifest: dict[str, Any] | None = UNREAD,
) -> Model:
    """Loads the networks of a model directory of ``family``: ``required`` ones and those of
    ``optional`` the model holds (see the module docstring). ``manifest``: `read_manifest`
    of ``directory`` when the caller has read it (model.json is read once per load).
    Raises ModelDirectoryError (NetworkNotFoundError for a missing one) naming the
    directory or network at fault."""
    directory = Path(directory).absolute()
    if directory.exists() and not directory.is_dir():
        raise ModelDirectoryError(f"{directory}: a file where a model directory is expected")
    if not directory.is_dir():
        raise NetworkNotFoundError(f"{directory}: no such model directory")
    if manifest is UNREAD:
        manifest = read_manifest(directory)
    if manifest is None:  # written before model.json: the networks present
        listed = {
            name: None for name in required + tuple(n for n in optional if (directory / n).exists())
        }
    else:
        if manifest.get("family") != family:
            raise ModelDirectoryError(
                f"{directory / MODEL_FILE}: a {manifest.get('family')!r} model, not a {family!r} one"
            )
        listed = manifest["networks"]
        unlisted = [name for name in required if name not in listed]
        if unlisted:
            raise NetworkNotFoundError(
                f"{directory / MODEL_FILE}: not a complete {family} model, it lists no {unlisted}"
            )
    missing = [name for name in listed if not (directory / name).exists()]
    if missing:
        interrupted = [name for name in missing if (directory / (name + PARTIAL_SUFFIX)).exists()]
        hint = (
            f" (an interrupted save left {[n + PARTIAL_SUFFIX for n in interrupted]})"
            if interrupted
            else ""
        )
        raise NetworkNotFoundError(
            f"{directory}: not a complete {family} model directory, missing {missing}{hint}"
        )
    if manifest is None and not without_manifest:
        raise ModelDirectoryError(
            f"{directory}: no {MODEL_FILE}, so whether the model has MAAR and whether its networks belong together "
            "cannot be checked; write the model again (python -m convert.dbaf, or a training export), or pass "
            "--allow-unchecked-model to run the networks present unchecked"
        )
    names = sorted(name for name in (*required, *optional) if name in listed)
    recorded = None if manifest is None else manifest.get(FINGERPRINT_FIELD)
    # The recorded fingerprint is of every listed network; else it is computed while loading.
    digest = None if recorded is not None and set(names) == set(listed) else hashlib.sha256()
    networks = {}
    for name in names:
        networks[name] = load_network(
            directory / name, fingerprint=None if digest is None else (digest, name)
        )
        if listed[name] is not None and networks[name].info.get(HASH_FIELD) != listed[name]:
            raise ModelDirectoryError(
                f"{directory / name}: not the network {MODEL_FILE} lists (another model's, or an interrupted write); "
                "write the whole model again"
            )
    return Model(
        networks,
        recorded if digest is None else fingerprint_of(digest),
        None if manifest is None else manifest.get("recovery"),
    )
