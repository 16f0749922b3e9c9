"""The generate stage against plain WeasyPrint, and one invoice job end to end.

    .venv/bin/python bench/generate_bench.py [--rows 600] [--runs 5]

Part 1 renders the shipped invoice template with `--rows` line items to HTML once, then, alternating, lays out
that same HTML (with its style sheet and fonts) with the plain `weasyprint` command and with the generate
stage in a warm document child (the worker's path: a JSON work order, the bundle unpacked with limits, the
restricted fetcher, the fonts check, a JSON result). Prints median seconds and pages per second.
Part 2 runs real invoice jobs (embedded dev server on free ports, an in-process worker, the `standard`
policy: generate, watermark, sign, verify, publish, evidence) from `submit` to `succeeded`, each with new
data (a new job), after one warm-up job. Prints the median latency and the stages' own seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import dev_server_env, print_table

from docjobs.domain.job_status import JobStatus
from docjobs.domain.models import GenerateDone, GenerateSettings, InputKind
from docjobs.domain.policy import GeneratePolicy
from docjobs.domain.stage_cost import CpuBudget
from docjobs.domain.states import JobState
from docjobs.generate.templating import render_template
from docjobs.isolation.child_pool import ChildLimits, ChildPool
from docjobs.isolation.stage_work import GenerateWork
from docjobs.store.templates import zip_folder
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.poller import WaitEnd, wait_for_job
from docjobs.temporal.settings import TemporalSettings
from docjobs.worker import serving
from tests.fixtures.generate_samples import invoice_data, invoice_template

CPU = CpuBudget(base_seconds=600, per_page_seconds=10)
WEASYPRINT = Path(sys.executable).with_name("weasyprint")


def seconds(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def stage_versus_plain(folder: Path, rows: int, runs: int) -> None:
    site = invoice_template(folder / "site")
    html = render_template(site, "index.html", invoice_data(rows), seconds=60)
    (site / "index.html").write_text(html)  # the same static HTML for both
    zip_folder(site, folder / "bundle.zip")
    pool = ChildPool(ChildLimits(), home=folder / "children", warm=1)
    pool.start()
    pages = 0

    def plain() -> None:
        subprocess.run([str(WEASYPRINT), str(site / "index.html"), str(folder / "plain.pdf")], check=True)

    def stage() -> None:
        nonlocal pages
        workdir = folder / f"work-{uuid.uuid4().hex[:8]}"
        workdir.mkdir()
        work = GenerateWork(
            source=folder / "bundle.zip",
            data=None,
            output=workdir / "out.pdf",
            workdir=workdir,
            settings=GenerateSettings(
                input_kind=InputKind.BUNDLE, generate=GeneratePolicy(page_size="A4", margin="20mm"), max_pages=2000
            ),
        )
        pages = pool.run("generate", work, GenerateDone, cpu=CPU).summary.page_count
        shutil.rmtree(workdir)

    try:
        plain()  # warm-up (the child imports WeasyPrint once; the command does on every run)
        stage()
        timings: dict[str, list[float]] = {"plain weasyprint command": [], "generate stage (warm child)": []}
        for _ in range(runs):
            timings["plain weasyprint command"].append(seconds(plain))
            timings["generate stage (warm child)"].append(seconds(stage))
    finally:
        pool.close()
    baseline = pages / statistics.median(timings["plain weasyprint command"])
    print(f"The invoice with {rows} rows: {pages} pages, median of {runs} (alternating)\n")
    medians = {runner: statistics.median(samples) for runner, samples in timings.items()}
    print_table(
        ("runner", "median seconds", "pages/s", "ratio"),
        ((runner, f"{m:.2f}", f"{pages / m:.2f}", f"{pages / m / baseline:.2f}") for runner, m in medians.items()),
    )


async def invoice_job(jobs: JobClient, policy: str, data: Path, folder: Path) -> tuple[float, JobStatus]:
    """Seconds from accepting the data to the job's success, and its status."""
    started = time.perf_counter()
    manifest = jobs.templates.manifest("bench", "invoice", data, folder, max_data_bytes=1 << 20)
    submitted = await jobs.submit(manifest, policy, input_kind=InputKind.TEMPLATE, tenant="bench")
    result = await wait_for_job(lambda: jobs.status(submitted.job_id), timeout=300, max_polls=100_000, max_delay=0.1)
    elapsed = time.perf_counter() - started
    if result.end is not WaitEnd.TERMINAL or result.status is None or result.status.state is not JobState.SUCCEEDED:
        raise RuntimeError(f"a benchmark job did not succeed: {result.status}")
    return elapsed, result.status


async def invoice_latency(folder: Path, runs: int) -> None:
    os.environ.update(dev_server_env(folder))
    settings = TemporalSettings.from_env()
    zip_folder(invoice_template(folder / "invoice"), folder / "invoice.zip")
    demo = json.loads((Path(__file__).resolve().parent.parent / "demo" / "invoice.json").read_text())
    latencies: list[float] = []
    stages: dict[str, list[float]] = {}
    try:
        client = await connect(settings)
        jobs = JobClient(client, settings)
        jobs.templates.add("bench", "invoice", folder / "invoice.zip")
        async with serving(client, settings):
            for run in range(runs + 1):  # the first is a warm-up: the worker's children start and import
                data = folder / f"data-{run}.json"
                data.write_text(json.dumps({**demo, "number": f"BENCH-{uuid.uuid4().hex[:8]}"}))
                elapsed, status = await invoice_job(jobs, "standard", data, folder)
                if run:
                    latencies.append(elapsed)
                    moments = [(record.stage, record.at) for record in status.transitions]
                    for (stage, at), (_, after) in itertools.pairwise(moments):
                        if stage is not None:
                            stages.setdefault(stage.value, []).append((after - at).total_seconds())
    finally:
        stop_dev_server(settings)
    print(f"\nOne invoice job (demo data, {status.page_count} pages, standard policy), median of {runs}:\n")
    print_table(
        ("measure", "median seconds"),
        [
            ("submit -> succeeded (client side)", f"{statistics.median(latencies):.2f}"),
            *((f"stage {name}", f"{statistics.median(samples):.2f}") for name, samples in stages.items()),
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="docjobs-generate-bench-") as tmp:
        stage_versus_plain(Path(tmp), options.rows, options.runs)
        asyncio.run(invoice_latency(Path(tmp), options.runs))


if __name__ == "__main__":
    main()
