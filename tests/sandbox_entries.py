"""Stage doubles served by document children in tests/test_sandbox.py: each behaves as a hostile or broken
document would make a stage behave (spin, grow, fall silent, crash), or reports what the child can see."""

from __future__ import annotations

import fcntl
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from docjobs.domain.base import Frozen
from docjobs.isolation.stage_work import Entry

ProgressFn = Callable[[int, int], None]


class Order(Frozen):
    pages: int = 0
    release_file: str | None = None  # blocks until this file exists
    pid_file: str | None = None  # where to write pids the test wants to find
    tool_cpu_seconds: float = 0.0  # CPU a tool (a grandchild) burns
    io_mb: int = 0  # written to a file by the child, then read back by a tool
    hold_mb: int = 0  # touched in the child's own memory
    lines: tuple[str, ...] = ()  # written as they are on the child's channel (a compromised child's messages)
    unterminated_mb: int = 0  # then as many MiB without an end of line
    fill: str | None = None  # a folder `fill` writes real bytes into, a MiB a file, until a write fails


class Seen(Frozen):
    names: tuple[str, ...] = ()
    pid: int = 0
    parent: int = 0
    group: int = 0
    folder: str = ""
    faults: int = 0  # minor page faults the task took (a copy-on-write copy is one)


_REMEMBERED: list[str] = []  # what earlier tasks of this process left in its memory
# Pages the zygote wrote when it imported this module: shared with every fork until one writes them.
SHARED_PAGES = 256
_SHARED = bytearray(SHARED_PAGES * 4096)
_SHARED[::4096] = b"z" * SHARED_PAGES


def environment(order: Order, progress: ProgressFn) -> Seen:
    return Seen(names=tuple(sorted(os.environ)), pid=os.getpid())


def loaded(order: Order, progress: ProgressFn) -> Seen:
    """Which of PRELOAD_FOR's modules the child has, without importing any: what its zygote imported ahead."""
    asked = sorted(name for names in PRELOAD_FOR.values() for name in names)
    return Seen(names=tuple(name for name in asked if name in sys.modules), pid=os.getpid())


def pages(order: Order, progress: ProgressFn) -> Seen:
    for done in range(order.pages + 1):
        progress(done, order.pages)
    return Seen(pid=os.getpid(), parent=os.getppid(), group=os.getpgrp(), folder=os.getcwd())


def remember(order: Order, progress: ProgressFn) -> Seen:
    """Leaves a mark in its memory and in its working and temporary folders; reports the marks it found there."""
    folders = {Path.cwd(), Path(tempfile.gettempdir())}
    found = [*_REMEMBERED, *(str(mark) for folder in folders for mark in folder.glob("mark-*"))]
    for folder in folders:
        (folder / f"mark-{os.getpid()}").write_text("a tenant's secret")
    _REMEMBERED.append(f"pid {os.getpid()}")
    return Seen(names=tuple(found), pid=os.getpid(), folder=os.getcwd())


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
        progress(0, 1)  # growing, not stalled: on a loaded machine 512 MiB took longer than the pool's 3-s watch


def silent(order: Order, progress: ProgressFn) -> Seen:
    time.sleep(3600)
    return Seen()


def block(order: Order, progress: ProgressFn) -> Seen:
    """Starts a tool (a grandchild), records its own pid, the tool's and its parent's (the zygote), then waits
    for the test to release it."""
    tool = subprocess.Popen(["sleep", "3600"])
    assert order.pid_file is not None
    Path(order.pid_file).write_text(f"{os.getpid()} {tool.pid} {os.getppid()}")
    while order.release_file is None or not Path(order.release_file).exists():
        progress(0, 1)
        time.sleep(0.1)
    tool.kill()
    return Seen(pid=os.getpid())


def costly(order: Order, progress: ProgressFn) -> Seen:
    """Costs what the order says: memory in the child, bytes written by the child and read by a tool, CPU in a tool."""
    hoard = bytearray(order.hold_mb << 20)
    hoard[::4096] = b"x" * len(hoard[::4096])  # touched, so resident
    progress(0, 1)  # each step reports: on a busy machine, touching 200 MB took longer than the pool's 3-s stall
    data = Path("costly.bin")
    data.write_bytes(b"\0" * (order.io_mb << 20))
    progress(0, 1)
    _run_tool(["cat", str(data)], progress)
    spin = "import sys, time\nwhile time.process_time() < float(sys.argv[1]): pass"  # its own CPU, not wall time
    _run_tool([sys.executable, "-c", spin, str(order.tool_cpu_seconds)], progress)
    return Seen(pid=os.getpid())


def fill(order: Order, progress: ProgressFn) -> Seen:
    """Writes real bytes (no hole) into `order.fill` until the disk says no: the error ends the task, as a tool's
    would."""
    assert order.fill is not None
    for number in range(1_000_000):
        (Path(order.fill) / f"fill-{number}").write_bytes(os.urandom(1 << 20))
        progress(0, 1)
    return Seen(pid=os.getpid())


def _run_tool(command: list[str], progress: ProgressFn) -> None:
    """Run a tool to its end, reporting progress meanwhile (a busy machine must not look like a stall)."""
    tool = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    while tool.poll() is None:
        progress(0, 1)
        time.sleep(0.1)
    assert tool.returncode == 0


def crash(order: Order, progress: ProgressFn) -> Seen:
    os.kill(os.getpid(), signal.SIGSEGV)
    return Seen()


def recurse(order: Order, progress: ProgressFn) -> Seen:
    def down(depth: int) -> int:
        return down(depth + 1) + 1

    sys.setrecursionlimit(10_000)
    down(0)
    return Seen()


def forge(order: Order, progress: ProgressFn) -> Seen:
    """Writes the order's lines on its channel as a document that took the child over could, then ends the child."""
    [channel] = [
        fd
        for fd in map(int, os.listdir("/proc/self/fd"))
        if fd > 2
        and os.path.exists(f"/proc/self/fd/{fd}")
        and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
    ]
    data = b"".join(line.encode() + b"\n" for line in order.lines) + b"x" * (order.unterminated_mb << 20)
    view = memoryview(data)
    while view:
        view = view[os.write(channel, view) :]
    os._exit(0)


def write_shared(order: Order, progress: ProgressFn) -> Seen:
    """Writes each of the zygote's shared pages once: a copy-on-write fault each, unless they were copied ahead."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for page in range(SHARED_PAGES):
        _SHARED[page * 4096] = 1
    return Seen(pid=os.getpid(), faults=resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)


def lie(order: Order, progress: ProgressFn) -> Frozen:
    class Other(Frozen):
        pid: str = "not a number"

    return Other()


# As the stage work's (docjobs/isolation/stage_work.py): modules a zygote imports ahead for the stages of one queue;
# two the stage work itself never imports.
PRELOAD_FOR = {"one": ("tabnanny",), "other": ("pickletools",)}
ENTRIES = {
    name: Entry(name, Order, Frozen, function)
    for name, function in {
        "environment": environment,
        "loaded": loaded,
        "pages": pages,
        "remember": remember,
        "spin": spin,
        "grow": grow,
        "silent": silent,
        "block": block,
        "crash": crash,
        "costly": costly,
        "fill": fill,
        "recurse": recurse,
        "lie": lie,
        "forge": forge,
        "write_shared": write_shared,
    }.items()
}
