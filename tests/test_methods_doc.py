"""docs/methods.md holds: every name and path it gives exists, each method has its folder
in every layer, and its worked example (method X) is code that plugs in with the
registry lines the document shows: its files, run as the modules they name, build a
tiny X whose anonymization, recovery, training setup and training step trace through
the loop's own functions."""

import importlib
import importlib.util
import re
import sys
import types

import jax
import jax.numpy as jnp
import pytest

from dbaf_jax.models import composition
from dbaf_jax.storage import model_families, network_kinds
from dbaf_jax.train import initialization, method, stages
from dbaf_jax.train import networks as networks_lib
from tests.paths import REPO

DOC = (REPO / "docs" / "methods.md").read_text()
EXAMPLE_FILE = re.compile(r"```python\n# (\S+\.py)\n(.*?)```", re.S)
REGISTRY_LINES = re.compile(r"Registry lines?: .*?\n```\n(.*?)```", re.S)
DOTTED = re.compile(r"`(dbaf_jax(?:\.\w+)+)")
PATH = re.compile(r"`((?:dbaf_jax|configs|tests)/[\w./]*)`")


def _example(name: str) -> bool:
    """A name or path of the worked example's method X (or of a method in general)."""
    return bool(re.search(r"(^|[./])x([./]|$)|<method>", name))


def _resolve(name: str):
    """The module or attribute a dotted name names (its longest importable prefix, then
    attributes)."""
    parts = name.split(".")
    found = importlib.import_module(parts[0])
    for end, part in enumerate(parts[1:], start=2):
        if not hasattr(found, part) and hasattr(found, "__path__"):
            importlib.import_module(".".join(parts[:end]))
        found = getattr(found, part)
    return found


def test_every_name_and_path_the_document_gives_exists():
    names = sorted(n for n in set(DOTTED.findall(DOC)) if not _example(n))
    assert "dbaf_jax.models.composition.LatentRecovery" in names
    for name in names:
        _resolve(name)
    paths = sorted(p for p in set(PATH.findall(DOC)) if not _example(p))
    missing = [p for p in paths if not (REPO / p).exists()]
    assert not missing, f"docs/methods.md names missing paths {missing}"


def test_each_method_has_its_folder_in_every_layer_and_one_line_in_each_registry():
    assert set(stages.METHODS) == set(model_families.FAMILIES)
    for family in model_families.FAMILIES:
        assert (REPO / "dbaf_jax" / "models" / family / f"{family}.py").is_file()
        assert (REPO / "dbaf_jax" / "train" / family / "losses.py").is_file()
        assert (REPO / "configs" / family / "__init__.py").is_file()


def _module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _install(monkeypatch, name: str, package: bool) -> types.ModuleType:
    module = types.ModuleType(name)
    if package:
        module.__path__ = []
    monkeypatch.setitem(sys.modules, name, module)
    parent, _, child = name.rpartition(".")
    if parent:
        if parent not in sys.modules and importlib.util.find_spec(parent) is None:
            _install(monkeypatch, parent, package=True)
        monkeypatch.setattr(importlib.import_module(parent), child, module, raising=False)
    return module


@pytest.fixture
def method_x(monkeypatch):
    """The worked example's files as modules (in the document's order, which is their
    import order) and its registry lines added to the registries."""
    files = EXAMPLE_FILE.findall(DOC)
    assert [path for path, _ in files] == [
        "dbaf_jax/models/x/shift.py",
        "dbaf_jax/models/x/x.py",
        "dbaf_jax/train/x/__init__.py",
        "dbaf_jax/train/x/networks.py",
        "dbaf_jax/train/x/state.py",
        "dbaf_jax/train/x/losses.py",
        "dbaf_jax/train/x/stages.py",
        "configs/x/train.py",
    ]
    modules = {}
    for path, code in files:
        name = _module_name(path)
        module = _install(monkeypatch, name, package=path.endswith("__init__.py"))
        exec(compile(code, path, "exec"), module.__dict__)
        modules[path] = module
    lines = REGISTRY_LINES.findall(DOC)
    assert len(lines) == 2, "a registry-lines block for the networks and one for training"
    scope = {
        "x": modules["dbaf_jax/models/x/x.py"],
        "KeyShift": modules["dbaf_jax/models/x/shift.py"].KeyShift,
        "Kind": network_kinds.Kind,
        "Method": stages.Method,
        "x_stages": modules["dbaf_jax/train/x/stages.py"],
        "x_networks": modules["dbaf_jax/train/x/networks.py"],
        "x_state": modules["dbaf_jax/train/x/state.py"],
    }
    registries = {
        tuple: model_families.FAMILIES,
        network_kinds.Kind: network_kinds.KINDS,
        stages.Method: stages.METHODS,
    }
    for block in lines:
        for key, value in eval("{" + block + "}", scope).items():  # noqa: S307 - the document's own lines
            monkeypatch.setitem(registries[type(value)], key, value)
    return modules


@pytest.mark.slow  # builds, trains a step of and anonymizes with the example method
def test_the_worked_example_plugs_in_with_its_registry_lines(method_x):
    x = method_x["dbaf_jax/models/x/x.py"]
    config = method_x["configs/x/train.py"].get_config("tiny")
    # what inference takes: the Anonymizer protocol, no latent recovery
    members = [n for n in dir(composition.Anonymizer) if not n.startswith("_")]
    assert all(hasattr(x.X, n) for n in members if n not in dir(object))
    assert not issubclass(x.X, composition.LatentRecovery)
    family, _ = model_families.FAMILIES["x"]
    assert family is x.X and composition.network_names(family) == x.NETWORKS
    assert "shift:KeyShift" in network_kinds.KINDS

    nets = stages.build_networks(config)
    model = nets.model
    size = config.model.size
    variables = jax.eval_shape(
        lambda r: networks_lib.init_variables(nets, r, size), jax.random.PRNGKey(0)
    )
    images = jax.ShapeDtypeStruct((2, size, size, 3), jnp.float32)
    z = jax.ShapeDtypeStruct((1, *model.key_shape), jnp.float32)
    keys = jax.eval_shape(lambda v, z: model.key_from_z(v, z)[:, None], variables, z)
    anonymized = jax.eval_shape(model.anonymize_images, variables, images, keys)
    assert anonymized.shape == (1, 2, size, size, 3)
    recovered = jax.eval_shape(
        lambda v, a, k: model.recover_images(v, a[0], k), variables, anonymized, keys
    )
    assert recovered.shape == (1, 2, size, size, 3)

    # what training takes: the loop's setup and a step, through the registry
    assert stages.method(config) is stages.METHODS["x"]
    made = {}

    def create(rng):
        made["setup"] = initialization.random_setup(config, rng)[1]
        return made["setup"].state, made["setup"].frozen

    state, frozen = jax.eval_shape(create, jax.random.PRNGKey(0))
    stage = made["setup"].stage
    members = [n for n in dir(method.TrainingStage) if not n.startswith("_")]
    assert all(hasattr(stage, n) for n in members if n not in dir(object))
    batch = jax.ShapeDtypeStruct((config.batch_size, size, size, 3), jnp.float32)
    index = jax.ShapeDtypeStruct((), jnp.int32)
    new_state, metrics = jax.eval_shape(stage.step, state, frozen, batch, index)
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    assert set(metrics) == {"total", "rec", "apart"}
    assert set(state.params) == set(config.trainable) == {"shift"}
    assert stage.exported_networks() == ("e4e", "shift", "decoder", "key_generator")
