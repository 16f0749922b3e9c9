"""The pinned Python packages come in two files: requirements.txt, what the jobs run (`make demo`, the worker image),
and requirements-dev.txt, what the tests, linters and docs add (`make test`, `make check`, `make lint`). Both agree
with pyproject.toml, and the runtime set installs alone: it holds everything its packages require."""

from __future__ import annotations

import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def pins(name: str) -> dict[NormalizedName, str]:
    """A requirements file's `name==version` lines (comments and `-r` includes left out)."""
    lines = (line.strip() for line in (REPO / name).read_text().splitlines())
    pairs = (line.split("==") for line in lines if line and not line.startswith(("#", "-r ")))
    return {canonicalize_name(package): version for package, version in pairs}


RUNTIME, DEV = pins("requirements.txt"), pins("requirements-dev.txt")


def test_the_two_sets_are_disjoint_and_the_dev_set_includes_the_runtime_set() -> None:
    assert RUNTIME.keys() & DEV.keys() == set()
    assert "-r requirements.txt" in (REPO / "requirements-dev.txt").read_text().splitlines()


def test_pyproject_dependencies_are_pinned_at_their_versions() -> None:
    for line in PYPROJECT["dependencies"]:
        wanted = Requirement(line)
        assert RUNTIME.get(canonicalize_name(wanted.name), "absent") in wanted.specifier, line
    for line in PYPROJECT["optional-dependencies"]["dev"]:
        wanted = Requirement(line)
        assert (RUNTIME | DEV).get(canonicalize_name(wanted.name), "absent") in wanted.specifier, line


def test_no_tool_of_the_tests_is_in_the_runtime_set() -> None:
    for tool in ("pytest", "ruff", "mypy", "moto", "schemathesis", "import-linter", "mkdocs", "hypothesis"):
        assert tool not in RUNTIME and tool in DEV, tool


def closure(roots: list[str]) -> set[NormalizedName]:
    """The packages `roots` pull in, with their extras, by the installed packages' metadata (this venv has both sets,
    at the pinned versions: checked)."""
    found: dict[NormalizedName, set[str]] = {}
    todo = [Requirement(line) for line in roots]
    while todo:
        wanted = todo.pop()
        name = canonicalize_name(wanted.name)
        if name in found and wanted.extras <= found[name]:
            continue
        extras = found.setdefault(name, set())
        extras |= wanted.extras
        distribution = metadata.distribution(name)
        assert distribution.version == (RUNTIME | DEV).get(name), f"{name} {distribution.version} is not the pin"
        for line in distribution.requires or []:
            needed = Requirement(line)
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra}) for extra in extras | {""}):
                todo.append(needed)
    return set(found)


def test_each_set_is_what_its_dependencies_pull_in() -> None:
    """The runtime set installs alone (nothing it needs is only in the dev set) and holds nothing the jobs do not
    need; the two together are what the dev dependencies add."""
    runtime = closure(PYPROJECT["dependencies"])
    assert runtime == RUNTIME.keys()
    assert closure(PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["dev"]) == RUNTIME.keys() | DEV.keys()
