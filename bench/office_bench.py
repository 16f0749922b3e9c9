"""An office document through docjobs against LibreOffice run alone, cold and warm.

    .venv/bin/python bench/office_bench.py [--pages 10] [--runs 5]

A `.docx` letter of about `--pages` pages (made by LibreOffice from HTML, as the tests make theirs) is converted,
in turns: by `soffice --headless --convert-to pdf` alone with a fresh user profile each time (cold: what every
docjobs conversion pays, see docs/office.md) and with one profile reused (warm); and as a whole docjobs job
(embedded dev server on free ports, an in-process worker, the `standard` policy: render with the conversion in
the confined document child, watermark, sign, verify, publish, evidence), submit to succeeded, after one warm-up
job. Prints median seconds, seconds per page and the ratio to the cold conversion alone.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import dev_server_env, print_table

from docjobs.domain.states import JobState
from docjobs.generate.office import SOFFICE_ARGUMENTS
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.poller import WaitEnd, wait_for_job
from docjobs.temporal.settings import TemporalSettings
from docjobs.worker import serving
from tests.fixtures.office_samples import converted_by_libreoffice

PARAGRAPH = (
    "The patient was seen for a follow-up visit. Blood pressure and weight were recorded, the medication list was "
    "reviewed with the patient, and the next appointment was agreed. "
)


def letter(folder: Path, pages: int) -> Path:
    body = "".join(f"<h2>Section {n + 1}</h2>" + f"<p>{PARAGRAPH * 6}</p>" * 3 for n in range(pages))
    return converted_by_libreoffice(f"<html><body><h1>Referral letter</h1>{body}</body></html>", "docx", folder)


def page_count(pdf: Path) -> int:
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    return int(next(line.split()[-1] for line in info.splitlines() if line.startswith("Pages:")))


def convert_alone(docx: Path, out: Path, profile: Path) -> float:
    started = time.perf_counter()
    profiled = f"-env:UserInstallation={profile.as_uri()}"
    subprocess.run(
        ["soffice", *SOFFICE_ARGUMENTS, profiled, "--convert-to", "pdf", "--outdir", str(out), str(docx)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return time.perf_counter() - started


async def jobs_seconds(docx: Path, folder: Path, runs: int) -> tuple[list[float], list[float], int]:
    """Seconds from submit to succeeded and of the render stage, per run (after a warm-up), and the pages."""
    os.environ.update(dev_server_env(folder))
    settings = TemporalSettings.from_env()
    totals, renders, pages = [], [], 0
    try:
        client = await connect(settings)
        jobs = JobClient(client, settings)
        async with serving(client, settings):
            for run in range(runs + 1):
                started = time.perf_counter()
                job_id = (await jobs.submit(docx, "standard", key=f"office-{uuid.uuid4().hex[:8]}")).job_id
                result = await wait_for_job(partial(jobs.status, job_id), timeout=600, max_polls=100_000, max_delay=0.1)
                elapsed = time.perf_counter() - started
                status = result.status
                if result.end is not WaitEnd.TERMINAL or status is None or status.state is not JobState.SUCCEEDED:
                    raise RuntimeError(f"a benchmark job did not succeed: {status}")
                if run:  # the first is a warm-up: the worker's children start and import
                    totals.append(elapsed)
                    moments = [(record.stage, record.at) for record in status.transitions]
                    renders += [
                        (after - at).total_seconds()
                        for (stage, at), (_, after) in itertools.pairwise(moments)
                        if stage is not None and stage.value == "render"
                    ]
                pages = status.page_count
    finally:
        stop_dev_server(settings)
    return totals, renders, pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="docjobs-office-bench-") as tmp:
        folder = Path(tmp)
        docx = letter(folder / "fixture", options.pages)
        warm_profile = folder / "warm-profile"
        convert_alone(docx, folder / "warm-up", warm_profile)
        cold, warm = [], []
        for run in range(options.runs):
            cold_profile = folder / f"cold-profile-{run}"
            cold.append(convert_alone(docx, folder / "cold", cold_profile))
            shutil.rmtree(cold_profile)
            warm.append(convert_alone(docx, folder / "warm", warm_profile))
        pages = page_count(folder / "cold" / "letter.pdf")
        totals, renders, job_pages = asyncio.run(jobs_seconds(docx, folder / "jobs", options.runs))
    baseline = statistics.median(cold)
    print(f"A {pages}-page .docx letter (the job counted {job_pages}), median of {options.runs}\n")
    medians = {
        "soffice --convert-to pdf, fresh profile (cold)": statistics.median(cold),
        "soffice --convert-to pdf, reused profile (warm)": statistics.median(warm),
        "docjobs render stage (conversion in the confined child, stamp)": statistics.median(renders),
        "docjobs job, submit to succeeded (standard policy)": statistics.median(totals),
    }
    print_table(
        ("runner", "median seconds", "seconds per page", "ratio to the cold conversion"),
        ((runner, f"{m:.2f}", f"{m / pages:.3f}", f"{m / baseline:.2f}") for runner, m in medians.items()),
    )


if __name__ == "__main__":
    main()
