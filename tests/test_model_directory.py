"""The model directory: the registry of kinds a directory may hold, their versions, and
a ModelDirectoryError naming the file for every way a directory can be unusable."""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import stage2
from convert.e4e import ENCODER_TYPES
from convert.mtcnn import NETWORKS as MTCNN_NETWORKS
from dbaf_jax import model_directory
from dbaf_jax.errors import ModelDirectoryError, NetworkNotFoundError, OutputExistsError
from dbaf_jax.model_directory import KINDS, NETWORK_FILE, load_network, save_network
from dbaf_jax.models import dbaf
from dbaf_jax.models.facenet import InceptionResnetV1
from dbaf_jax.models.inception import FIDInceptionV3
from dbaf_jax.models.kria import KRIA, ConditionalMLP
from dbaf_jax.models.parsers import BiSeNet, UNetParser
from dbaf_jax.models.stylegan2 import Discriminator
from dbaf_jax.train import networks as networks_lib

STYLE_DIM = 8


@pytest.fixture
def saved(tmp_path):
    """A small KRIA with random variables, saved; returns (path, module, variables)."""
    module = KRIA(style_dim=STYLE_DIM, groups=(1, 1, 2))
    codes = jnp.zeros((1, 4, STYLE_DIM))
    variables = jax.device_get(module.init(jax.random.PRNGKey(0), codes, codes))
    return save_network(tmp_path / "kria", module, variables, source="test"), module, variables


def edit_info(path, **changes):
    info = json.loads((path / NETWORK_FILE).read_text())
    for key, value in changes.items():
        if value is None:
            info.pop(key, None)
        else:
            info[key] = value
    (path / NETWORK_FILE).write_text(json.dumps(info))


def test_round_trip(saved):
    path, module, variables = saved
    info = json.loads((path / NETWORK_FILE).read_text())
    assert (info["kind"], info["kind_version"]) == ("kria:KRIA", KINDS["kria:KRIA"].version)
    network = load_network(path)
    assert network.module == module
    jax.tree.map(np.testing.assert_array_equal, network.variables, variables)


def test_every_exported_class_is_registered():
    """Training exports (both CID kinds) and every converter's classes have a kind."""
    exported = []
    for variants in ("tiny", "tiny,no_cid"):
        exported += networks_lib.modules(networks_lib.build(stage2.get_config(variants))).values()
    exported += [cls(stylegan_size=64, style_dim=STYLE_DIM) for cls in ENCODER_TYPES.values()]
    exported += [UNetParser(), BiSeNet(), Discriminator(size=64), InceptionResnetV1(), FIDInceptionV3()]
    exported += [module for module, _, _ in MTCNN_NETWORKS.values()]
    registered = {kind.module for kind in KINDS.values()}
    assert {type(m) for m in exported} <= registered
    for module in exported:
        assert KINDS[model_directory.module_kind(module)].module is type(module)


def test_kind_names_are_those_older_directories_carry():
    """Before the registry a kind was 'module:Class' under dbaf_jax.models; the names are
    kept so that those directories still load (and keep their fingerprints)."""
    for name, kind in KINDS.items():
        assert name == f"{kind.module.__module__.removeprefix('dbaf_jax.models.')}:{kind.module.__qualname__}"


def test_directory_without_kind_version_loads_as_version_1(saved):
    path, module, _ = saved
    edit_info(path, kind_version=None)
    assert load_network(path).module == module


def test_unregistered_class_is_not_saved(tmp_path):
    with pytest.raises(TypeError, match="ConditionalMLP is not a kind"):  # a part of KRIA, not a network
        save_network(tmp_path / "x", ConditionalMLP(style_dim=STYLE_DIM), {})
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"kind": "stylegan2:Mapping"}, "unknown network kind 'stylegan2:Mapping'"),
        ({"kind": "os:system"}, "unknown network kind 'os:system'"),
        ({"kind": None}, "unknown network kind None"),
        ({"kind_version": 2}, "kria:KRIA version 2, this dbaf_jax reads version 1; re-run the converter"),
        ({"format_version": 99}, "format_version 99, this dbaf_jax reads 1"),
        ({"config": {"style_dim": STYLE_DIM, "width": 3}}, "the config does not fit kria:KRIA"),
        ({"config": None}, "no config object"),
    ],
)
def test_refuses_what_it_cannot_build(saved, changes, message):
    path, _, _ = saved
    edit_info(path, **changes)
    with pytest.raises(ModelDirectoryError, match="^" + str(path / NETWORK_FILE)) as err:
        load_network(path)
    assert message in str(err.value)


def test_missing_or_damaged_files(saved, tmp_path):
    path, _, _ = saved
    with pytest.raises(NetworkNotFoundError, match=f"{tmp_path / 'nowhere'}: no such network directory"):
        load_network(tmp_path / "nowhere")
    shutil.rmtree(path / "variables")
    with pytest.raises(ModelDirectoryError, match=f"{path / 'variables'}: cannot read the variables"):
        load_network(path)
    (path / NETWORK_FILE).write_bytes(b"\x89PNG not json")
    with pytest.raises(ModelDirectoryError, match=f"{path / NETWORK_FILE}: damaged"):
        load_network(path)
    (path / NETWORK_FILE).write_text("[1, 2]")
    with pytest.raises(ModelDirectoryError, match="not a JSON object"):
        load_network(path)
    (path / NETWORK_FILE).unlink()
    with pytest.raises(NetworkNotFoundError, match=f"{path}: not a dbaf_jax network directory"):
        load_network(path)


def test_existing_network_is_kept(saved):
    path, module, variables = saved
    before = (path / NETWORK_FILE).read_bytes()
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        save_network(path, module, variables)
    assert (path / NETWORK_FILE).read_bytes() == before


def test_dbaf_load_names_the_missing_networks(saved, tmp_path):
    path, _, _ = saved
    with pytest.raises(ModelDirectoryError, match="no such model directory"):
        dbaf.load(tmp_path / "nowhere")
    with pytest.raises(NetworkNotFoundError, match=r"missing \['e4e', 'cid', 'decoder', 'key_generator'\]") as err:
        dbaf.load(path.parent)  # holds only kria
    assert str(path.parent) in str(err.value)


def test_load_pretrained_missing_directory_or_network(saved, tmp_path):
    path, _, _ = saved
    nets = networks_lib.build(stage2.get_config("tiny"))
    with pytest.raises(ModelDirectoryError, match=f"{tmp_path / 'nowhere'}: no such model directory"):
        networks_lib.load_pretrained(nets, {}, tmp_path / "nowhere", networks_lib.PRETRAINED)
    with pytest.raises(NetworkNotFoundError, match="no 'generator' network"):
        networks_lib.load_pretrained(nets, {}, path.parent, {"decoder": "generator"})
    with pytest.raises(ModelDirectoryError, match="architecture differs"):  # a KRIA of another width
        networks_lib.load_pretrained(nets, {}, path.parent, {"kria": "kria"})
