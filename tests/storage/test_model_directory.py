"""The model directory: the registry of kinds a directory may hold, their versions, and
a ModelDirectoryError naming the file for every way a directory can be unusable."""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import traverse_util
from PIL import Image

from configs.dbaf import stage2
from convert.e4e import ENCODER_TYPES
from convert.mtcnn import NETWORKS as MTCNN_NETWORKS
from dbaf_jax import commands
from dbaf_jax.commands import anonymize
from dbaf_jax.core.errors import ModelDirectoryError, NetworkNotFoundError, OutputExistsError
from dbaf_jax.inference.anonymizer import FaceAnonymizer
from dbaf_jax.models import dbaf
from dbaf_jax.models.dbaf.kria import KRIA, ConditionalMLP
from dbaf_jax.models.facenet import InceptionResnetV1
from dbaf_jax.models.inception import FIDInceptionV3
from dbaf_jax.models.parsers import BiSeNet, UNetParser
from dbaf_jax.models.stylegan2 import Discriminator
from dbaf_jax.storage import keys, model_directory, model_families, network_kinds
from dbaf_jax.storage.model_directory import NETWORK_FILE, load_network, save_network
from dbaf_jax.storage.network_kinds import KINDS
from dbaf_jax.train import networks as networks_lib
from dbaf_jax.train import stages
from dbaf_jax.train.dbaf.networks import PRETRAINED
from tests.paths import DATA

STYLE_DIM = 8
FACE = DATA / "face0.jpg"  # an aligned face


@pytest.fixture
def saved(tmp_path):
    """A small KRIA with random variables, saved; returns (path, module, variables)."""
    module = KRIA(style_dim=STYLE_DIM, groups=(1, 1, 2))
    codes = jnp.zeros((1, 4, STYLE_DIM))
    variables = jax.device_get(module.init(jax.random.PRNGKey(0), codes, codes))
    return save_network(tmp_path / "kria", module, variables, source="test"), module, variables


def edit_info(path, **changes):
    """Changes (None: removes) fields of ``path``'s network.json, as a hand edit would."""
    info = json.loads((path / NETWORK_FILE).read_text())
    for key, value in changes.items():
        if value is None:
            info.pop(key, None)
        else:
            info[key] = value
    (path / NETWORK_FILE).write_text(json.dumps(info))


def as_older(path, *fields):
    """``path``'s network.json as a save before ``fields`` (and its own hash) were recorded wrote it."""
    edit_info(path, **dict.fromkeys((*fields, model_directory.INFO_FIELD)))


def test_round_trip(saved):
    path, module, variables = saved
    info = json.loads((path / NETWORK_FILE).read_text())
    assert (info["kind"], info["kind_version"]) == ("kria:KRIA", KINDS["kria:KRIA"].version)
    assert info["content_sha256"] == network_kinds.content_hash(module, variables)
    assert set(info["variables_sha256"]) == {
        f.relative_to(path / "variables").as_posix()
        for f in (path / "variables").rglob("*")
        if f.is_file()
    }
    network = load_network(path)
    assert network.module == module
    jax.tree.map(np.testing.assert_array_equal, network.variables, variables)


def test_every_exported_class_is_registered():
    """Training exports (both CID kinds) and every converter's classes have a kind."""
    exported = []
    for variants in ("tiny", "tiny,no_cid"):
        exported += networks_lib.modules(
            stages.build_networks(stage2.get_config(variants))
        ).values()
    exported += [cls(stylegan_size=64, style_dim=STYLE_DIM) for cls in ENCODER_TYPES.values()]
    exported += [
        UNetParser(),
        BiSeNet(),
        Discriminator(size=64),
        InceptionResnetV1(),
        FIDInceptionV3(),
    ]
    exported += [module for module, _, _ in MTCNN_NETWORKS.values()]
    registered = {kind.module for kind in KINDS.values()}
    assert {type(m) for m in exported} <= registered
    for module in exported:
        assert KINDS[network_kinds.module_kind(module)].module is type(module)


# The kind names model directories carry: before the registry a kind was 'module:Class'
# under dbaf_jax.models, as the modules stood then (before DBAF's and iFADIT's networks
# moved into models/dbaf/ and models/ifadit/). Written out, so that no move of a module
# can rename a kind and stop those directories loading.
OLDER_KIND_NAMES = {
    "arcface:ArcFace",
    "cid:CID",
    "cid:LatentMLP",
    "e4e:Encoder4Editing",
    "e4e:GradualStyleEncoder",
    "facenet:InceptionResnetV1",
    "icl:IdentityCompensation",
    "inception:FIDInceptionV3",
    "kria:KRIA",
    "lpips:LPIPS",
    "maar:MAAR",
    "mapper:IdentityAttributeMapper",
    "mtcnn:ONet",
    "mtcnn:PNet",
    "mtcnn:RNet",
    "parsers:BiSeNet",
    "parsers:UNetParser",
    "sif:SecureIdentityFlow",
    "stylegan2:Discriminator",
    "stylegan2:Generator",
}


def test_kind_names_are_those_older_directories_carry():
    """Every name older directories carry is still a kind (so they load and keep their
    fingerprints), and names the class it always named."""
    assert OLDER_KIND_NAMES <= set(KINDS)
    for name in OLDER_KIND_NAMES:
        module, cls = name.split(":")
        assert KINDS[name].module.__qualname__ == cls
        assert KINDS[name].module.__module__.split(".")[-1] == module


def test_directory_without_kind_version_loads_as_version_1(saved):
    path, module, _ = saved
    as_older(path, "kind_version")
    assert load_network(path).module == module


def test_unregistered_class_is_not_saved(tmp_path):
    with pytest.raises(
        TypeError, match="ConditionalMLP is not a kind"
    ):  # a part of KRIA, not a network
        save_network(tmp_path / "x", ConditionalMLP(style_dim=STYLE_DIM), {})
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"kind": "stylegan2:Mapping"}, "unknown network kind 'stylegan2:Mapping'"),
        ({"kind": "os:system"}, "unknown network kind 'os:system'"),
        ({"kind": None}, "unknown network kind None"),
        (
            {"kind_version": 2},
            "kria:KRIA version 2, this dbaf_jax reads version 1; re-run the converter",
        ),
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
    with pytest.raises(
        NetworkNotFoundError, match=f"{tmp_path / 'nowhere'}: no such network directory"
    ):
        load_network(tmp_path / "nowhere")
    shutil.rmtree(path / "variables")
    with pytest.raises(
        ModelDirectoryError, match=f"{path / 'variables'}/.*: missing, the variables are incomplete"
    ):
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
        model_families.load_family(dbaf.FAMILY, tmp_path / "nowhere")
    with pytest.raises(
        NetworkNotFoundError, match=r"missing \['e4e', 'cid', 'decoder', 'key_generator'\]"
    ) as err:
        model_families.load_family(dbaf.FAMILY, path.parent)  # holds only kria
    assert str(path.parent) in str(err.value)


def test_load_pretrained_missing_directory_or_network(saved, tmp_path):
    path, _, _ = saved
    nets = stages.build_networks(stage2.get_config("tiny"))
    with pytest.raises(
        ModelDirectoryError, match=f"{tmp_path / 'nowhere'}: no such model directory"
    ):
        networks_lib.load_pretrained(nets, {}, tmp_path / "nowhere", PRETRAINED)
    with pytest.raises(NetworkNotFoundError, match="no 'generator' network"):
        networks_lib.load_pretrained(nets, {}, path.parent, {"decoder": "generator"})
    with pytest.raises(
        ModelDirectoryError, match="architecture differs"
    ):  # a KRIA of another width
        networks_lib.load_pretrained(nets, {}, path.parent, {"kria": "kria"})


# ----------------------------------------------------------------------------------
# Damage: a tampered-directory corpus. Each case damages a copy of one small DBAF model
# directory and expects one line naming the path at fault, and the directory unchanged.


@pytest.fixture(scope="module")
def dbaf_modules():
    """The tiny stage-2 config's DBAF networks, name -> module."""
    built = networks_lib.modules(stages.build_networks(stage2.get_config("tiny")))
    return {name: built[name] for name in dbaf.NETWORKS}


@pytest.fixture(scope="module")
def dbaf_variables(dbaf_modules):
    """Random variables of the shapes `init` gives (shapes only: traced, never compiled)."""
    rng = np.random.default_rng(0)
    nets = stages.build_networks(stage2.get_config("tiny"))
    shapes = jax.eval_shape(
        lambda key: networks_lib.init_variables(nets, key, 64, dbaf.NETWORKS), jax.random.key(0)
    )
    return jax.tree.map(lambda s: (0.1 * rng.standard_normal(s.shape)).astype(s.dtype), shapes)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, dbaf_modules, dbaf_variables):
    """A DBAF model directory written by `save_model`, as convert.dbaf and the export write it."""
    directory = tmp_path_factory.mktemp("pristine") / "model"
    networks = {name: (dbaf_modules[name], dbaf_variables[name]) for name in dbaf.NETWORKS}
    model_directory.save_model(directory, dbaf.FAMILY, networks, dict.fromkeys(networks, "test"))
    return directory


@pytest.fixture
def model(pristine, tmp_path):
    """A fresh copy of the pristine model directory to damage."""
    return shutil.copytree(pristine, tmp_path / "model")


def snapshot(root):
    """Every file and directory below ``root`` with its bytes (None for directories)."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


def refusal(directory, error=ModelDirectoryError):
    """dbaf.load's refusal of ``directory``: one line, nothing in the directory changed."""
    before = snapshot(directory) if directory.is_dir() else None
    with pytest.raises(error) as err:
        model_families.load_family(dbaf.FAMILY, directory)
    message = str(err.value)
    assert "\n" not in message, message
    assert (snapshot(directory) if directory.is_dir() else None) == before
    return message


def largest_data_file(network_dir):
    return max(
        (p for p in (network_dir / "variables").rglob("*") if p.is_file()),
        key=lambda p: p.stat().st_size,
    )


def first_leaf(tree):
    """The first leaf of ``tree`` in sorted path order (a mutable numpy array)."""
    flat = traverse_util.flatten_dict(tree)
    return flat[min(flat)]


def resave_variables(network_dir, variables):
    """Replaces a network's Orbax variables as a careless edit would, leaving network.json."""
    shutil.rmtree(network_dir / "variables")
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(network_dir / "variables", variables)


def test_pristine_model_loads_with_every_network(pristine, dbaf_variables):
    model, variables = model_families.load_family(dbaf.FAMILY, pristine)
    assert model.maar is not None and set(variables) == set(dbaf.NETWORKS)
    jax.tree.map(np.testing.assert_array_equal, variables, dbaf_variables)
    manifest = json.loads((pristine / model_directory.MODEL_FILE).read_text())
    assert manifest["family"] == "dbaf" and set(manifest["networks"]) == set(dbaf.NETWORKS)


def older_model(model):
    """``model`` as written before model.json recorded the fingerprint and network.json its own hash."""
    manifest = json.loads((model / model_directory.MODEL_FILE).read_text())
    del manifest[model_directory.FINGERPRINT_FIELD]
    (model / model_directory.MODEL_FILE).write_text(json.dumps(manifest))
    for name in manifest["networks"]:
        as_older(model / name)
    return model


def counted(patch, owner, name):
    """Patches ``owner.name`` to count its calls; returns the list of their first arguments."""
    calls = []
    function = getattr(owner, name)

    def count(*args, **kwargs):
        calls.append(args[0] if args else None)
        return function(*args, **kwargs)

    patch.setattr(owner, name, count)
    return calls


def test_fingerprint_is_recorded_and_equals_the_computed_one(model, dbaf_modules, dbaf_variables):
    """model.json's fingerprint is the one `model_fingerprint` computes from the weights, and
    a directory written before it was recorded gets the same one from its weights."""
    computed = network_kinds.model_fingerprint(dbaf_modules, dbaf_variables)
    manifest = json.loads((model / model_directory.MODEL_FILE).read_text())
    assert manifest[model_directory.FINGERPRINT_FIELD] == computed
    loaded = model_families.load_directory(model)
    assert loaded.fingerprint == computed and loaded.family == dbaf.FAMILY
    assert network_kinds.model_fingerprint(loaded.model.networks(), loaded.variables) == computed
    older = model_families.load_directory(older_model(model))
    assert older.fingerprint == computed
    jax.tree.map(np.testing.assert_array_equal, older.variables, loaded.variables)


def test_a_load_reads_model_json_once_and_hashes_each_weight_once(model):
    """Issue 44: model.json was parsed three times and the weights hashed three times (the
    files, the content hash, the fingerprint). Now: one read, the files' hashes only; a
    directory written before the recorded hashes gets one pass more over the arrays (the
    content hashes and the fingerprint together), never two."""
    files = sorted(p for p in model.rglob("*") if p.is_file() and "variables" in p.parts)
    for directory, arrays_passes in (
        (model, 0),
        (older_model(shutil.copytree(model, model.parent / "older")), 1),
    ):
        with pytest.MonkeyPatch.context() as patch:
            manifests = counted(patch, model_directory, "read_manifest")
            hashed_files = counted(patch, model_directory, "file_sha256")
            passes = counted(patch, model_directory, "hash_network_into")
            loaded = model_families.load_directory(directory)
        assert manifests == [directory] and loaded.recovery is None
        assert sorted(hashed_files) == [directory / f.relative_to(model) for f in files]
        assert len(passes) == arrays_passes * len(dbaf.NETWORKS)
        assert all(len(digests) == 2 for digests in passes)  # content hash and fingerprint


@pytest.mark.slow
def test_outputs_are_the_same_from_recorded_or_computed_hashes(model, tmp_path):
    """The recorded fingerprint and hashes change nothing users get: the same fingerprint
    (which outputs carry), recovery and anonymized faces, bit for bit, from this model
    and from the same model as written before they were recorded. (The anonymize
    command's PNG and face ledger with a full-width model: the same bytes before and
    after this change, docs/performance.md.)"""
    older = older_model(shutil.copytree(model, tmp_path / "older"))
    runs = [FaceAnonymizer(directory) for directory in (model, older)]
    size = runs[0].input_size
    face = np.asarray(Image.open(FACE).convert("RGB").resize((size, size)), np.float32)
    faces = np.stack([face, face[:, ::-1]]) / 127.5 - 1
    record = keys.new_key_record()
    key = runs[0].key_for("a password", record)
    outputs = [run.anonymize(faces, key)[0] for run in runs]
    assert runs[0].fingerprint == runs[1].fingerprint
    assert runs[0].trained_recovery == runs[1].trained_recovery
    np.testing.assert_array_equal(outputs[0], outputs[1])
    np.testing.assert_array_equal(runs[1].key_for("a password", record), key)


def test_flipped_bytes_in_the_variables(model):
    data = largest_data_file(model / "kria")
    raw = bytearray(data.read_bytes())
    for offset in range(len(raw) // 2, len(raw) // 2 + 64, 8):
        raw[offset] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert refusal(model).startswith(f"{data}: damaged, not the file that was written")


@pytest.mark.parametrize("new_value", ["nan", "nudged"])
def test_weights_written_over_fail_the_file_hashes(model, dbaf_variables, new_value):
    """NaN (or another value) written into the weights by re-saving the Orbax checkpoint."""
    changed = jax.tree.map(np.array, dbaf_variables["cid"])
    leaf = first_leaf(changed)
    leaf.flat[3] = np.nan if new_value == "nan" else leaf.flat[3] + 1e-3
    resave_variables(model / "cid", changed)
    assert refusal(model).startswith(
        f"{model / 'cid' / 'variables'}/"
    )  # a file missing or not the one written


def test_weights_written_over_fail_the_content_hash_without_file_hashes(model, dbaf_variables):
    """The arrays' own hash catches what the file hashes would, where those are absent."""
    changed = jax.tree.map(np.array, dbaf_variables["kria"])
    first_leaf(changed).flat[0] += 1e-3
    resave_variables(model / "kria", changed)
    as_older(model / "kria", model_directory.FILES_FIELD)
    message = refusal(model)
    assert (
        message.startswith(f"{model / 'kria'}: damaged")
        and "content_sha256 does not match" in message
    )


def test_non_finite_weights_are_refused_even_when_hashed(tmp_path, dbaf_modules, dbaf_variables):
    """Weights saved with NaN or inf (a diverged run) are refused at load, naming the leaf."""
    for bad in (np.nan, np.inf):
        changed = jax.tree.map(np.array, dbaf_variables["kria"])
        first_leaf(changed).flat[0] = bad
        path = save_network(tmp_path / f"kria_{bad}", dbaf_modules["kria"], changed, overwrite=True)
        with pytest.raises(
            ModelDirectoryError, match=f"^{path}: weight params/.* holds NaN or infinite values$"
        ):
            load_network(path)


def test_truncated_variables(model):
    data = largest_data_file(model / "e4e")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    assert refusal(model).startswith(f"{data}: damaged, not the file that was written")


def test_deleted_variables(model):
    shutil.rmtree(model / "decoder" / "variables")
    assert refusal(model).startswith(f"{model / 'decoder' / 'variables'}/")
    assert "missing, the variables are incomplete" in refusal(model)
    as_older(model / "decoder", model_directory.FILES_FIELD)  # saved before file hashes
    assert refusal(model).startswith(
        f"{model / 'decoder' / 'variables'}: cannot read the variables"
    )


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x89PNG not json", "damaged, not readable JSON"),
        (b"[1, 2]", "damaged, not a JSON object"),
        (b"", "damaged"),
    ],
)
def test_corrupt_network_json(model, content, message):
    (model / "maar" / NETWORK_FILE).write_bytes(content)
    assert refusal(model).startswith(f"{model / 'maar' / NETWORK_FILE}: {message}")


def test_missing_network_json(model):
    (model / "maar" / NETWORK_FILE).unlink()
    assert (
        refusal(model, NetworkNotFoundError)
        == f"{model / 'maar'}: not a dbaf_jax network directory (no network.json)"
    )


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"kind_version": 2}, "kria:KRIA version 2, this dbaf_jax reads version 1"),
        ({"kind": "stylegan2:Generator"}, "the config does not fit stylegan2:Generator"),
        ({"format_version": 7}, "format_version 7"),
        (
            {"config": {"style_dim": 32, "groups": [3, 3, 4], "extra_layers": 1}},
            "network.json changed since it was written (its info_sha256 does not match)",
        ),
        ({"content_sha256": "0" * 64}, "its info_sha256 does not match"),
        ({"source": "edited"}, "its info_sha256 does not match"),
    ],
)
def test_wrong_version_kind_or_config(model, changes, message):
    edit_info(model / "kria", **changes)
    found = refusal(model)
    assert found.startswith(str(model / "kria")) and message in found, found


def test_config_edited_in_an_older_network_fails_the_content_hash(model):
    """Without info_sha256 (saved before it), the recomputed content hash catches the edit."""
    as_older(model / "kria")
    edit_info(model / "kria", config={"style_dim": 32, "groups": [3, 3, 4], "extra_layers": 1})
    found = refusal(model)
    assert (
        found.startswith(f"{model / 'kria'}: damaged") and "content_sha256 does not match" in found
    )


def test_swapped_architecture(model):
    """The decoder's and the key generator's directories exchanged: each network is intact,
    but not the one model.json lists under its name."""
    (model / "decoder").rename(model / "swap")
    (model / "key_generator").rename(model / "decoder")
    (model / "swap").rename(model / "key_generator")
    assert refusal(model) == (
        f"{model / 'decoder'}: not the network model.json lists "
        "(another model's, or an interrupted write); write the whole model again"
    )


def test_file_where_a_directory_is_expected(model, tmp_path):
    shutil.rmtree(model / "cid")
    (model / "cid").write_text("not a network")
    assert refusal(model) == f"{model / 'cid'}: a file where a network directory is expected"
    (tmp_path / "model_file").write_text("not a model")
    assert (
        refusal(tmp_path / "model_file")
        == f"{tmp_path / 'model_file'}: a file where a model directory is expected"
    )


def test_leftover_partial_directory(model):
    """A save interrupted between removing the old network and renaming the new one leaves
    only NAME.partial: never read as the network, and named in the refusal."""
    (model / "kria").rename(model / "kria.partial")
    assert refusal(model, NetworkNotFoundError) == (
        f"{model}: not a complete dbaf model directory, missing ['kria'] (an interrupted save left ['kria.partial'])"
    )
    with pytest.raises(ModelDirectoryError, match="left by an interrupted save, not a network"):
        load_network(model / "kria.partial")


def test_leftover_partial_beside_a_complete_network_is_ignored(model):
    shutil.copytree(model / "kria", model / "kria.partial")
    shutil.rmtree(model / "kria.partial" / "variables")
    assert set(model_families.load_family(dbaf.FAMILY, model)[1]) == set(dbaf.NETWORKS)


def test_deleted_maar_is_refused_when_the_model_lists_it(model):
    shutil.rmtree(model / "maar")
    assert (
        refusal(model, NetworkNotFoundError)
        == f"{model}: not a complete dbaf model directory, missing ['maar']"
    )


def test_no_maar_model_is_what_its_manifest_says(tmp_path, dbaf_modules, dbaf_variables):
    """An ablation written without MAAR loads as one; a maar left in its directory is not taken."""
    names = [n for n in dbaf.NETWORKS if n != "maar"]
    networks = {n: (dbaf_modules[n], dbaf_variables[n]) for n in names}
    directory = model_directory.save_model(tmp_path / "ablation", dbaf.FAMILY, networks, {})
    model, variables = model_families.load_family(dbaf.FAMILY, directory)
    assert model.maar is None and "maar" not in variables
    save_network(directory / "maar", dbaf_modules["maar"], dbaf_variables["maar"])
    assert model_families.load_family(dbaf.FAMILY, directory)[0].maar is None


def test_directory_without_manifest_is_refused_unless_allowed(model):
    """Issue 21: deleting model.json switched the completeness and integrity checks off
    silently. Now it is refused; with the flag naming the risk, directories written
    before model.json load as before: the networks present decide (documented)."""
    (model / model_directory.MODEL_FILE).unlink()
    message = refusal(model)
    assert message.startswith(f"{model}: no model.json") and "--allow-unchecked-model" in message
    assert model_families.load_family(dbaf.FAMILY, model, without_manifest=True)[0].maar is not None
    shutil.rmtree(model / "maar")
    assert model_families.load_family(dbaf.FAMILY, model, without_manifest=True)[0].maar is None
    shutil.rmtree(model / "kria")
    assert (
        refusal(model, NetworkNotFoundError)
        == f"{model}: not a complete dbaf model directory, missing ['kria']"
    )


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "damaged, not readable JSON"),
        ('{"format_version": 1, "family": "dbaf"}', "damaged, no networks object"),
        (
            '{"format_version": 2, "family": "dbaf", "networks": {}}',
            "format_version 2, this dbaf_jax reads 1",
        ),
        (
            '{"format_version": 1, "family": "stylegan2", "networks": {}}',
            "a 'stylegan2' model, not a 'dbaf' one",
        ),
        (
            '{"format_version": 1, "family": "dbaf", "networks": {}, "fingerprint": "12ab"}',
            "damaged, fingerprint '12ab' is not 16 hex digits",
        ),
    ],
)
def test_damaged_manifest(model, content, message):
    (model / model_directory.MODEL_FILE).write_text(content)
    assert refusal(model).startswith(f"{model / model_directory.MODEL_FILE}: {message}")


def test_manifest_that_lacks_a_required_network(model):
    manifest = json.loads((model / model_directory.MODEL_FILE).read_text())
    del manifest["networks"]["kria"]
    (model / model_directory.MODEL_FILE).write_text(json.dumps(manifest))
    assert refusal(model, NetworkNotFoundError) == (
        f"{model / model_directory.MODEL_FILE}: not a complete dbaf model, it lists no ['kria']"
    )


def test_interrupted_rewrite_is_refused(model, dbaf_modules, dbaf_variables):
    """save_model writes model.json first: stopped after it (here: before any network), the
    directory's old networks do not match it and are refused."""
    changed = jax.tree.map(lambda x: x + 1, dbaf_variables["kria"])
    networks = {
        n: (dbaf_modules[n], changed if n == "kria" else dbaf_variables[n]) for n in dbaf.NETWORKS
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            model_directory,
            "_write_network",
            lambda *args, **kwargs: (_ for _ in ()).throw(KeyboardInterrupt),
        )
        with pytest.raises(KeyboardInterrupt):
            model_directory.save_model(model, dbaf.FAMILY, networks, {}, overwrite=True)
    assert refusal(model).startswith(f"{model / 'kria'}: not the network model.json lists")


def test_save_model_refuses_existing_without_overwrite(model, dbaf_modules, dbaf_variables):
    before = snapshot(model)
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        model_directory.save_model(
            model, dbaf.FAMILY, {"kria": (dbaf_modules["kria"], dbaf_variables["kria"])}, {}
        )
    assert snapshot(model) == before


@pytest.mark.parametrize("damage", ["maar deleted", "kria truncated"])
def test_anonymize_command_refuses_a_damaged_model_in_one_line(model, tmp_path, capsys, damage):
    """Through the user command: exit status 1, one ``error:`` line naming the path, no output."""
    if damage == "maar deleted":
        shutil.rmtree(model / "maar")
        at_fault = f"{model}: not a complete dbaf model directory, missing ['maar']"
    else:
        data = largest_data_file(model / "kria")
        data.write_bytes(data.read_bytes()[:-1])
        at_fault = f"{data}: damaged"
    faces = tmp_path / "faces"
    faces.mkdir()
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(faces / "a.png")
    (tmp_path / "password.txt").write_text("a password\n")
    before = snapshot(model)
    argv = ["--model", str(model), "--password-file", str(tmp_path / "password.txt"), "--aligned"]
    assert commands.exit_status(anonymize.main, [*argv, str(faces), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {at_fault}") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists() and snapshot(model) == before
