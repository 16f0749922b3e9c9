"""What released documents cost: the report's arithmetic, and `starter.py cost` over real jobs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from docjobs.domain.costs import cost_report, processing_mode
from docjobs.domain.job_status import JobStatus
from docjobs.domain.policy import WatermarkMode
from docjobs.domain.stage_cost import Cost, JobCost
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient
from tests.conftest import Env, run_starter, wait_terminal
from tests.fixtures.samples import truncate_pdf
from tests.fixtures.statuses import a_status


def ended(state: JobState, pages: int, mode: WatermarkMode, **cpu_by_stage: float) -> JobStatus:
    cost = JobCost()
    for stage, seconds in cpu_by_stage.items():
        cost = cost.adding(stage, Cost(attempts=1, cpu_seconds=seconds))
    return a_status(job_id=f"t/{state.value}-{pages}", watermark_mode=mode, state=state, page_count=pages, cost=cost)


def test_the_report_puts_every_attempt_on_the_released_pages() -> None:
    statuses = [
        ended(JobState.SUCCEEDED, 4, WatermarkMode.STRUCTURE, render=1.0, publish=1.0),
        ended(JobState.SUCCEEDED, 6, WatermarkMode.STRUCTURE, render=2.0),
        ended(JobState.SUCCEEDED, 2, WatermarkMode.RASTER, render=1.0, ocr=5.0, redact=1.0),
        ended(JobState.FAILED, 0, WatermarkMode.STRUCTURE, render=0.5),
        ended(JobState.QUARANTINED, 3, WatermarkMode.STRUCTURE, render=1.0, verify=0.5),
        ended(JobState.PROCESSING, 9, WatermarkMode.STRUCTURE, render=100.0),  # still spending: not counted
    ]
    report = cost_report(statuses)
    assert (report.released_documents, report.released_pages, report.released_cpu_seconds) == (3, 12, 11.0)
    assert report.cpu_seconds_per_released_page == round(11 / 12, 6)
    assert {name: (mode.documents, mode.pages, mode.cpu_seconds) for name, mode in report.modes.items()} == {
        "structure": (2, 10, 4.0),
        "raster+ocr+redact": (1, 2, 7.0),
    }
    assert report.modes["raster+ocr+redact"].cpu_seconds_per_page == 3.5
    assert {state: (spent.documents, spent.cpu_seconds) for state, spent in report.unreleased.items()} == {
        "failed": (1, 0.5),
        "quarantined": (1, 1.5),
    }
    assert report.total_cpu_seconds == 13.0 and report.cpu_seconds_per_released_page_all_in == round(13 / 12, 6)
    assert processing_mode(statuses[0]) == "structure"
    empty = cost_report([])
    assert (empty.released_pages, empty.cpu_seconds_per_released_page, empty.modes) == (0, None, {})


async def test_cost_command_over_real_jobs(
    env: Env, jobs: JobClient, policies: PolicyBook, samples: Path, tmp_path: Path
) -> None:
    tenant = "costs-e2e"
    truncate_pdf(samples / "sample.pdf", tmp_path / "truncated.pdf")
    good = await jobs.submit(samples / "sample.pdf", "standard", tenant=tenant, key="released")
    bad = await jobs.submit(tmp_path / "truncated.pdf", "standard", tenant=tenant, key="malformed")
    released = await wait_terminal(jobs, good.job_id)
    failed = await wait_terminal(jobs, bad.job_id)
    assert (released.state, failed.state) == (JobState.SUCCEEDED, JobState.FAILED)

    report: dict[str, Any] = {}
    deadline = time.monotonic() + 60  # visibility lists a closed run a moment after it closed
    while time.monotonic() < deadline:
        code, report, _ = await asyncio.to_thread(run_starter, env, "cost", "--since", "1h", "--tenant", tenant)
        assert code == 0, report
        if report["released_documents"] == 1 and "failed" in report["unreleased"]:
            break
        await asyncio.sleep(1)
    assert (report["released_documents"], report["released_pages"]) == (1, 4), report
    assert report["released_cpu_seconds"] == released.cost.total.cpu_seconds > 0
    assert report["modes"]["structure"]["cpu_seconds_per_page"] == round(released.cost.total.cpu_seconds / 4, 6)
    assert report["unreleased"] == {"failed": {"documents": 1, "cpu_seconds": failed.cost.total.cpu_seconds}}
    assert failed.cost.stages["render"].attempts == 1 and failed.cost.total.cpu_seconds > 0
    assert report["cpu_seconds_per_released_page_all_in"] > report["cpu_seconds_per_released_page"]
    code, other, _ = await asyncio.to_thread(run_starter, env, "cost", "--tenant", "costs-nobody")
    assert (code, other["released_documents"], other["unreleased"]) == (0, 0, {})
