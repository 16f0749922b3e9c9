"""Where a worker's CPU goes per job (issue 42, item 1): py-spy samples a real `worker.py` while it runs 1-page jobs.

    .venv/bin/python bench/worker_profile.py [--jobs 40] [--clients 4] [--policy standard] [--rate 250]

On an embedded dev server in a throwaway data dir with one worker process: a few jobs first (the tenant's sandboxes
made), then `--jobs` 1-page jobs by `--clients` concurrent submitters, each waiting for its job's result, while
`py-spy record --gil` samples the worker (only the thread holding the GIL: the Python CPU). Prints the worker's,
its document children's and the dev server's CPU seconds per job (from /proc), and the worker's split by what
its Python was doing, each stack put in the first group whose files it passes through, leaf first (so a pydantic
call made by the payload converter counts as payload conversion). What the worker used outside Python (the SDK's
core, in Rust) is its CPU less the sampled seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import cpu_seconds, descendants, dev_server_env, print_table

from docjobs.domain.stage_cost import JobCost
from docjobs.domain.states import JobState
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.settings import TemporalSettings
from tests.conftest import Env, WorkerProcess
from tests.fixtures.samples import make_sample_pdf

# (group, the path fragments that put a stack in it): the first group matched from the leaf frame outwards.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("codec (encryption of payloads)", ("docjobs/temporal/codec.py",)),
    ("payload conversion (pydantic, JSON)", ("temporalio/converter.py", "temporalio/contrib/pydantic")),
    ("workflow code (the sandbox, replays)", ("temporalio/worker/workflow_sandbox", "temporalio/worker/_workflow")),
    ("signing (pyHanko, cryptography)", ("pyhanko", "cryptography", "asn1crypto", "docjobs/signing")),
    ("child round trips (pool, protocol)", ("docjobs/isolation",)),
    ("release gate and verify (worker side)", ("docjobs/pdf", "activities/release.py")),
    ("blob store I/O and hashing", ("docjobs/store",)),
    ("search attributes, status, metrics", ("activities/metrics.py", "docjobs/temporal/job_gauges.py")),
    ("other docjobs (activities, domain)", ("activities/", "docjobs/")),
    ("SDK activity and worker plumbing", ("temporalio/",)),
    ("asyncio and threads", ("asyncio/", "concurrent/futures", "threading.py")),
)


def group_of(stack: str) -> str:
    frames = stack.split(";")
    for frame in reversed(frames):  # the leaf is last
        for name, fragments in GROUPS:
            if any(fragment in frame for fragment in fragments):
                return name
    return "other"


def read_profile(path: Path) -> Counter[str]:
    """py-spy's raw output (one collapsed stack a line, then its sample count), by group."""
    groups: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            groups[group_of(stack)] += int(count)
    return groups


def tree_cpu(pid: int) -> float:
    return sum(cpu_seconds(child) for child in descendants(pid))


async def run_jobs(jobs: JobClient, documents: list[Path], policy: str, clients: int) -> JobCost:
    """Every document as a job, `clients` at once; what their stages cost, added up (the jobs' own `cost`)."""
    queue = list(documents)
    costs: list[JobCost] = []

    async def client() -> None:
        while queue:
            path = queue.pop()
            submitted = await jobs.submit(path, policy, tenant="profile", key=path.stem)
            status = await jobs.handle(submitted.job_id).result()
            if status.state is not JobState.SUCCEEDED:
                raise RuntimeError(f"a profiled job ended {status.state.value} ({status.failure_code})")
            costs.append(status.cost)

    await asyncio.gather(*(client() for _ in range(clients)))
    total = JobCost()
    for cost in costs:
        for stage, spent in cost.stages.items():
            total = total.adding(stage, spent)
    return total


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--policy", default="standard")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples a second")
    parser.add_argument("--keep", type=Path, help="copy py-spy's raw profile (collapsed stacks) here")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="docjobs-worker-profile-") as tmp:
        folder = Path(tmp)
        env = Env(dev_server_env(folder, "docjobs-bench-profile"))
        os.environ.update(env.vars)
        settings = TemporalSettings.from_env()
        jobs = JobClient(await connect(settings), settings)  # starts the dev server
        server = int((settings.data_dir / "temporal.pid").read_text())
        worker = WorkerProcess(env, settings.task_queue, folder / "worker.log")
        try:
            documents = []
            for n in range(options.jobs + options.clients):
                make_sample_pdf(path := folder / f"doc-{n}.pdf", pages=1, marker=f"profiled {n}")
                documents.append(path)
            await run_jobs(jobs, documents[: options.clients], options.policy, options.clients)  # warm
            pid = worker.process.pid
            before = (cpu_seconds(pid, with_reaped=False), tree_cpu(pid), cpu_seconds(server))
            spy = subprocess.Popen(
                [
                    *(str(Path(sys.executable).with_name("py-spy")), "record", "--gil", "--nonblocking"),
                    *("--rate", str(options.rate), "--format", "raw", "--pid", str(pid)),
                    *("--output", str(folder / "profile.txt")),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(1)  # py-spy attached
            started = time.perf_counter()
            spent = await run_jobs(jobs, documents[options.clients :], options.policy, options.clients)
            took = time.perf_counter() - started
            after = (cpu_seconds(pid, with_reaped=False), tree_cpu(pid), cpu_seconds(server))
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        finally:
            worker.stop()
            stop_dev_server(settings)
        groups = read_profile(folder / "profile.txt")
        if options.keep:
            shutil.copyfile(folder / "profile.txt", options.keep)
    per_job = [(end - start) / options.jobs * 1000 for start, end in zip(before, after, strict=True)]
    sampled = sum(groups.values()) / options.rate / options.jobs * 1000  # ms of the GIL a job
    print(
        f"{options.jobs} 1-page jobs ({options.policy}), {options.clients} at once, one worker, {os.cpu_count()} CPUs"
    )
    print(f"{options.jobs / took:.2f} jobs/s")
    print()
    print_table(
        ["CPU ms a job", "worker", "its children (with their tools)", "dev server"],
        [["", *(f"{value:.0f}" for value in per_job)]],
    )
    print()
    rows = [[name, f"{count / options.rate / options.jobs * 1000:.1f}"] for name, count in groups.most_common()]
    rows.append(["outside Python (the SDK core, Rust), worker CPU less the sampled", f"{per_job[0] - sampled:.1f}"])
    print_table(["the worker's CPU ms a job, by what it was doing", "ms"], rows)
    print()
    stages = [
        [stage, f"{cost.cpu_seconds / options.jobs * 1000:.0f}", f"{cost.wall_seconds / options.jobs * 1000:.0f}"]
        for stage, cost in sorted(spent.stages.items(), key=lambda item: -item[1].cpu_seconds)
    ]
    print_table(["stage (its child and tools, its blob I/O: the jobs' own cost)", "CPU ms a job", "wall ms"], stages)


if __name__ == "__main__":
    asyncio.run(main())
