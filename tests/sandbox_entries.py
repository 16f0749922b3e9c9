"""Stage doubles served by document children in tests/test_sandbox.py: each behaves as a hostile or broken
document would make a stage behave (spin, grow, fall silent, crash), or reports what the child can see."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from docjobs.models import Frozen
from docjobs.stage_work import Entry

ProgressFn = Callable[[int, int], None]


class Order(Frozen):
    pages: int = 0
    release_file: str | None = None  # blocks until this file exists
    pid_file: str | None = None  # where to write pids the test wants to find


class Seen(Frozen):
    names: tuple[str, ...] = ()
    pid: int = 0


def environment(order: Order, progress: ProgressFn) -> Seen:
    return Seen(names=tuple(sorted(os.environ)), pid=os.getpid())


def pages(order: Order, progress: ProgressFn) -> Seen:
    for done in range(order.pages + 1):
        progress(done, order.pages)
    return Seen(pid=os.getpid())


def spin(order: Order, progress: ProgressFn) -> Seen:
    """Busy forever, reporting progress: only the CPU limit stops it."""
    progress(0, order.pages)
    last = time.monotonic()
    while True:
        if time.monotonic() - last > 0.5:
            progress(0, order.pages)
            last = time.monotonic()


def grow(order: Order, progress: ProgressFn) -> Seen:
    hoard = []
    while True:
        hoard.append(bytearray(64 << 20))


def silent(order: Order, progress: ProgressFn) -> Seen:
    time.sleep(3600)
    return Seen()


def block(order: Order, progress: ProgressFn) -> Seen:
    """Starts a tool (a grandchild), records both pids, then waits for the test to release it."""
    tool = subprocess.Popen(["sleep", "3600"])
    assert order.pid_file is not None
    Path(order.pid_file).write_text(f"{os.getpid()} {tool.pid}")
    while order.release_file is None or not Path(order.release_file).exists():
        progress(0, 1)
        time.sleep(0.1)
    tool.kill()
    return Seen(pid=os.getpid())


def crash(order: Order, progress: ProgressFn) -> Seen:
    os.kill(os.getpid(), signal.SIGSEGV)
    return Seen()


def recurse(order: Order, progress: ProgressFn) -> Seen:
    def down(depth: int) -> int:
        return down(depth + 1) + 1

    sys.setrecursionlimit(10_000)
    down(0)
    return Seen()


def lie(order: Order, progress: ProgressFn) -> Frozen:
    class Other(Frozen):
        pid: str = "not a number"

    return Other()


ENTRIES = {
    name: Entry(Order, function)
    for name, function in {
        "environment": environment,
        "pages": pages,
        "spin": spin,
        "grow": grow,
        "silent": silent,
        "block": block,
        "crash": crash,
        "recurse": recurse,
        "lie": lie,
    }.items()
}
