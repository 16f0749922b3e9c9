"""The markers' time budgets (tests/time_budgets.py): the ones docs/tests.md states are the ones checked, and a run
over one fails, in a pytest subprocess of its own on tiny test files, with pytest-xdist's workers too."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import KINDS, REPO
from tests.module_seconds import module_seconds
from tests.time_budgets import CACHE_KEY, Budget, parse_budgets, plain_nodeid

SLOW = 0.5  # what the tiny slow test sleeps: it takes at least that long on any machine
TINY = f"""
import time
import pytest

@pytest.mark.unit
def test_slow():
    time.sleep({SLOW})

@pytest.mark.unit
def test_quick():
    pass

@pytest.mark.e2e
def test_other_marker():
    time.sleep({SLOW})
"""


def run_pytest(folder: Path, budgets: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    (folder / "test_tiny.py").write_text(TINY)
    lines = "".join(f"    {line}\n" for line in budgets)
    (folder / "pytest.ini").write_text(f"[pytest]\nmarkers =\n    unit\n    e2e\ntime_budgets =\n{lines}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "pytest", "-p", "tests.time_budgets", "-q", *args, "test_tiny.py"]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_the_budgets_docs_state_are_the_ones_checked() -> None:
    ini = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    checked = parse_budgets(ini["time_budgets"])
    assert set(checked) == set(KINDS)
    page = (REPO / "docs" / "tests.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| (\d+) s \| (\d+) s \|", page, re.MULTILINE)
    assert {kind: Budget(float(total), float(test)) for kind, total, test in rows} == checked


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_test_over_its_budget_fails_the_run(tmp_path: Path, workers: list[str]) -> None:
    done = run_pytest(tmp_path, ["unit: 60 s in all, 0.2 s a test", "e2e: 60 s in all, 60 s a test"], *workers)
    assert done.returncode == 1, done.stdout
    assert "3 passed" in done.stdout  # every test passed: the budget failed the run
    assert "time budgets exceeded" in done.stdout
    overruns = re.findall(r"^(\S+) took [\d.]+ s: over (\w+)'s 0.2 s a test$", done.stdout, re.MULTILINE)
    assert overruns == [("test_tiny.py::test_slow", "unit")], done.stdout  # not the quick one, nor the e2e one


def test_a_marker_over_its_total_fails_the_run(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, ["unit: 0.3 s in all, 60 s a test", "e2e: 60 s in all, 60 s a test"])
    assert done.returncode == 1, done.stdout
    assert re.search(r"^the unit tests took [\d.]+ s in all: over their 0.3 s$", done.stdout, re.MULTILINE)
    assert "the e2e tests took" not in done.stdout


def test_a_run_within_its_budgets_passes_and_keeps_its_times(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, ["unit: 60 s in all, 60 s a test", "e2e: 60 s in all, 60 s a test"])
    assert done.returncode == 0, done.stdout
    assert re.search(r"^time budgets: unit [\d.]+ s of 60 \(slowest [\d.]+ s of 60\), e2e", done.stdout, re.MULTILINE)
    kept = json.loads((tmp_path / ".pytest_cache" / "v" / CACHE_KEY).read_text())
    assert set(kept) == {f"test_tiny.py::{name}" for name in ("test_slow", "test_quick", "test_other_marker")}
    assert kept["test_tiny.py::test_slow"] >= SLOW and kept["test_tiny.py::test_quick"] < SLOW


def test_a_budget_line_is_read_or_refused() -> None:
    assert parse_budgets(["e2e: 900 s in all, 90.5 s a test"]) == {"e2e": Budget(900, 90.5)}
    with pytest.raises(pytest.UsageError, match="is not"):
        parse_budgets(["e2e: 900 s, 90 s"])


def test_a_group_suffix_is_not_part_of_the_test() -> None:
    assert plain_nodeid("tests/test_a.py::test_b@test_a") == "tests/test_a.py::test_b"
    assert plain_nodeid("tests/test_a.py::test_b[x@y]") == "tests/test_a.py::test_b[x@y]"
    assert plain_nodeid("tests/test_a.py::test_b[x@y]@mallory") == "tests/test_a.py::test_b[x@y]"


def test_a_fresh_clone_orders_its_modules_by_their_recorded_seconds() -> None:
    """With no pytest cache, a module of one long test (test_hostile_jobs) goes before one of many shorter ones
    (test_office, whose tests each count more than the other's one while nothing is recorded)."""
    recorded = module_seconds()
    assert recorded["test_hostile_jobs"] > recorded["test_office"]
    assert {name for name in recorded} <= {path.stem for path in (REPO / "tests").glob("test_*.py")}  # none stale
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "--dist", "loadgroup"]
    done = subprocess.run(
        [*command, "tests/test_office.py", "tests/test_hostile_jobs.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    modules = [line.split("::")[0] for line in done.stdout.splitlines() if "::" in line]
    assert modules and modules[0] == "tests/test_hostile_jobs.py", done.stdout
