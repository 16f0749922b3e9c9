"""A long document's per-page reading, split into page ranges that forked processes read at once.

A check that reads every page with a C library (PDFium) is bound by that library's time per page, one core at a
time. Here each range gets a fork of the calling process, which is a document child already (single-threaded,
its limits inherited: the address space, the process count, and a share of what is left of its CPU time), and
sends back a small JSON answer. A fork that fails says how (a stable failure code, or only the exception's type),
and one killed by a signal (SIGXCPU, SIGSEGV) takes the caller down the same way, so the child's supervisor
judges it as it would have judged the caller reading the pages itself.

Short documents, and a caller that runs threads (where a fork could inherit a lock another thread holds), read
their one range in process.

Work that takes long per page (rendering it: raster mode, the redaction's burn-in) uses `map_pages`: each range
reports its pages as it finishes them, so the caller's page progress (the stage's heartbeats) keeps going.
"""

from __future__ import annotations

import json
import math
import os
import resource
import select
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from docjobs.domain.errors import DocJobError, FailureCode

MIN_PAGES_PER_RANGE = 64  # below this a fork (a few ms) costs more than the pages it takes off the caller
MAX_RANGES = 8

RangeWork = Callable[[range], dict[str, Any]]
PagedWork = Callable[[range, Callable[[], None]], dict[str, Any]]  # also given what to call after each page


def split_pages(count: int, parts: int) -> list[range]:
    """Pages 0..count-1 as at most `parts` contiguous, non-empty ranges whose sizes differ by one at most."""
    parts = max(1, min(parts, count))
    size, longer = divmod(count, parts)
    ranges, start = [], 0
    for part in range(parts):
        end = start + size + (1 if part < longer else 0)
        ranges.append(range(start, end))
        start = end
    return ranges


def may_fork() -> bool:
    """Whether this process may fork work of its own: only when it runs no other thread, since a fork keeps the
    locks another thread holds (a logging stream's, say) with no thread left to release them."""
    return threading.active_count() == 1


def ranges_for(count: int, min_pages: int = MIN_PAGES_PER_RANGE) -> list[range]:
    """How to split `count` pages here: one range per usable core, each of at least `min_pages` pages."""
    if not may_fork():
        return split_pages(count, 1)
    cores = len(os.sched_getaffinity(0))
    return split_pages(count, min(cores, MAX_RANGES, count // min_pages))


@contextmanager
def read_in_parallel(work: RangeWork, ranges: list[range]) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """Start `work` on each range (forked when there are several) and yield the function that waits for their
    answers, in range order. Leaving the block ends and reaps whatever is still running."""
    if len(ranges) == 1:
        yield lambda: [work(ranges[0])]
        return
    forks: list[_Fork] = []
    try:
        forks += (_Fork.start(lambda part, _: work(part), pages, len(ranges)) for pages in ranges)
        yield lambda: [fork.answer() for fork in forks]
    finally:
        for fork in forks:
            fork.end()


def map_pages(work: PagedWork, ranges: list[range], on_page: Callable[[int], None]) -> list[dict[str, Any]]:
    """`work` on each range (forked when there are several), its answers in range order; `on_page(done)` is
    called with the pages done so far, in all ranges, whenever a range reports one."""
    done = 0

    def page_done() -> None:
        nonlocal done
        done += 1
        on_page(done)

    if len(ranges) == 1:
        return [work(ranges[0], page_done)]
    ticks, ticking = os.pipe()
    forks: list[_Fork] = []
    try:
        forks += (_Fork.start(work, pages, len(ranges), ticking) for pages in ranges)
        os.close(ticking)
        ticking = -1
        _gather(forks, ticks, page_done)
        return [fork.answer() for fork in forks]
    finally:
        for fork in forks:
            fork.end()
        for end in (ticks, ticking):
            if end >= 0:
                os.close(end)


def _gather(forks: list[_Fork], ticks: int, page_done: Callable[[], None]) -> None:
    """Read the forks' answers and page ticks as they come, until every fork has closed both (it ended)."""
    open_ends = {fork.reader: fork for fork in forks}
    waiting = [ticks, *open_ends]
    while waiting:
        ready, _, _ = select.select(waiting, [], [])
        for end in ready:
            data = os.read(end, 65536)
            if not data:
                waiting.remove(end)
            elif end == ticks:
                for _ in data:
                    page_done()
            else:
                open_ends[end].sent += data


@dataclass
class _Fork:
    pid: int
    reader: int
    reaped: bool = False
    sent: bytes = b""
    gathered: bool = False  # its answer was read by `_gather`

    @classmethod
    def start(cls, work: PagedWork, pages: range, forks: int, ticks: int = -1) -> _Fork:
        """Fork `work` on `pages`; with a `ticks` pipe, the work is paged: it writes a byte there per page."""
        reader, writer = os.pipe()
        share = _cpu_share(forks)
        pid = os.fork()
        if pid == 0:  # the fork: never returns into the caller's stack
            status = 1
            try:
                os.close(reader)
                if share is not None:
                    resource.setrlimit(resource.RLIMIT_CPU, share)
                answer = _run(work, pages, ticks)
                with os.fdopen(writer, "wb") as channel:
                    channel.write(json.dumps(answer).encode())
                status = 0
            finally:
                os._exit(status)
        os.close(writer)
        return cls(pid, reader, gathered=ticks >= 0)

    def answer(self) -> dict[str, Any]:
        sent = self.sent
        if not self.gathered:
            with os.fdopen(self.reader, "rb", closefd=False) as channel:
                sent = channel.read()
        _, status = os.waitpid(self.pid, 0)
        self.reaped = True
        if os.WIFSIGNALED(status):  # die as the fork died: the supervisor tells CPU exhaustion from a crash
            os.kill(os.getpid(), os.WTERMSIG(status))
            signal.pause()
        return _answer(json.loads(sent) if sent else {"error": "NoAnswer"})

    def end(self) -> None:
        """Kill and reap the fork unless its answer was awaited (the caller failed first); close its pipe."""
        if not self.reaped:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.reaped = True
        os.close(self.reader)


def _cpu_share(forks: int) -> tuple[int, int] | None:
    """Each fork's CPU limit: an equal share of what the caller has left, so together they stay within it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if soft == resource.RLIM_INFINITY:
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    left = max(soft - (usage.ru_utime + usage.ru_stime), 1.0)
    return math.ceil(left / forks), hard


def _run(work: PagedWork, pages: range, ticks: int) -> dict[str, Any]:
    def page_done() -> None:
        if ticks >= 0:
            os.write(ticks, b".")

    try:
        return {"answer": work(pages, page_done)}
    except DocJobError as error:
        return {"failure": error.code, "message": error.message}
    except Exception as error:  # noqa: BLE001 - reported by type only: messages may quote the document
        return {"error": type(error).__name__}


def _answer(message: object) -> dict[str, Any]:
    """A fork's answer, or what it failed with raised here (the fork is as untrusted as the caller: checked)."""
    if not isinstance(message, dict):
        raise RuntimeError("a page range reader answered out of protocol")
    if "failure" in message:
        raise DocJobError(FailureCode(str(message["failure"])), str(message.get("message") or ""))
    if message.get("error") == "MemoryError":
        raise MemoryError
    if message.get("error") == "RecursionError":
        raise RecursionError
    answer = message.get("answer")
    if not isinstance(answer, dict):
        raise RuntimeError(f"a page range reader failed: {message.get('error', 'out of protocol')}")
    return answer
