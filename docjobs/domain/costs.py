"""What released documents cost: the jobs' own accounts (`JobStatus.cost`) added up, per released page and per mode.

A released document's cost is every attempt of every stage of its job, failed and retried ones included. Jobs
that released nothing (failed, quarantined, canceled) cost on top of that: `cpu_seconds_per_released_page_all_in`
puts them on the released pages too, which is what the machines really spent per page delivered.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from docjobs.domain.job_status import JobStatus
from docjobs.domain.states import TERMINAL_STATES, JobState, Stage


class ModeCost(BaseModel):
    documents: int = 0
    pages: int = 0
    cpu_seconds: float = 0.0
    cpu_seconds_per_page: float | None = None


class UnreleasedCost(BaseModel):
    documents: int = 0
    cpu_seconds: float = 0.0


class CostReport(BaseModel):
    released_documents: int
    released_pages: int
    released_cpu_seconds: float
    cpu_seconds_per_released_page: float | None  # None: nothing released
    modes: dict[str, ModeCost]  # processing mode (`processing_mode`) -> the released documents' cost
    unreleased: dict[str, UnreleasedCost]  # terminal state -> what jobs that released nothing cost on top
    total_cpu_seconds: float
    cpu_seconds_per_released_page_all_in: float | None


def processing_mode(status: JobStatus) -> str:
    """The watermark mode, plus the optional stages the job ran: `structure`, `raster+ocr`, `structure+ocr+redact`."""
    extras = [stage.value for stage in (Stage.OCR, Stage.REDACT) if stage.value in status.cost.stages]
    return "+".join([status.watermark_mode.value, *extras])


def _per(seconds: float, pages: int) -> float | None:
    return round(seconds / pages, 6) if pages else None


def cost_report(statuses: Iterable[JobStatus]) -> CostReport:
    """The report over the terminal jobs among `statuses` (others are still spending: not counted yet)."""
    modes: dict[str, ModeCost] = {}
    unreleased: dict[str, UnreleasedCost] = {}
    for status in statuses:
        if status.state not in TERMINAL_STATES:
            continue
        cpu = status.cost.total.cpu_seconds
        if status.state is JobState.SUCCEEDED:
            mode = modes.setdefault(processing_mode(status), ModeCost())
            mode.documents += 1
            mode.pages += status.page_count
            mode.cpu_seconds = round(mode.cpu_seconds + cpu, 6)
        else:
            spent = unreleased.setdefault(status.state.value, UnreleasedCost())
            spent.documents += 1
            spent.cpu_seconds = round(spent.cpu_seconds + cpu, 6)
    for mode in modes.values():
        mode.cpu_seconds_per_page = _per(mode.cpu_seconds, mode.pages)
    pages = sum(mode.pages for mode in modes.values())
    released = round(sum(mode.cpu_seconds for mode in modes.values()), 6)
    total = round(released + sum(spent.cpu_seconds for spent in unreleased.values()), 6)
    return CostReport(
        released_documents=sum(mode.documents for mode in modes.values()),
        released_pages=pages,
        released_cpu_seconds=released,
        cpu_seconds_per_released_page=_per(released, pages),
        modes=dict(sorted(modes.items())),
        unreleased=dict(sorted(unreleased.items())),
        total_cpu_seconds=total,
        cpu_seconds_per_released_page_all_in=_per(total, pages),
    )
