"""OCR throughput: the same scan through the full docjobs pipeline versus the plain `ocrmypdf` command.

    .venv/bin/python bench/ocr_bench.py [--pages 10] [--runs 2]

Both sides get the same options (docjobs' own `ocrmypdf_args` for the `scan` policy; signing off: OCR
only) and run one after the other, alternating, on an embedded dev server in a throwaway data dir.
docjobs' time is the acceptance call (hash, store, start) plus the job's own time from accepted to
`succeeded` (render, OCR, watermark, verify, publish, evidence, clean-up, Temporal round trips), so the
caller's polling interval does not count; the plain command's is its process wall time. Prints a table with
pages/second, the ratio, and the median time of each docjobs stage.
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
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import dev_server_env

from docjobs.domain.policy import Policy
from docjobs.domain.states import JobState
from docjobs.pdf.ocr import ocrmypdf_args
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.poller import WaitEnd, wait_for_job
from docjobs.temporal.settings import TemporalSettings
from docjobs.worker import serving
from tests.fixtures.policy_files import named
from tests.fixtures.scans import make_scan_pdf, scan_words


def plain_ocrmypdf(scan: Path, out: Path, args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ocrmypdf", *args, str(scan), str(out)], check=True, capture_output=True)
    return time.perf_counter() - started


async def docjobs_run(jobs: JobClient, scan: Path, policy: Policy, key: str) -> tuple[float, dict[str, float]]:
    """Acceptance (hash, store, start) timed here, then the job's own clock from accepted to terminal, so
    the caller's polling interval neither inflates the figure nor competes much for the CPU."""
    started = time.perf_counter()
    submitted = await jobs.submit(scan, named(jobs, policy), tenant="bench", key=key)
    accepting = time.perf_counter() - started
    result = await wait_for_job(
        lambda: jobs.status(submitted.job_id), timeout=1800, max_polls=100_000, initial_delay=1.0, max_delay=1.0
    )
    if result.end is not WaitEnd.TERMINAL or result.status is None or result.status.state is not JobState.SUCCEEDED:
        raise SystemExit(f"docjobs job did not succeed: {result.status}")
    steps = result.status.transitions
    elapsed = accepting + (steps[-1].at - steps[0].at).total_seconds()
    stages = {
        str(before.stage.value if before.stage else before.state.value): (after.at - before.at).total_seconds()
        for before, after in pairwise(steps)
    }
    return elapsed, stages


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--runs", type=int, default=2)
    options = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="docjobs-bench-") as tmp:
        folder = Path(tmp)
        os.environ.update(dev_server_env(folder, "docjobs-bench"))
        settings = TemporalSettings.from_env()
        scan = folder / "scan.pdf"
        make_scan_pdf(scan, scan_words(options.pages), ["upright"] * options.pages)
        # OCR only: the scan policy without the signature (the verify gate still runs).
        body = PolicyBook.load(settings.policy_file).get("scan").model_dump()
        body["sign"]["enabled"] = False
        policy = Policy.model_validate(body)
        args = ocrmypdf_args(policy.ocr)
        client = await connect(settings)
        jobs = JobClient(client, settings)
        plain: list[float] = []
        pipeline: list[float] = []
        stage_times: dict[str, list[float]] = {}
        try:
            async with serving(client, settings):
                for run in range(options.runs):
                    plain.append(await asyncio.to_thread(plain_ocrmypdf, scan, folder / f"plain-{run}.pdf", args))
                    elapsed, stages = await docjobs_run(jobs, scan, policy, f"run-{run}")
                    pipeline.append(elapsed)
                    for stage, seconds in stages.items():
                        stage_times.setdefault(stage, []).append(seconds)
        finally:
            stop_dev_server(settings)

    pages = options.pages
    plain_rate = pages / statistics.median(plain)
    docjobs_rate = pages / statistics.median(pipeline)
    print(f"OCR benchmark: {pages}-page 300 dpi scan, {options.runs} run(s) each, {os.cpu_count()} CPUs")
    print(f"ocrmypdf options: {' '.join(args)}")
    print()
    print("| runner | median seconds | pages/s | ratio |")
    print("|---|---|---|---|")
    for runner, seconds, rate in (
        ("plain ocrmypdf", statistics.median(plain), plain_rate),
        ("docjobs pipeline", statistics.median(pipeline), docjobs_rate),
    ):
        print(f"| {runner} | {seconds:.2f} | {rate:.2f} | {rate / plain_rate:.2f} |")
    print()
    print(
        "docjobs stages (median seconds): "
        + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in stage_times.items())
    )


if __name__ == "__main__":
    asyncio.run(main())
