"""The CI rule for skips (tests/ci_skips.py), on a tiny test file in a pytest subprocess of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

TINY = """
import pytest

def test_runs():
    pass

@pytest.mark.skip(reason="a tool is missing")
def test_skipped_by_a_mark():
    pass

def test_skipped_from_inside():
    pytest.skip("a service is missing")

@pytest.mark.xfail(reason="a known bug")
def test_known_bug():
    assert False
"""


def run_pytest(folder: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (folder / "test_tiny.py").write_text(TINY)
    env = {name: value for name, value in os.environ.items() if name != "CI"}
    env["PYTHONPATH"] = str(REPO)
    if ci is not None:
        env["CI"] = ci
    command = [sys.executable, "-m", "pytest", "-p", "tests.ci_skips", "-p", "no:cacheprovider", "-rA", "test_tiny.py"]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci", [None, "false"])
def test_a_skip_only_skips_off_ci(tmp_path: Path, ci: str | None) -> None:
    done = run_pytest(tmp_path, ci)
    assert done.returncode == 0, done.stdout
    assert "1 passed, 2 skipped, 1 xfailed" in done.stdout


def test_a_skip_fails_the_run_on_ci(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, "true")
    assert done.returncode == 1, done.stdout
    # A skip by a mark happens in set-up (an error), one from inside the test in its call (a failure).
    assert "1 failed, 1 passed, 1 xfailed, 1 error" in done.stdout
    assert "skipped under CI=true, which fails the run: Skipped: a tool is missing" in done.stdout
    assert "skipped under CI=true, which fails the run: Skipped: a service is missing" in done.stdout
