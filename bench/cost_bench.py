"""CPU seconds per released page, by processing mode, from the jobs' own cost accounts (`JobStatus.cost`).

    .venv/bin/python bench/cost_bench.py [--pages 10] [--runs 1]

Real jobs through the whole pipeline (render, the optional stages, sign, verify, publish) on an embedded dev
server in a throwaway data dir, with an in-process worker: structure mode (`standard`) and raster mode
(`preview`) on a generated text PDF, OCR (`scan`) on a generated 300 dpi scan, redaction (`external`, every
built-in pattern) on a text PDF with an SSN, an e-mail and a phone number on every page. Prints the median CPU
seconds per page (every stage attempt: the document children with their tools, and the worker threads) and the
stages that cost the most.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import dev_server_env

from docjobs.domain.job_status import JobStatus
from docjobs.domain.states import JobState
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.poller import WaitEnd, wait_for_job
from docjobs.temporal.settings import TemporalSettings
from docjobs.worker import serving
from tests.fixtures.redact_samples import make_redaction_bench_pdf
from tests.fixtures.samples import make_sample_pdf
from tests.fixtures.scans import make_scan_pdf, scan_words

# mode -> (policy, how its document is made)
MODES: dict[str, tuple[str, Callable[[Path, int], None]]] = {
    "structure": ("standard", lambda path, pages: make_sample_pdf(path, pages=pages)),
    "raster (110 dpi)": ("preview", lambda path, pages: make_sample_pdf(path, pages=pages)),
    "OCR (300 dpi scan)": ("scan", lambda path, pages: make_scan_pdf(path, scan_words(pages), ["upright"] * pages)),
    "redaction": ("external", lambda path, pages: make_redaction_bench_pdf(path, pages=pages)),
}


async def released(jobs: JobClient, document: Path, policy: str, key: str) -> JobStatus:
    submitted = await jobs.submit(document, policy, tenant="bench", key=key)
    result = await wait_for_job(
        lambda: jobs.status(submitted.job_id), timeout=1800, max_polls=100_000, initial_delay=1.0, max_delay=1.0
    )
    if result.end is not WaitEnd.TERMINAL or result.status is None or result.status.state is not JobState.SUCCEEDED:
        raise SystemExit(f"the {policy} job did not succeed: {result.status}")
    return result.status


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--runs", type=int, default=1)
    options = parser.parse_args()

    results: dict[str, list[JobStatus]] = {}
    with tempfile.TemporaryDirectory(prefix="docjobs-cost-bench-") as tmp:
        folder = Path(tmp)
        os.environ.update(dev_server_env(folder, "docjobs-cost-bench"))
        settings = TemporalSettings.from_env()
        client = await connect(settings)
        jobs = JobClient(client, settings)
        try:
            async with serving(client, settings):
                for mode, (policy, make) in MODES.items():
                    document = folder / f"{policy}.pdf"
                    make(document, options.pages)
                    for run in range(options.runs):
                        status = await released(jobs, document, policy, f"{policy}-{run}")
                        results.setdefault(mode, []).append(status)
        finally:
            stop_dev_server(settings)

    print(f"Cost benchmark: {options.pages}-page documents, {options.runs} run(s) each, {os.cpu_count()} CPUs")
    print()
    header = ("mode", "policy", "CPU s/page", "CPU s/document", "wall s/document", "peak MiB", "top stages, CPU s")
    print("| " + " | ".join(header) + " |")
    print("|---" * len(header) + "|")
    for mode, statuses in results.items():
        cpu = statistics.median(status.cost.total.cpu_seconds for status in statuses)
        wall = statistics.median(status.cost.total.wall_seconds for status in statuses)
        peak = max(status.cost.total.peak_memory_mb for status in statuses)
        stages = statuses[0].cost.stages
        top = sorted(stages.items(), key=lambda item: -item[1].cpu_seconds)[:3]
        costliest = ", ".join(f"{name} {spent.cpu_seconds:.2f}" for name, spent in top)
        pages = statuses[0].page_count
        print(f"| {mode} | {MODES[mode][0]} | {cpu / pages:.3f} | {cpu:.2f} | {wall:.2f} | {peak:.0f} | {costliest} |")


if __name__ == "__main__":
    asyncio.run(main())
