"""Under `CI=true` a skipped test fails the run: on CI every tool is installed, so a skip means a broken set-up.

A pytest plugin (registered by tests/conftest.py). Locally a missing tool still skips its tests, and `-ra` lists
why. Expected failures (`xfail`) are not skips and are left alone.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Generator

import pytest


def on_ci() -> bool:
    return os.environ.get("CI") == "true"


def needs_tools(*tools: str) -> pytest.MarkDecorator:
    """Skip unless every tool is found the way the code finds it (`shutil.which` on PATH)."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} on PATH (make installs it)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if on_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which fails the run: {reason}"
