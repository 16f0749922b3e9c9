"""The document child: `python -P -m docjobs.sandbox_child`, started by `docjobs.sandbox.ChildPool`.

It imports only the standard library until it has limited itself, then serves tasks read as JSON lines on
stdin, one at a time, answering on the channel its parent gave it (`docjobs.sandbox` has the protocol and why).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import resource
import signal
import sys
from typing import Any

MEMORY_ENV = "DOCJOBS_CHILD_MEMORY_MB"
PARENT_ENV = "DOCJOBS_CHILD_PARENT_PID"
CHANNEL_ENV = "DOCJOBS_CHILD_CHANNEL_FD"
ENTRIES_ENV = "DOCJOBS_CHILD_ENTRIES"
PR_SET_PDEATHSIG = 1
NICENESS = 10
# Written when memory has run out: prepared beforehand, since building it then may fail too.
_OUT_OF_MEMORY = b""


def _send(channel: int, message: dict[str, Any]) -> None:
    _write(channel, json.dumps(message, separators=(",", ":")).encode() + b"\n")


def _write(channel: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(channel, view) :]


def _limit_self(memory_mb: int, parent: int) -> None:
    os.nice(NICENESS)  # tenants' documents yield the CPU to the API, Temporal and the workers' own threads
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a core file would hold the document
    # When the worker dies, the kernel signals this child, which takes its whole group with it (the tools it
    # runs: qpdf, poppler, Ghostscript). A child busy in C code hears it once that call returns; its CPU
    # limit bounds that.
    signal.signal(signal.SIGTERM, _end_group)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the worker died before the line above took effect
        _end_group(signal.SIGTERM, None)


def _end_group(signum: int, frame: object) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_with_tools() -> float:
    """CPU seconds of this child and of every tool it ran and reaped (user + system)."""
    tools = resource.getrusage(resource.RUSAGE_CHILDREN)
    return _cpu_used() + tools.ru_utime + tools.ru_stime


def _io_bytes() -> tuple[int, int]:
    """Bytes read and written by read/write system calls, this child's and its reaped tools' (rchar, wchar)."""
    counters = {}
    try:
        with open("/proc/self/io") as io:
            for line in io:
                name, _, value = line.partition(":")
                counters[name] = int(value)
    except (OSError, ValueError):
        return 0, 0
    return counters.get("rchar", 0), counters.get("wchar", 0)


def _peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


class _TaskUsage:
    """What one task costs, measured by the child itself: it is reused, so the kernel's account of it (the parent's
    wait4) covers all its tasks together. The peak memory is reset per task (`clear_refs` 5); a tool's peak counts
    when it is the largest the child ever ran (the kernel keeps only that maximum)."""

    def __init__(self) -> None:
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        self._cpu = _cpu_with_tools()
        self._io = _io_bytes()
        self._tools_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss

    def report(self) -> dict[str, float | int]:
        read, written = _io_bytes()
        tools_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        peak = max(_peak_rss_mb(), tools_peak / 1024 if tools_peak > self._tools_peak else 0.0)
        return {
            "cpu_seconds": round(max(_cpu_with_tools() - self._cpu, 0.0), 6),
            "peak_memory_mb": round(peak, 3),
            "bytes_read": max(read - self._io[0], 0),
            "bytes_written": max(written - self._io[1], 0),
        }


def _limit_cpu(seconds: float) -> None:
    """Soft limit only: SIGXCPU ends the child there. The hard limit stays where it is, so that the next task
    of this child can be given its own budget (an unprivileged process cannot raise a hard limit)."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(seconds) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def _serve_task(channel: int, task: dict[str, Any], entries: dict[str, Any]) -> bool:
    """Run one task and answer it; False when this child must not take another one."""
    from docjobs.errors import DocJobError  # light, and already imported with the entries

    usage = _TaskUsage()
    start = _cpu_used()
    budget = task.get("cpu") or {}
    base, per_page = float(budget.get("base_seconds", 60.0)), float(budget.get("per_page_seconds", 0.0))
    _limit_cpu(start + base)
    grown = False

    def progress(done: int, total: int) -> None:
        nonlocal grown
        if not grown:  # the page count is known now: the budget grows with it, once
            _limit_cpu(start + base + per_page * total)
            grown = True
        _send(channel, {"kind": "progress", "done": done, "total": total})

    try:
        entry = entries[task["entry"]]
        work = entry.work_type.model_validate(task["work"])
        result = entry.run(work, progress)
        _send(channel, {"kind": "result", "value": result.model_dump(mode="json"), "usage": usage.report()})
        return True
    except DocJobError as error:
        _send(channel, {"kind": "failure", "code": error.code, "message": error.message, "usage": usage.report()})
    except MemoryError:
        _write(channel, _OUT_OF_MEMORY)
    except RecursionError:
        message = "the document's structure is nested too deeply"
        _send(channel, {"kind": "failure", "code": "input.too_complex", "message": message, "usage": usage.report()})
    except Exception as error:  # noqa: BLE001 - reported by type only: messages may quote the document
        _send(channel, {"kind": "crash", "error": type(error).__name__, "usage": usage.report()})
    return False


def main() -> None:
    global _OUT_OF_MEMORY
    memory_mb = int(os.environ[MEMORY_ENV])
    _limit_self(memory_mb, int(os.environ[PARENT_ENV]))
    channel = int(os.environ[CHANNEL_ENV])
    message = f"the document needs more than the {memory_mb} MiB of memory a stage may use"
    _OUT_OF_MEMORY = json.dumps({"kind": "failure", "code": "input.too_complex", "message": message}).encode() + b"\n"
    entries: dict[str, Any] = importlib.import_module(os.environ[ENTRIES_ENV]).ENTRIES  # the heavy imports, once
    _send(channel, {"kind": "ready", "cpu": _cpu_with_tools()})  # where the first task's account starts
    for line in sys.stdin.buffer:
        if not _serve_task(channel, json.loads(line), entries):
            break  # after any failure the child is not reused: it ends, and the pool starts a fresh one


if __name__ == "__main__":
    main()
