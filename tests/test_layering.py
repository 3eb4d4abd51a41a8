"""The import graph of `dbaf_jax` runs one way: every module imports only modules of
its own layer or of a lower one, and the applications of one layer do not import each
other. The layers come from the tree: `dbaf_jax.LAYERS` orders them, and each folder of
the package names its own in its ``__init__`` (``LAYER``); no module lies loose at the
top of the package."""

import ast
from pathlib import Path

import pytest

from tests.paths import REPO

PACKAGE = REPO / "dbaf_jax"
APPLICATIONS_LAYER = "applications"


def _assigned(path: Path, name: str):
    """The literal assigned to ``name`` at the top of ``path``, read without importing it."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == name for target in node.targets
        ):
            return ast.literal_eval(node.value)
    return None


def folder_layers(package: Path = PACKAGE) -> tuple[list[str], dict[str, str]]:
    """The layers, lowest first, and each top-level folder's layer, as the tree says."""
    layers = list(_assigned(package / "__init__.py", "LAYERS"))
    folders = {}
    for init in sorted(package.glob("*/__init__.py")):
        layer = _assigned(init, "LAYER")
        assert layer in layers, (
            f"{init.parent.name}/__init__.py: LAYER = {layer!r}, not one of dbaf_jax.LAYERS {layers}"
        )
        folders[init.parent.name] = layer
    return layers, folders


LAYERS, FOLDER_LAYERS = folder_layers()


def _contains(prefix: str, module: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def folder_of(module: str) -> str | None:
    """The top-level folder ``module`` lies in (None: the package's own ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_of(module: str) -> int:
    folder = folder_of(module)
    if folder is None:
        return 0  # dbaf_jax itself: its version and the layers' names
    if folder not in FOLDER_LAYERS:
        raise AssertionError(
            f"{module} lies in no layer's folder: put it in one (dbaf_jax.LAYERS, each "
            "folder's LAYER) and say so in docs/development.md"
        )
    return LAYERS.index(FOLDER_LAYERS[folder])


def application_of(module: str) -> str | None:
    folder = folder_of(module)
    return folder if folder and FOLDER_LAYERS.get(folder) == APPLICATIONS_LAYER else None


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
    loose = [path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py"]
    assert not loose, (
        f"modules loose at the top of dbaf_jax/: {loose}; each belongs in a layer's folder"
    )
    for path in MODULES:
        layer_of(module_name(path))


@pytest.mark.parametrize("path", MODULES, ids=lambda path: module_name(path))
def test_imports_run_down_the_layers(path):
    importer = module_name(path)
    for imported in sorted(imported_modules(path)):
        assert layer_of(imported) <= layer_of(importer), (
            f"{importer} ({LAYERS[layer_of(importer)]}) imports {imported} ({LAYERS[layer_of(imported)]}), a higher layer"
        )
        mine, theirs = application_of(importer), application_of(imported)
        assert mine is None or theirs is None or mine == theirs, (
            f"{importer} imports {imported}: applications stay apart"
        )


def test_the_layering_check_sees_an_upward_import(tmp_path):
    """The check itself: a networks module importing a storage module is caught."""
    upward = tmp_path / "bad.py"
    upward.write_text(
        "from dbaf_jax.storage import model_directory\nfrom dbaf_jax.faces import paste\n"
    )
    imported = imported_modules(upward)
    assert imported == {"dbaf_jax.storage.model_directory", "dbaf_jax.faces.paste"}
    assert all(layer_of(module) > layer_of("dbaf_jax.models.dbaf.dbaf") for module in imported)


def test_a_folder_must_name_a_known_layer(tmp_path):
    """The tree is the table: a folder whose ``__init__`` names no layer of
    `dbaf_jax.LAYERS` is refused, naming the file."""
    (tmp_path / "__init__.py").write_text('LAYERS = ("foundations", "faces")\n')
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "__init__.py").write_text('"""Doc."""\n\nLAYER = "foundations"\n')
    assert folder_layers(tmp_path) == (["foundations", "faces"], {"core": "foundations"})
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "__init__.py").write_text('"""No layer."""\n')
    with pytest.raises(AssertionError, match="extra/__init__.py: LAYER = None"):
        folder_layers(tmp_path)
