"""The import graph of `dbaf_jax` runs one way: every module imports only modules of
its own layer or of a lower one (the layer table of docs/development.md), and the
applications of the top library layer do not import each other."""

import ast
from pathlib import Path

import pytest

from tests.paths import REPO

PACKAGE = REPO / "dbaf_jax"

# Lowest first; a module's layer is that of the longest name that is it or contains it.
LAYERS = [
    (
        "foundations",
        [
            "dbaf_jax",
            "dbaf_jax.errors",
            "dbaf_jax.precision",
            "dbaf_jax.sharding",
            "dbaf_jax.pipeline",
            "dbaf_jax.compilation_cache",
            "dbaf_jax.sidecars",
            "dbaf_jax.nn",
        ],
    ),
    ("networks", ["dbaf_jax.models"]),
    (
        "storage",
        [
            "dbaf_jax.atomic_files",
            "dbaf_jax.file_kinds",
            "dbaf_jax.images",
            "dbaf_jax.keys",
            "dbaf_jax.input_folder",
            "dbaf_jax.output_folder",
            "dbaf_jax.model_directory",
            "dbaf_jax.network_kinds",
            "dbaf_jax.model_families",
        ],
    ),
    ("faces", ["dbaf_jax.faces", "dbaf_jax.metadata", "dbaf_jax.evaluation.image_metrics"]),
    ("inference", ["dbaf_jax.inference"]),
    ("applications", ["dbaf_jax.train", "dbaf_jax.evaluation", "dbaf_jax.video"]),
    (
        "commands",
        # distributed/: the folder runs on a Ray cluster, beside the commands that take --ray.
        ["dbaf_jax.commands", "dbaf_jax.web", "dbaf_jax.distributed"],
    ),
]
APPLICATIONS = ["dbaf_jax.train", "dbaf_jax.evaluation", "dbaf_jax.video"]


def _contains(prefix: str, module: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int:
    matches = [
        (len(prefix), index)
        for index, (_, prefixes) in enumerate(LAYERS)
        for prefix in prefixes
        if _contains(prefix, module)
    ]
    if not matches:
        raise AssertionError(
            f"{module} is in no layer: add it to LAYERS and to docs/development.md"
        )
    return max(matches)[1]


def application_of(module: str) -> str | None:
    if layer_of(module) != LAYERS.index(
        next(layer for layer in LAYERS if layer[0] == "applications")
    ):
        return None
    return next(prefix for prefix in APPLICATIONS if _contains(prefix, module))


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """The `dbaf_jax` modules ``path`` imports (``from dbaf_jax.x import y`` counts as
    ``dbaf_jax.x.y`` when that is a module, else as ``dbaf_jax.x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if _contains("dbaf_jax", alias.name))
        elif (
            isinstance(node, ast.ImportFrom) and node.module and _contains("dbaf_jax", node.module)
        ):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                relative = Path(*candidate.split("."))
                is_module = (PACKAGE.parent / relative).with_suffix(".py").exists() or (
                    PACKAGE.parent / relative
                ).is_dir()
                found.add(candidate if is_module else node.module)
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    for path in MODULES:
        layer_of(module_name(path))


@pytest.mark.parametrize("path", MODULES, ids=lambda path: module_name(path))
def test_imports_run_down_the_layers(path):
    importer = module_name(path)
    for imported in sorted(imported_modules(path)):
        assert layer_of(imported) <= layer_of(importer), (
            f"{importer} ({LAYERS[layer_of(importer)][0]}) imports {imported} ({LAYERS[layer_of(imported)][0]}), a higher layer"
        )
        mine, theirs = application_of(importer), application_of(imported)
        assert mine is None or theirs is None or mine == theirs, (
            f"{importer} imports {imported}: applications stay apart"
        )


def test_the_layering_check_sees_an_upward_import(tmp_path):
    """The check itself: a networks module importing a file-level module is caught."""
    upward = tmp_path / "bad.py"
    upward.write_text("from dbaf_jax import model_directory\nfrom dbaf_jax.faces import paste\n")
    imported = imported_modules(upward)
    assert imported == {"dbaf_jax.model_directory", "dbaf_jax.faces.paste"}
    assert all(layer_of(module) > layer_of("dbaf_jax.models.dbaf.dbaf") for module in imported)
