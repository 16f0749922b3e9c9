"""A batch of many one-page documents: wall time, jobs/s, and the peak memory of the worker and the server.

    .venv/bin/python bench/batch_bench.py [--documents 1000] [--concurrency 4] [--documents-per-run 500]

A throwaway Temporal dev server and one `worker.py` (all queues: general, ocr, batch) on a fresh data dir.
`--documents` distinct one-page PDFs are accepted (hash, store: timed on its own), then submitted as one batch
with the standard policy; the wall time runs from the batch's start to its end. Meanwhile the resident memory of
the worker (its process and its document children) and of the dev server is sampled; their peaks are printed
with the kernel's own high-water mark of each main process. `run_batch_bench` is the same as a function, for a
wider benchmark to call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import dev_server_env, environ

from docjobs.domain.batching import DOCUMENTS_PER_RUN, BatchState
from docjobs.domain.models import JobOverrides
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.batches import BatchClient
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import ensure_dev_server, stop_dev_server
from docjobs.temporal.settings import TemporalSettings
from tests.fixtures.samples import make_sample_pdf

REPO = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024


@dataclass(frozen=True)
class BatchBenchResult:
    documents: int
    concurrency: int
    accept_seconds: float  # hashing and storing every document (before the batch starts)
    wall_seconds: float  # the batch's start to its end
    succeeded: int
    runs: int  # batch workflow runs (continue-as-new)
    worker_peak_mib: float  # worker process and its document children together, sampled
    worker_hwm_mib: float  # the worker process's own high-water mark (VmHWM)
    server_peak_mib: float  # the dev server, sampled
    server_hwm_mib: float

    @property
    def jobs_per_second(self) -> float:
        return self.documents / self.wall_seconds


def status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def tree(pid: int) -> list[int]:
    """The process and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = status_kib(int(entry.name), "PPid")
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


class PeakSampler:
    """Samples the resident memory of process trees every `interval` seconds, keeping the peaks."""

    def __init__(self, pids: dict[str, int], interval: float = 0.5) -> None:
        self.pids = pids
        self.peaks = dict.fromkeys(pids, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._interval = interval

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            for name, pid in self.pids.items():
                rss = sum(status_kib(member, "VmRSS") for member in tree(pid))
                self.peaks[name] = max(self.peaks[name], rss)


def environment(folder: Path) -> dict[str, str]:
    return {**os.environ, **dev_server_env(folder, "docjobs-batch-bench")}


def settings_of(env: dict[str, str]) -> TemporalSettings:
    with environ(env):
        return TemporalSettings.from_env()


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        worker = subprocess.Popen(
            [sys.executable, str(REPO / "worker.py")], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 120
    while b"worker ready" not in log.read_bytes():
        if worker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    return worker


async def submit_and_wait(
    settings: TemporalSettings, paths: list[Path], concurrency: int, documents_per_run: int
) -> tuple[float, float, int, int]:
    batches = BatchClient(JobClient(await connect(settings), settings))
    accepting = time.perf_counter()
    sources = await batches.accept_files(paths, tenant="bench")
    accept_seconds = time.perf_counter() - accepting
    policy = PolicyBook.load(settings.policy_file).get("standard").name
    started = time.perf_counter()
    submitted = await batches.submit(
        sources,
        policy,
        overrides=JobOverrides(),
        tenant="bench",
        concurrency=concurrency,
        documents_per_run=documents_per_run,
    )
    status = await batches.wait(submitted.batch_id, timeout=24 * 3600, interval=1.0)
    wall = time.perf_counter() - started
    if status.state is not BatchState.COMPLETED:
        raise RuntimeError(f"the batch ended {status.state.value}")
    return accept_seconds, wall, status.succeeded, status.runs


def run_batch_bench(documents: int, concurrency: int, documents_per_run: int = DOCUMENTS_PER_RUN) -> BatchBenchResult:
    """One batch of `documents` one-page PDFs on a throwaway dev server and one worker."""
    with tempfile.TemporaryDirectory(prefix="docjobs-batch-bench-") as tmp:
        folder = Path(tmp)
        env = environment(folder)
        settings = settings_of(env)
        server = ensure_dev_server(settings)
        assert server.pid is not None
        paths = []
        for index in range(documents):
            path = folder / "docs" / f"{index:05}.pdf"
            path.parent.mkdir(exist_ok=True)
            make_sample_pdf(path, pages=1, marker=f"batch bench {index}")
            paths.append(path)
        worker = start_worker(env, folder / "worker.log")
        try:
            with PeakSampler({"worker": worker.pid, "server": server.pid}) as sampler:
                accept, wall, succeeded, runs = asyncio.run(
                    submit_and_wait(settings, paths, concurrency, documents_per_run)
                )
                worker_hwm, server_hwm = status_kib(worker.pid, "VmHWM"), status_kib(server.pid, "VmHWM")
        finally:
            worker.terminate()
            worker.wait(timeout=60)
            stop_dev_server(settings)
    return BatchBenchResult(
        documents=documents,
        concurrency=concurrency,
        accept_seconds=accept,
        wall_seconds=wall,
        succeeded=succeeded,
        runs=runs,
        worker_peak_mib=sampler.peaks["worker"] / 1024,
        worker_hwm_mib=worker_hwm / 1024,
        server_peak_mib=sampler.peaks["server"] / 1024,
        server_hwm_mib=server_hwm / 1024,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--documents-per-run", type=int, default=DOCUMENTS_PER_RUN)
    args = parser.parse_args()
    result = run_batch_bench(args.documents, args.concurrency, args.documents_per_run)
    print(
        "| documents | concurrency | accept s | wall s | jobs/s | succeeded | runs | worker peak MiB "
        "(+children) | worker VmHWM MiB | server peak MiB | server VmHWM MiB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {result.documents} | {result.concurrency} | {result.accept_seconds:.1f} | {result.wall_seconds:.1f} | "
        f"{result.jobs_per_second:.2f} | {result.succeeded} | {result.runs} | {result.worker_peak_mib:.0f} | "
        f"{result.worker_hwm_mib:.0f} | {result.server_peak_mib:.0f} | {result.server_hwm_mib:.0f} |"
    )
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
