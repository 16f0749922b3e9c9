"""What the benchmarks share: a median timer, a 100 KB upload, a throwaway dev server's environment, and the
Markdown table they print.

A script runs as `python bench/NAME.py`, so this folder is first on its path: it imports this as `harness`.
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pikepdf

from docjobs.settings.config import SHIPPED_POLICIES
from tests.fixtures.samples import make_sample_pdf


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def print_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """A Markdown table, as bench/README.md keeps them: `header`, then a line a row (cells as they print)."""
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields_ = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields_[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pid: int, *, with_reaped: bool = True) -> float:
    """User + system CPU of `pid` (and of its reaped children: tool subprocesses end up there)."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(stat[11]) + int(stat[12]) + ((int(stat[13]) + int(stat[14])) if with_reaped else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU seconds of this process's children that have ended and been waited for (running ones: not yet)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _status_mib(pid: int | None, field: str) -> float:
    """`field` of process `pid`'s /proc status (a size in kB), in MiB; 0 once it is gone."""
    try:
        for line in (Path("/proc") / str(pid) / "status").read_text().splitlines() if pid else ():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def peak_rss_mib(pid: int) -> float:
    """The peak resident memory of process `pid` so far (its VmHWM), in MiB; 0 once it is gone."""
    return _status_mib(pid, "VmHWM")


def rss_mib(pid: int | None) -> float:
    """The resident memory of process `pid` now (its VmRSS), in MiB; 0 once it is gone."""
    return _status_mib(pid, "VmRSS")


def median_ms(runs: int, action: Callable[[], object]) -> float:
    """Median milliseconds of `runs` calls, after one warm-up call."""
    action()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def hundred_kb_pdf(path: Path, marker: str) -> bytes:
    """A 4-page PDF padded with random bytes to about 100 KiB (so no two runs upload the same document)."""
    make_sample_pdf(path, pages=4, marker=marker)
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        pdf.Root.BenchPadding = pdf.make_stream(os.urandom(100 * 1024 - path.stat().st_size))
        pdf.save(path)
    return path.read_bytes()


def dev_server_env(folder: Path, task_queue: str | None = None) -> dict[str, str]:
    """The DOCJOBS_* variables of an embedded dev server of the benchmark's own: its data under `folder`, free
    ports, a policy file of its own (the shipped policies, and those it names: tests/fixtures/policy_files.py) and,
    when named, a task queue no other worker polls."""
    policy_file = folder / "policies.toml"
    if not policy_file.exists():
        shutil.copyfile(SHIPPED_POLICIES, policy_file)
    env = {
        "DOCJOBS_DATA_DIR": str(folder / "data"),
        "DOCJOBS_POLICY_FILE": str(policy_file),
        "DOCJOBS_TEMPORAL_PORT": str(free_port()),
        "DOCJOBS_TEMPORAL_UI_PORT": str(free_port()),
    }
    if task_queue is not None:
        env["DOCJOBS_TASK_QUEUE"] = task_queue
    return env


@contextmanager
def environ(env: Mapping[str, str]) -> Iterator[None]:
    """`os.environ` updated with `env` inside the block, and as it was again after it."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def wait_for(predicate: Callable[[], bool], process: subprocess.Popen[bytes], what: str) -> None:
    """Until `predicate` holds; RuntimeError when `process` ends first or 90 s pass."""
    deadline = time.monotonic() + 90
    while not predicate():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.1)


def api_answers(base: str) -> bool:
    """The HTTP API at `base` answers (its OpenAPI document)."""
    try:
        httpx.get(f"{base}/openapi.json")
    except httpx.TransportError:
        return False
    return True
