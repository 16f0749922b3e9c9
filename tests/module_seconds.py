"""The seconds each test module took in a full `make test` run, added up (tests/module_seconds.json): how a fresh
clone, whose pytest cache is empty, orders its modules longest first (tests/conftest.py `group_by_module`).

Without it a fresh clone could only count a module's tests, and hand a module of a few long tests (a killed worker,
a deployment's ramp) to a worker last, to run alone while the others wait. Refresh it after a full run has filled
the cache: `.venv/bin/python -m tests.module_seconds`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

MODULE_SECONDS = Path(__file__).with_name("module_seconds.json")
CACHE = Path(__file__).parent.parent / ".pytest_cache" / "v" / "docjobs" / "durations"  # tests/time_budgets.py's


def module_of(nodeid: str) -> str:
    return Path(nodeid.split("::")[0]).stem


def module_seconds() -> dict[str, float]:
    return {str(name): float(seconds) for name, seconds in json.loads(MODULE_SECONDS.read_text()).items()}


def summed(durations: dict[str, float]) -> dict[str, float]:
    """Each module's seconds, added up from one entry a test, longest first."""
    totals: dict[str, float] = defaultdict(float)
    for nodeid, seconds in durations.items():
        totals[module_of(nodeid)] += seconds
    return {name: round(seconds, 1) for name, seconds in sorted(totals.items(), key=lambda item: -item[1])}


if __name__ == "__main__":
    present = {path.stem for path in Path(__file__).parent.glob("test_*.py")}
    times = {name: seconds for name, seconds in summed(json.loads(CACHE.read_text())).items() if name in present}
    MODULE_SECONDS.write_text(json.dumps(times, indent=1) + "\n")
    print(f"{MODULE_SECONDS}: {len(times)} modules, {sum(times.values()):.0f} s")
