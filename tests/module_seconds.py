"""What a run knows of each test module before it starts, and how it orders the modules with it.

- `tests/module_seconds.json`: the seconds each module took in a full `make test` run, added up: how a fresh clone,
  whose pytest cache is empty, orders its modules longest first (tests/conftest.py `group_by_module`). Without it a
  fresh clone could only count a module's tests, and hand a module of a few long tests (a killed worker, a
  deployment's ramp) to a worker last, to run alone while the others wait. Refresh it after a full run has filled
  the cache: `.venv/bin/python -m tests.module_seconds`.
- `tests/module_cpu.json`: the CPU seconds each module uses per second of its run alone (its tests, and the dev
  server, workers, children and tools it starts): how a run spreads the modules that keep the CPU busy (OCR,
  LibreOffice, the sandbox) over its whole length, instead of starting them all at once, as longest first alone
  did (they are the longest), with four workers on two cores. Measure it again on an idle machine with
  `.venv/bin/python -m tests.module_seconds --cpu` (each module alone, one after the other: about 20 minutes).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

MODULE_SECONDS = Path(__file__).with_name("module_seconds.json")
MODULE_CPU = Path(__file__).with_name("module_cpu.json")
CACHE = Path(__file__).parent.parent / ".pytest_cache" / "v" / "docjobs" / "durations"  # tests/time_budgets.py's


def module_of(nodeid: str) -> str:
    return Path(nodeid.split("::")[0]).stem


def module_seconds() -> dict[str, float]:
    return {str(name): float(seconds) for name, seconds in json.loads(MODULE_SECONDS.read_text()).items()}


def module_cpu() -> dict[str, float]:
    return {str(name): float(share) for name, share in json.loads(MODULE_CPU.read_text()).items()}


def summed(durations: dict[str, float]) -> dict[str, float]:
    """Each module's seconds, added up from one entry a test, longest first."""
    totals: dict[str, float] = defaultdict(float)
    for nodeid, seconds in durations.items():
        totals[module_of(nodeid)] += seconds
    return {name: round(seconds, 1) for name, seconds in sorted(totals.items(), key=lambda item: -item[1])}


def spread_by_cpu(longest_first: Sequence[str], seconds: Mapping[str, float], cpu: Mapping[str, float]) -> list[str]:
    """The groups in `longest_first` order, but with those that use more CPU a second than the run's mean spread
    over it: each next group is the longest heavy one while the run so far has used no more CPU than its mean
    share, else the longest light one. `seconds` and `cpu` (CPU seconds a second) are each group's."""
    total = sum(seconds[group] for group in longest_first)
    mean = sum(seconds[group] * cpu[group] for group in longest_first) / max(total, 1e-9)
    heavy = [group for group in longest_first if cpu[group] > mean]
    light = [group for group in longest_first if cpu[group] <= mean]
    order: list[str] = []
    used = spent = 0.0
    while heavy or light:
        take = heavy if heavy and (not light or used <= mean * spent) else light
        group = take.pop(0)
        order.append(group)
        spent += seconds[group]
        used += seconds[group] * cpu[group]
    return order


def measure_cpu(modules: Sequence[str]) -> dict[str, float]:
    """Each module run alone, one after the other: the CPU seconds of everything it started, per second."""
    shares = {}
    for name in modules:
        before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
        subprocess.run([*command, f"tests/{name}.py"], cwd=MODULE_CPU.parent.parent, capture_output=True, check=False)
        after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - started
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        shares[name] = round(cpu / wall, 2)
        print(f"{name}: {cpu:.0f} s of CPU in {wall:.0f} s", flush=True)
    return shares


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Refresh tests/module_seconds.json (or, with --cpu, module_cpu.json).")
    parser.add_argument("--cpu", action="store_true", help="run each module alone and record its CPU share")
    parser.add_argument("modules", nargs="*", help="with --cpu: only these (the others keep what was recorded)")
    options = parser.parse_args()
    present = sorted(path.stem for path in Path(__file__).parent.glob("test_*.py"))
    if options.cpu:
        kept = {name: share for name, share in module_cpu().items() if name in present} if options.modules else {}
        shares = {**kept, **measure_cpu(options.modules or present)}
        MODULE_CPU.write_text(json.dumps(dict(sorted(shares.items(), key=lambda item: -item[1])), indent=1) + "\n")
        print(f"{MODULE_CPU}: {len(shares)} modules")
    else:
        times = {name: seconds for name, seconds in summed(json.loads(CACHE.read_text())).items() if name in present}
        MODULE_SECONDS.write_text(json.dumps(times, indent=1) + "\n")
        print(f"{MODULE_SECONDS}: {len(times)} modules, {sum(times.values()):.0f} s")
