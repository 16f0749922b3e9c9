"""A long scan through docjobs' OCR in page ranges: speed against plain OCRmyPDF, a worker killed at 60%, history.

    .venv/bin/python bench/long_scan.py [--pages 200] [--dpi 200] [--chunk-pages 16] [--parts speed,fairness,kill]

On an embedded dev server in a throwaway data dir, with one real worker process (`worker.py`, killed with
SIGKILL like a lost machine):

1. plain `ocrmypdf --jobs 2` with docjobs' options for the `scan` policy, on the scan;
2. the same scan as a docjobs job (OCR only: the `scan` policy without the signature), uninterrupted: its time
   from acceptance to `succeeded`, its CPU seconds (the job's `cost`, by stage) against plain OCRmyPDF's (with its
   tools), which a busy or slow machine moves less than the seconds, where its seconds went (from its history:
   before the first range started, while ranges ran, after the last ended) and its history events per page;
3. the same job again, its worker SIGKILLed once 60% of the pages are OCR'd and a fresh worker started: the
   pages the running chunks had done at the kill, the pages of the chunks that ran twice, the pages their next
   attempts took from the lost attempts' checkpoints, and so the pages read again (done, not resumed), the time;
4. fairness: a 1-page scan as a job (the same policy) on the idle worker, then again while the long scan's
   chunks run (the long job cancelled after): each FAIR_RUNS times one after the other, the median of its time
   from acceptance to `succeeded`;
5. `single` (or `--single`): the job with one chunk as large as the document (today's single `ocr` activity), for
   its time and history events per page;
6. `pinned`: the job with one worker pinned to CPU 0 (`taskset -c 0`), then with two workers pinned to CPUs 0
   and 1: the single-machine picture of a cluster's OCR workers, each with a core of its own;
7. `memory`: the job alone (for a 1,000-page scan, without the plain run): its time, history events per page,
   the worker's peak memory and the largest peak of a document child with its tools.
`--parts` picks them (default: 1-4 as speed, fairness, kill). Prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import children_cpu_seconds, dev_server_env, peak_rss_mib, print_table

from docjobs.domain.job_status import JobStatus
from docjobs.domain.policy import Policy
from docjobs.domain.states import JobState, Stage
from docjobs.pdf.ocr import ocrmypdf_args
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.poller import WaitEnd, wait_for_job
from docjobs.temporal.settings import TemporalSettings
from tests.conftest import Env, WorkerProcess
from tests.fixtures.policy_files import named
from tests.fixtures.scans import make_scan_pdf, scan_words
from tests.test_ocr_page_range_jobs import range_attempts, range_results

KILL_AT = 0.6
FAIR_RUNS = 3


def plain_ocrmypdf(scan: Path, out: Path, args: list[str]) -> tuple[float, float]:
    """(seconds, CPU seconds of OCRmyPDF and its tools) of one plain run."""
    started, cpu = time.perf_counter(), children_cpu_seconds()  # the worker and the dev server run on: not counted
    subprocess.run([sys.executable, "-m", "ocrmypdf", *args, str(scan), str(out)], check=True, capture_output=True)
    return time.perf_counter() - started, children_cpu_seconds() - cpu


def cpu_by_stage(status: JobStatus) -> str:
    """The job's CPU seconds per stage, with its attempts (each range's, retries included), as `render 4.8 (1), ...`."""
    return ", ".join(f"{stage} {cost.cpu_seconds:.1f} ({cost.attempts})" for stage, cost in status.cost.stages.items())


def job_seconds(status: JobStatus) -> float:
    return (status.transitions[-1].at - status.transitions[0].at).total_seconds()


async def range_phases(client: Client, job_id: str) -> tuple[float, float, float]:
    """Seconds of the job's history before its first range started, from then until its last range ended, and
    after (the merge, the gates, publishing)."""
    events = (await client.get_workflow_handle(job_id).fetch_history()).events
    ranges = {
        event.event_id
        for event in events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == "ocr_chunk"
    }
    starts = [
        event.event_time.ToDatetime()
        for event in events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and event.activity_task_started_event_attributes.scheduled_event_id in ranges
    ]
    ends = [
        event.event_time.ToDatetime()
        for event in events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and event.activity_task_completed_event_attributes.scheduled_event_id in ranges
    ]
    first, last = events[0].event_time.ToDatetime(), events[-1].event_time.ToDatetime()
    return (
        (min(starts) - first).total_seconds(),
        (max(ends) - min(starts)).total_seconds(),
        (last - max(ends)).total_seconds(),
    )


async def finished(jobs: JobClient, job_id: str) -> JobStatus:
    result = await wait_for_job(lambda: jobs.status(job_id), timeout=7200, max_polls=100_000, max_delay=1.0)
    if result.end is not WaitEnd.TERMINAL or result.status is None or result.status.state is not JobState.SUCCEEDED:
        raise SystemExit(f"the job did not succeed: {result.status}")
    return result.status


async def succeeded(jobs: JobClient, scan: Path, policy: Policy, key: str) -> JobStatus:
    """`scan` submitted as the bench tenant's job `key`, and its status once it succeeded."""
    return await finished(jobs, (await jobs.submit(scan, named(jobs, policy), tenant="bench", key=key)).job_id)


async def events_of(jobs: JobClient, job_id: str) -> int:
    return len((await jobs.client.get_workflow_handle(job_id).fetch_history()).events)


async def killed_run(
    jobs: JobClient, scan: Path, policy: Policy, start: Callable[[], WorkerProcess], worker: WorkerProcess
) -> tuple[JobStatus, int, int, int, WorkerProcess]:
    """The job with its worker SIGKILLed at KILL_AT of the pages; (status, pages the running chunks had done at
    the kill, pages done at the kill, pages of the chunks that ran again, the new worker)."""
    job_id = (await jobs.submit(scan, named(jobs, policy), tenant="bench", key="killed")).job_id
    while True:
        status = await jobs.status(job_id)
        chunks, progress = status.ocr_chunks, status.progress or {}
        done = int(progress.get("pages_done") or 0) if progress.get("stage") == "ocr" else 0
        if chunks is not None and done >= KILL_AT * chunks.pages_total:
            break
        await asyncio.sleep(0.2)
    worker.kill()
    in_flight = done - chunks.pages_done
    fresh = start()
    status = await finished(jobs, job_id)
    attempts = await range_attempts(jobs.client, job_id)
    again = sum(_pages(name) for name, tries in attempts.items() if max(tries) > 1)
    return status, in_flight, done, again, fresh


async def short_jobs(jobs: JobClient, scan: Path, policy: Policy, key: str) -> float:
    """The median seconds (accepted to succeeded) of FAIR_RUNS jobs of `scan`, one after the other."""
    seconds = []
    for run in range(FAIR_RUNS):
        seconds.append(job_seconds(await succeeded(jobs, scan, policy, f"{key}-{run}")))
    return statistics.median(seconds)


async def fairness(jobs: JobClient, scan: Path, one_page: Path, policy: Policy) -> tuple[float, float, bool]:
    """(a 1-page job's median seconds on the idle worker, the same while the long scan's chunks run, whether the
    long scan was still in its OCR stage when the last of them ended). The long job is cancelled after."""
    idle = await short_jobs(jobs, one_page, policy, "fair-idle")
    long_id = (await jobs.submit(scan, named(jobs, policy), tenant="bench", key="fair-long")).job_id
    while (status := await jobs.status(long_id)).ocr_chunks is None or (status.progress or {}).get("stage") != "ocr":
        if status.state is not JobState.QUEUED and status.state is not JobState.PROCESSING:
            raise SystemExit(f"the long scan ended before its OCR: {status}")
        await asyncio.sleep(0.2)
    busy = await short_jobs(jobs, one_page, policy, "fair-busy")
    still_ocr = (await jobs.status(long_id)).stage is Stage.OCR
    await jobs.cancel_running(long_id)
    await wait_for_job(lambda: jobs.status(long_id), timeout=600, max_polls=100_000, max_delay=1.0)
    return idle, busy, still_ocr


def _pages(name: str) -> int:
    first, _, last = name.partition("-")
    return int(last) - int(first) + 1


async def pinned(jobs: JobClient, scan: Path, policy: Policy, start: Callable[[str], WorkerProcess]) -> list[float]:
    """The long scan's seconds (accepted to succeeded) with one worker pinned to CPU 0, then with two workers, pinned
    to CPU 0 and CPU 1: the single-machine picture of a cluster's OCR workers, each with its own core."""
    seconds = []
    for key, cpus in (("pinned-one", ["0"]), ("pinned-two", ["0", "1"])):
        workers = [start(cpu) for cpu in cpus]
        try:
            status = await succeeded(jobs, scan, policy, key)
            seconds.append(job_seconds(status))
        finally:
            for worker in workers:
                worker.stop()
    return seconds


PARTS = ("speed", "fairness", "kill", "pinned", "single", "memory")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--dpi", type=int, default=200)
    parser.add_argument("--chunk-pages", type=int, default=16)
    parser.add_argument("--max-parallel", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1, help="speed: plain and docjobs runs, in turn (default 1)")
    parser.add_argument(
        "--parts",
        default="speed,fairness,kill",
        help=f"which measures, comma-separated, of {','.join(PARTS)} (default: speed,fairness,kill)",
    )
    parser.add_argument("--single", action="store_true", help="also run the job as one chunk (today's ocr activity)")
    options = parser.parse_args()
    parts = set(options.parts.split(",")) | ({"single"} if options.single else set())
    if unknown := parts - set(PARTS):
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")

    with tempfile.TemporaryDirectory(prefix="docjobs-bench-") as tmp:
        folder = Path(tmp)
        env = Env(dev_server_env(folder, "docjobs-bench-long"))
        os.environ.update(env.vars)
        settings = TemporalSettings.from_env()
        scan = folder / "scan.pdf"
        make_scan_pdf(scan, scan_words(options.pages, per_page=30), dpi=options.dpi)
        one_page = folder / "one-page.pdf"
        make_scan_pdf(one_page, scan_words(1, per_page=30), dpi=options.dpi)
        body = PolicyBook.load(settings.policy_file).get("scan").model_dump()
        body["sign"]["enabled"] = False  # OCR only (the verify gate still runs)
        body["ocr"].update(chunk_pages=options.chunk_pages, max_parallel=options.max_parallel)
        # A scan longer than the policy allows (the `scan` policy's 500 pages, 30 minutes, 2 GiB of decoded images: a
        # 200 dpi page decodes to about 3.7 MB) gets room for its length.
        body.update(max_pages=max(body["max_pages"], options.pages), deadline_seconds=max(1800, 6 * options.pages))
        body["limits"]["document_decoded_mb"] = max(body["limits"]["document_decoded_mb"], 6 * options.pages)
        policy = Policy.model_validate(body)
        args = ocrmypdf_args(policy.ocr, jobs=2)
        jobs = JobClient(await connect(settings), settings)
        logs = iter(range(100))

        def start(cpus: str | None = None) -> WorkerProcess:
            return WorkerProcess(env, settings.task_queue, folder / f"worker-{next(logs)}.log", cpus=cpus)

        rows: list[tuple[str, str, str]] = []
        worker = start() if parts - {"pinned"} else None
        try:
            if "speed" in parts:
                ratios = []
                for run in range(options.rounds):  # one after the other: both see the machine as it is then
                    plain, plain_cpu = await asyncio.to_thread(plain_ocrmypdf, scan, folder / "plain.pdf", args)
                    rows.append((f"round {run + 1}: plain ocrmypdf --jobs 2, seconds", f"{plain:.1f}", "1.00"))
                    whole = await succeeded(jobs, scan, policy, f"whole-{run}")
                    seconds = job_seconds(whole)
                    ratios.append(plain / seconds)
                    rows.append(
                        (
                            f"round {run + 1}: docjobs, chunks, seconds (accepted to succeeded)",
                            f"{seconds:.1f}",
                            f"{plain / seconds:.2f}",
                        )
                    )
                    before, ranging, after = await range_phases(jobs.client, whole.job_id)
                    rows.append(
                        (
                            f"round {run + 1}: docjobs, seconds before the first range / ranges / after the last",
                            f"{before:.1f} / {ranging:.1f} / {after:.1f}",
                            "",
                        )
                    )
                    cpu = whole.cost.total.cpu_seconds
                    rows.append(
                        (
                            f"round {run + 1}: CPU seconds, plain / docjobs (by stage)",
                            f"{plain_cpu:.1f} / {cpu:.1f}",
                            f"{plain_cpu / cpu:.2f}; {cpu_by_stage(whole)}",
                        )
                    )
                if options.rounds > 1:
                    rows.append(("docjobs against plain, median of the rounds", "", f"{statistics.median(ratios):.2f}"))
                events = await events_of(jobs, whole.job_id)
                rows.append(("docjobs, chunks, history events per page", f"{events / options.pages:.2f}", f"{events}"))
            if "fairness" in parts:
                idle, busy, still_ocr = await fairness(jobs, scan, one_page, policy)
                rows.append(
                    (f"fairness: 1-page OCR job, idle worker, seconds (median of {FAIR_RUNS})", f"{idle:.1f}", "")
                )
                during = "" if still_ocr else " (the long scan's OCR had ended: use more pages)"
                rows.append(
                    (
                        f"fairness: 1-page OCR job while the long scan's chunks run, seconds (median of {FAIR_RUNS})",
                        f"{busy:.1f}",
                        f"{busy - idle:+.1f} s{during}",
                    )
                )
            if "kill" in parts and worker is not None:
                killed, in_flight, done_at_kill, again, worker = await killed_run(jobs, scan, policy, start, worker)
                resumed = sum(
                    len(chunk["pages_resumed"]) for chunk in (await range_results(jobs.client, killed.job_id)).values()
                )
                rows.append((f"killed at {done_at_kill} pages: pages the running chunks had done", f"{in_flight}", ""))
                rows.append(
                    ("killed: pages of the chunks that ran again", f"{again}", f"chunk = {options.chunk_pages}")
                )
                rows.append(("killed: pages their next attempts took from checkpoints", f"{resumed}", ""))
                rows.append(
                    (
                        "killed: pages read again (done at the kill, not resumed)",
                        f"{max(0, in_flight - resumed)}",
                        f"chunk = {options.chunk_pages}",
                    )
                )
                rows.append(("killed: seconds (accepted to succeeded)", f"{job_seconds(killed):.1f}", ""))
            if "single" in parts:
                one = policy.model_copy(update={"ocr": policy.ocr.model_copy(update={"chunk_pages": options.pages})})
                single = await succeeded(jobs, scan, one, "single")
                rows.append(("docjobs, one ocr activity, seconds", f"{job_seconds(single):.1f}", ""))
                single_events = await events_of(jobs, single.job_id)
                rows.append(
                    (
                        "docjobs, one ocr activity, history events per page",
                        f"{single_events / options.pages:.2f}",
                        f"{single_events}",
                    )
                )
            if "memory" in parts and worker is not None:
                big = await succeeded(jobs, scan, policy, "memory")
                rows.append(("docjobs alone, seconds (accepted to succeeded)", f"{job_seconds(big):.1f}", ""))
                big_events = await events_of(jobs, big.job_id)
                rows.append(("history events per page", f"{big_events / options.pages:.2f}", f"{big_events}"))
                rows.append(("peak memory of the worker process, MiB", f"{peak_rss_mib(worker.process.pid):.0f}", ""))
                children = max(cost.peak_memory_mb for cost in big.cost.stages.values())
                rows.append(("peak memory of one document child (and its tools), MiB", f"{children:.0f}", ""))
            if "pinned" in parts:
                if worker is not None:
                    worker.stop()
                    worker = None
                one_core, two_cores = await pinned(jobs, scan, policy, start)
                rows.append(("one worker pinned to one CPU (taskset), seconds", f"{one_core:.1f}", "1.00"))
                ratio = f"{two_cores / one_core:.2f}"
                rows.append(("two workers, each pinned to its own CPU, seconds", f"{two_cores:.1f}", ratio))
        finally:
            if worker is not None:
                worker.stop()
            stop_dev_server(settings)

    print(
        f"Long scan: {options.pages} pages at {options.dpi} dpi, chunks of {options.chunk_pages}, up to "
        f"{options.max_parallel} at once, {os.cpu_count()} CPUs; OCR ranges a worker runs at once: "
        f"{os.environ.get('DOCJOBS_OCR_CHUNK_THREADS', 'the default')}"
    )
    print()
    print_table(("measure", "value", "ratio / note"), rows)


if __name__ == "__main__":
    asyncio.run(main())
