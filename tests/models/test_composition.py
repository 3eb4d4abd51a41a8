"""What the families' compositions share (`dbaf_jax.models.composition`): an optional
capability is a protocol of its own, and nothing outside a family's folder branches on
a family's name."""

import ast

from dbaf_jax.models import composition
from dbaf_jax.models.dbaf import dbaf
from dbaf_jax.models.ifadit import ifadit
from dbaf_jax.storage import model_families
from tests.paths import REPO

PACKAGE = REPO / "dbaf_jax"


def test_latent_recovery_is_a_capability_of_dbaf_only():
    assert issubclass(dbaf.DBAF, composition.LatentRecovery)
    assert not issubclass(ifadit.IFADIT, composition.LatentRecovery)
    # every family's composition satisfies the inference protocol's members
    members = [
        name
        for name in dir(composition.Anonymizer)
        if not name.startswith("_") and name not in dir(object)
    ]
    for cls, _ in model_families.FAMILIES.values():
        assert all(hasattr(cls, name) for name in members), cls


def _family_folders() -> set[str]:
    return {f"dbaf_jax.models.{family}" for family in model_families.FAMILIES} | {
        f"dbaf_jax.train.{family}" for family in model_families.FAMILIES
    }


def _branches_on_a_family(tree: ast.AST) -> list[int]:
    """Lines comparing something with a ``FAMILY`` attribute or a family's name."""
    names = set(model_families.FAMILIES)
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for side in [node.left, *node.comparators]:
            if (isinstance(side, ast.Attribute) and side.attr == "FAMILY") or (
                isinstance(side, ast.Constant) and side.value in names
            ):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_nothing_outside_a_family_branches_on_its_name():
    folders = _family_folders()
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        if any(module == f or module.startswith(f + ".") for f in folders):
            continue
        lines = _branches_on_a_family(ast.parse(path.read_text()))
        if lines:
            found[module] = lines
    assert not found, f"comparisons with a family's name: {found}"


def test_the_check_sees_a_branch_on_a_family():
    tree = ast.parse("if model.FAMILY == dbaf.FAMILY:\n    pass\nok = family == 'ifadit'\n")
    assert _branches_on_a_family(tree) == [1, 3]
