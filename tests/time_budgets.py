"""Each marker's time budget (docs/tests.md, "Time budgets"): a run fails when one test took longer than its
marker allows a test, or when the tests of one marker took longer, added up, than it allows them all.

A pytest plugin (registered by tests/conftest.py; `-p tests.time_budgets` elsewhere). The budgets are the
`time_budgets` lines of `[tool.pytest.ini_options]`, one a marker: `e2e: 900 s in all, 90 s a test`. A test's time
is the one pytest reports for it (`--durations`): its set-up, call and tear-down, the fixtures made for it
included. A marker's total adds those times up, whatever ran at once: with pytest-xdist's workers (`make test`)
it is more than the wall time the marker took, and each test is slower than it would be alone on the machine.

The times are kept in pytest's cache (`docjobs/durations`, one entry a test, updated by each run): tests/conftest.py
orders a `make test` run's modules by them, longest first. Under pytest-xdist only the controller, which receives
every worker's reports, keeps and checks them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

BUDGET_LINE = re.compile(r"(?P<kind>\w+): (?P<total>\d+(?:\.\d+)?) s in all, (?P<test>\d+(?:\.\d+)?) s a test")
CACHE_KEY = "docjobs/durations"


@dataclass(frozen=True)
class Budget:
    total: float  # every test of the marker, their times added up
    test: float  # any one test


def parse_budgets(lines: list[str]) -> dict[str, Budget]:
    budgets = {}
    for line in lines:
        match = BUDGET_LINE.fullmatch(line.strip())
        if match is None:
            raise pytest.UsageError(f"time_budgets: {line!r} is not `MARKER: N s in all, N s a test`")
        budgets[match["kind"]] = Budget(float(match["total"]), float(match["test"]))
    return budgets


def plain_nodeid(nodeid: str) -> str:
    """The test's node ID without the `@group` pytest-xdist appends to it under `--dist loadgroup`."""
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") and at > nodeid.rfind("::") else nodeid


@dataclass
class TimeBudgets:
    budgets: dict[str, Budget]
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # test -> set-up + call + tear-down
    kinds: dict[str, str] = field(default_factory=dict)  # test -> its marker among the budgets'
    overruns: list[str] = field(default_factory=list)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test = plain_nodeid(report.nodeid)
        self.seconds[test] += report.duration
        kind = next((kind for kind in self.budgets if kind in report.keywords), None)
        if kind is not None:
            self.kinds[test] = kind

    def totals(self) -> dict[str, float]:
        totals = {kind: 0.0 for kind in self.budgets}
        for test, kind in self.kinds.items():
            totals[kind] += self.seconds[test]
        return totals

    def check(self) -> list[str]:
        """What went over its budget, one line each (nothing: every budget held)."""
        found = []
        for test, kind in sorted(self.kinds.items(), key=lambda item: -self.seconds[item[0]]):
            seconds, budget = self.seconds[test], self.budgets[kind]
            if seconds > budget.test:
                found.append(f"{test} took {seconds:.1f} s: over {kind}'s {budget.test:g} s a test")
        for kind, total in self.totals().items():
            if total > self.budgets[kind].total:
                found.append(f"the {kind} tests took {total:.1f} s in all: over their {self.budgets[kind].total:g} s")
        return found

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        cache = getattr(session.config, "cache", None)  # None under `-p no:cacheprovider`
        if cache is not None and self.seconds:
            times = {test: round(seconds, 3) for test, seconds in self.seconds.items()}
            cache.set(CACHE_KEY, {**cache.get(CACHE_KEY, {}), **times})
        self.overruns = self.check()
        if self.overruns and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.kinds:
            return
        ran = defaultdict(list)
        for test, kind in self.kinds.items():
            ran[kind].append(self.seconds[test])
        held = ", ".join(
            f"{kind} {sum(ran[kind]):.0f} s of {budget.total:g} (slowest {max(ran[kind]):.1f} s of {budget.test:g})"
            for kind, budget in self.budgets.items()
            if ran[kind]
        )
        if self.overruns:
            terminalreporter.section("time budgets exceeded (docs/tests.md)", sep="=", red=True, bold=True)
            for line in self.overruns:
                terminalreporter.line(line, red=True)
        terminalreporter.line(f"time budgets: {held}")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("time_budgets", "each marker's time budget: `MARKER: N s in all, N s a test`", type="linelist")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its controller checks every worker's tests
        return
    budgets = parse_budgets(config.getini("time_budgets"))
    if budgets:
        config.pluginmanager.register(TimeBudgets(budgets), "docjobs-time-budgets")
