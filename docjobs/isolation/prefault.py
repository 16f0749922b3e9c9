"""Copy-on-write faults moved off a task's path: a spare child copies, while it waits, the pages of the zygote that
tasks were seen to write.

A confined child is a fresh fork for every task (docjobs/isolation/child_pool.py). Python writes every object it touches
(its reference count), so a task's first writes to the zygote's pages fault, and each fault copies a page: about
5,300 faults and 35 ms of CPU for a 1-page job's three stages, on the job's path (bench/README.md, "What the tenant
boundary costs"). Copying every private page of the zygote in the spare costs more than it saves (86 MB); copying
the ones tasks write does not.

How the pages are learned: after its task, a child that the zygote asked to (its first LEARN_REPORTS forks) lists the
pages of the zygote's private writable mappings that it now maps alone (/proc/self/pagemap's present and exclusive
bits: a page the child wrote, or first touched), and writes their addresses in its private folder. The zygote reads
them when it reaps the child. A report is a child's claim: only page-aligned addresses inside the zygote's own
mappings are kept, and never more than MAX_PAGES. At worst a lying child makes its own tenant's later spares copy
pages they did not need (a spare's memory limit still holds): the pool serves one tenant.

Standard library only: the zygote imports this before the stage work.
"""

from __future__ import annotations

import array
import bisect
import contextlib
import ctypes
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
MADV_POPULATE_WRITE = 23  # Linux 5.14: fault the range in writable, as a write to each page would
LEARN_REPORTS = 16  # forks of a zygote asked to report: enough for each stage to be seen a few times
MAX_PAGES = 1 << 14  # 64 MiB of 4 KiB pages: what a spare may copy ahead, and the most a report is read for
REPORT = "touched-pages"  # in a child's private folder
_PRESENT, _EXCLUSIVE = 1 << 63, 1 << 56  # pagemap bits (Documentation/admin-guide/mm/pagemap.rst)

Ranges = Sequence[tuple[int, int]]  # [start, end) addresses


def private_writable() -> list[tuple[int, int]]:
    """This process's private writable mappings ([start, end) addresses, from /proc/self/maps)."""
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, perms = line.split(maxsplit=2)[:2]
            if perms.startswith("rw") and perms[3] == "p":
                start, end = span.split("-")
                ranges.append((int(start, 16), int(end, 16)))
    return ranges


def touched_pages(ranges: Ranges) -> list[int]:
    """The addresses of the pages in `ranges` that this process maps alone (present and exclusive)."""
    pages: list[int] = []
    with open("/proc/self/pagemap", "rb") as pagemap:
        for start, end in ranges:
            pagemap.seek(start // PAGE * 8)
            entries = array.array("Q")
            entries.frombytes(pagemap.read((end - start) // PAGE * 8))
            mine = (index for index, entry in enumerate(entries) if entry & _PRESENT and entry & _EXCLUSIVE)
            pages.extend(start + index * PAGE for index in mine)
            if len(pages) >= MAX_PAGES:
                return pages[:MAX_PAGES]
    return pages


def write_report(folder: Path, ranges: Ranges) -> None:
    """After a task: the pages of `ranges` (the zygote's mappings) this child wrote, for its zygote to read."""
    with contextlib.suppress(OSError), (folder / REPORT).open("wb") as report:
        array.array("Q", touched_pages(ranges)).tofile(report)


def read_report(folder: Path, ranges: Ranges) -> set[int]:
    """A reaped child's report: the page-aligned addresses in it that lie inside `ranges` (sorted, not overlapping).
    Read as the worker reads what a child leaves: a regular file, no symlink followed, nothing waited for (a FIFO
    would hold the zygote)."""
    try:
        descriptor = os.open(folder / REPORT, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return set()
    with os.fdopen(descriptor, "rb") as report:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return set()
        data = report.read(MAX_PAGES * 8)
    claimed = array.array("Q")
    claimed.frombytes(data[: len(data) // 8 * 8])
    starts = [start for start, _ in ranges]
    kept = set()
    for page in claimed:
        index = bisect.bisect_right(starts, page) - 1
        if page % PAGE == 0 and index >= 0 and page < ranges[index][1]:
            kept.add(page)
    return kept


def runs(pages: Iterable[int]) -> list[tuple[int, int]]:
    """`pages` as runs of adjacent pages: (start, length in bytes), in address order."""
    found: list[tuple[int, int]] = []
    for page in sorted(pages):
        if found and found[-1][0] + found[-1][1] == page:
            found[-1] = (found[-1][0], found[-1][1] + PAGE)
        else:
            found.append((page, PAGE))
    return found


def populate(page_runs: Iterable[tuple[int, int]]) -> None:
    """Copy the pages of `page_runs` into this process now (a write fault each, taken ahead). A page that is gone, or
    a kernel without MADV_POPULATE_WRITE, is skipped: this only saves time."""
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for start, length in page_runs:
        madvise(start, length, MADV_POPULATE_WRITE)
