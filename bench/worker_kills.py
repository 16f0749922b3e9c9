"""Jobs while workers are killed and started again (issue 42, item 3): a worker is useless until it is ready, so
one that is SIGKILLed every few seconds serves only what it can do between its start and its end.

    .venv/bin/python bench/worker_kills.py [--jobs 100] [--minutes 9] [--kill-every 2 5] [--policy preview]

On an embedded dev server in a throwaway data dir, with two real worker processes (`worker.py`) on one queue:
`--jobs` one-page jobs are submitted at once (`--policy`: `preview` rasterizes every page), then every 2 to 5 s
(`--kill-every`, uniform, seeded) one of the two workers, at random, is SIGKILLed like a lost machine and a fresh
one started in its place, until every job has ended or `--minutes` have passed. A stage lost with its worker is
taken over once its lease runs out (DOCJOBS_LEASE_SECONDS, 30 s unless `--lease` says). Prints the jobs by state
(none may still be running unless time ran out), the kills, each fresh worker's time from start to "worker
ready" (its own log line), and the same jobs' time with no kill, side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import dev_server_env, print_table

from docjobs.domain.contract import WORKFLOW_TYPE
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.settings import TemporalSettings
from tests.conftest import Env, WorkerProcess
from tests.fixtures.samples import make_sample_pdf

READY = re.compile(rb"worker ready: .*, in ([\d.]+) s")


def ready_seconds(worker: WorkerProcess) -> float:
    """What the worker's own "worker ready" line says its start took."""
    found = READY.search(worker.log_path.read_bytes())
    assert found is not None, worker.log_path
    return float(found[1])


class Fleet:
    """Two workers on one queue; `kill_one` SIGKILLs one at random and starts a fresh one in its place."""

    def __init__(self, env: Env, queue: str, folder: Path) -> None:
        self._env, self._queue, self._folder = env, queue, folder
        self._started = 0
        self.workers = [self._start(), self._start()]
        self.ready: list[float] = []  # the fresh workers' (after a kill)

    def _start(self) -> WorkerProcess:
        self._started += 1
        return WorkerProcess(self._env, self._queue, self._folder / f"worker-{self._started}.log")

    def kill_one(self, chooser: random.Random) -> None:
        slot = chooser.randrange(len(self.workers))
        self.workers[slot].kill()
        self.workers[slot] = self._start()  # returns once it logged "worker ready"
        self.ready.append(ready_seconds(self.workers[slot]))

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()


async def running(jobs: JobClient) -> int:
    """Jobs still running (a round's: the rounds run one after the other)."""
    query = f"WorkflowType = '{WORKFLOW_TYPE}' AND ExecutionStatus = 'Running'"
    return (await jobs.client.count_workflows(query)).count


async def run_round(
    jobs: JobClient, fleet: Fleet, documents: list[Path], name: str, kill: bool, options: argparse.Namespace
) -> list[object]:
    """Submit every document as a job; SIGKILL a worker every `--kill-every` seconds meanwhile if `kill`."""
    chooser = random.Random(42)
    kills = 0
    started = time.monotonic()
    submitted = [await jobs.submit(path, options.policy, tenant="kills", key=path.stem) for path in documents]
    deadline = started + options.minutes * 60
    next_kill = started + chooser.uniform(*options.kill_every)
    while time.monotonic() < deadline and await running(jobs):
        if kill and time.monotonic() >= next_kill:
            await asyncio.to_thread(fleet.kill_one, chooser)
            kills += 1
            next_kill = time.monotonic() + chooser.uniform(*options.kill_every)
        await asyncio.sleep(0.2)
    took = time.monotonic() - started
    states = Counter([(await jobs.status(job.job_id)).state.value for job in submitted])
    ended = sum(count for state, count in states.items() if state not in ("queued", "processing"))
    return [
        name,
        len(documents),
        states.get("succeeded", 0),
        ", ".join(f"{state} {count}" for state, count in sorted(states.items()) if state != "succeeded") or "-",
        len(documents) - ended,
        f"{took / 60:.1f}",
        f"{states.get('succeeded', 0) / took * 60:.1f}",
        kills,
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--minutes", type=float, default=9.0, help="a round's time limit")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(2.0, 5.0), metavar=("MIN", "MAX"))
    parser.add_argument("--policy", default="preview")
    parser.add_argument("--lease", type=float, help="DOCJOBS_LEASE_SECONDS (default: the deployment's, 30)")
    options = parser.parse_args()
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="docjobs-worker-kills-") as tmp:
        folder = Path(tmp)
        env = Env(dev_server_env(folder, "docjobs-bench-kills"))
        if options.lease:
            env.vars["DOCJOBS_LEASE_SECONDS"] = str(options.lease)
        os.environ.update(env.vars)
        settings = TemporalSettings.from_env()
        jobs = JobClient(await connect(settings), settings)  # starts the dev server
        fleet = Fleet(env, settings.task_queue, folder)
        try:
            low, high = options.kill_every
            for name, stem, kill in (("no kill", "calm", False), (f"a kill every {low:g}-{high:g} s", "kills", True)):
                documents = [folder / f"{stem}-{n}.pdf" for n in range(options.jobs)]
                for n, path in enumerate(documents):
                    make_sample_pdf(path, pages=1, marker=f"{stem} {n}")
                rows.append(await run_round(jobs, fleet, documents, name, kill, options))
        finally:
            fleet.stop()
            stop_dev_server(settings)
    print(f"Jobs ({options.policy}, 1 page) with two workers, {os.cpu_count()} CPUs")
    print()
    header = ["round", "jobs", "succeeded", "other ends", "not ended", "minutes", "succeeded/min", "kills"]
    print_table(header, rows)
    if fleet.ready:
        print()
        ready = fleet.ready
        print(f"fresh workers' start to ready: median {statistics.median(ready):.1f} s, max {max(ready):.1f} s")


if __name__ == "__main__":
    asyncio.run(main())
