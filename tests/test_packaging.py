"""Every version has one home: pyproject.toml pins what pip resolves, requirements-nodeps.txt
only what must be installed with --no-deps; the CUDA extras name the pinned JAX; CI and the
README install through the [dev] extra."""

import re
import tomllib

from tests.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
SELF = "dbaf-jax"
REQUIREMENT = re.compile(r"^([A-Za-z0-9_.-]+)(\[[^]]*\])?(.*)$")


def _name(requirement: str) -> str:
    return REQUIREMENT.match(requirement).group(1).lower().replace("_", "-")


def _version(requirement: str) -> str:
    return REQUIREMENT.match(requirement).group(3)


def _nodeps() -> list[str]:
    lines = (REPO / "requirements-nodeps.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _pinned() -> list[str]:
    extras = PROJECT["optional-dependencies"].values()
    return [
        r
        for r in PROJECT["dependencies"] + [r for extra in extras for r in extra]
        if _name(r) != SELF
    ]


def test_every_dependency_is_pinned_exactly_once():
    requirements = _pinned() + _nodeps()
    loose = [r for r in requirements if not _version(r).startswith("==")]
    assert not loose, f"not pinned with ==: {loose}"
    # jax appears in the runtime pins and in each CUDA extra (jax[cudaXX]), at one version.
    names = [_name(r) for r in requirements if _name(r) != "jax"]
    assert len(names) == len(set(names)), (
        f"pinned twice: {sorted({n for n in names if names.count(n) > 1})}"
    )
    assert {_version(r) for r in requirements if _name(r) == "jax"} == {
        _version(next(r for r in PROJECT["dependencies"] if _name(r) == "jax"))
    }


def test_the_cuda_extras_name_the_pinned_jax():
    jax = next(r for r in PROJECT["dependencies"] if _name(r) == "jax")
    for cuda in ("cuda12", "cuda13"):
        assert PROJECT["optional-dependencies"][cuda] == [f"jax[{cuda}]{_version(jax)}"]


def test_no_other_requirement_file_holds_pins():
    assert sorted(p.name for p in REPO.glob("requirements*.txt")) == ["requirements-nodeps.txt"]


def test_dev_brings_every_extra_ci_tests():
    dev = PROJECT["optional-dependencies"]["dev"]
    selves = [r for r in dev if _name(r) == SELF]
    assert len(selves) == 1
    included = set(REQUIREMENT.match(selves[0]).group(2).strip("[]").split(","))
    # Every extra but the GPU's, which CI cannot use.
    assert {
        name for name in PROJECT["optional-dependencies"] if not name.startswith(("cuda", "dev"))
    } <= included


def test_ci_and_readme_install_through_the_dev_extra():
    ci = (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    for text in (ci, readme):
        assert 'pip install -q -e ".[dev]"' in text or 'pip install -e ".[dev]"' in text
        assert "--no-deps -r requirements-nodeps.txt" in text
