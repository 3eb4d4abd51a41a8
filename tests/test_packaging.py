"""Every version has one home: pyproject.toml pins what pip resolves, requirements-nodeps.txt
only what must be installed with --no-deps; the CUDA extras name the pinned JAX; CI and the
README install through the [dev] extra. requirements.txt, generated from pyproject.toml by
.ci/lock.py, locks the runtime install; these checks of it read only files and the installed
packages' metadata (no index), so a new release elsewhere cannot fail them."""

import importlib.util
import re
import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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
    assert sorted(p.name for p in REPO.glob("requirements*.txt")) == [
        "requirements-nodeps.txt",
        "requirements.txt",  # generated: the lock
    ]


def _lock_script():
    spec = importlib.util.spec_from_file_location("lock", REPO / ".ci" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCK = _lock_script()
REGENERATE = "pyproject.toml and requirements.txt differ: run python .ci/lock.py"


def _locked() -> dict[str, str]:
    """requirements.txt's packages: canonical name -> version."""
    lines = LOCK.LOCK.read_text().splitlines()
    pins = [line.split("==") for line in lines if line and not line.startswith((" ", "#"))]
    assert all(len(pin) == 2 for pin in pins), f"not name==version: {pins}"
    locked = {canonicalize_name(name): version for name, version in pins}
    assert len(locked) == len(pins), "a package locked twice"
    return locked


def test_the_lock_records_pyprojects_dependency_list():
    """The header's digest is that of pyproject's dependencies now: any change to the
    list (a pin, a new package, a marker) fails here until the lock is generated again."""
    text = LOCK.LOCK.read_text()
    digests = [line for line in text.splitlines() if line.startswith(LOCK.DIGEST_PREFIX)]
    expected = LOCK.dependencies_digest((REPO / "pyproject.toml").read_text())
    assert digests == [LOCK.DIGEST_PREFIX + expected], REGENERATE
    assert text.startswith(LOCK.HEADER)


def test_every_runtime_pin_is_locked_at_its_version():
    locked = _locked()
    for requirement in map(Requirement, PROJECT["dependencies"]):
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name}: not in requirements.txt; {REGENERATE}"
        assert requirement.specifier.contains(locked[name]), (
            f"{name}: pyproject.toml {requirement.specifier}, requirements.txt {locked[name]}; "
            f"{REGENERATE}"
        )


def _installed_closure(requirements: list[str]) -> dict[str, str]:
    """Every installed distribution that ``requirements`` bring (their requirements' markers
    evaluated here, extras followed): canonical name -> installed version. Each requirement
    on the way must be installed at a version it allows."""
    versions: dict[str, str] = {}
    followed: dict[str, set[str]] = {}  # name -> the extras ("" the base) whose requirements are in
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise AssertionError(f"{name} ({requirement}) is not installed") from None
        assert requirement.specifier.contains(distribution.version, prereleases=True), (
            f"{requirement}: {distribution.version} installed"
        )
        versions[name] = distribution.version
        extras = ({""} | set(requirement.extras)) - followed.setdefault(name, set())
        followed[name] |= extras
        for text in distribution.requires or []:
            needed = Requirement(text)
            marker = needed.marker
            if marker is None or any(marker.evaluate({"extra": extra}) for extra in extras):
                todo.append(needed)
    return versions


def test_the_lock_is_the_installed_runtime_closure():
    """requirements.txt is exactly what pyproject's dependencies bring in this environment,
    at the versions installed (CI installs from it: .ci/run), each allowed by every
    package that requires it: the lock is complete, closed and consistent."""
    installed = _installed_closure(PROJECT["dependencies"])
    locked = _locked()
    assert sorted(set(installed) - set(locked)) == [], f"installed, not locked; {REGENERATE}"
    assert sorted(set(locked) - set(installed)) == [], f"locked, not required; {REGENERATE}"
    differ = {
        name: (locked[name], installed[name]) for name in locked if locked[name] != installed[name]
    }
    assert differ == {}, (
        f"locked and installed versions differ: install with pip install -r requirements.txt, "
        f"or {REGENERATE}"
    )


def test_dev_brings_every_extra_ci_tests():
    dev = PROJECT["optional-dependencies"]["dev"]
    selves = [r for r in dev if _name(r) == SELF]
    assert len(selves) == 1
    included = set(REQUIREMENT.match(selves[0]).group(2).strip("[]").split(","))
    # Every extra but the GPU's, which CI cannot use.
    assert {
        name for name in PROJECT["optional-dependencies"] if not name.startswith(("cuda", "dev"))
    } <= included


def test_ci_and_readme_install_the_lock_then_the_dev_extra():
    """The runtime from requirements.txt, the [dev] extra within it (``-c``), then
    facenet-pytorch alone; the README's reproducible install is the lock's."""
    ci = (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    for text in (ci, readme):
        assert re.search(r"pip install (-q )?-r requirements\.txt", text)
        assert re.search(r'pip install (-q )?-e "\.\[dev\]" -c requirements\.txt', text)
        assert "--no-deps -r requirements-nodeps.txt" in text
    assert "pip install -r requirements.txt && pip install --no-deps -e ." in readme
