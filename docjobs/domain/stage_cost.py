"""What a stage attempt may spend and what it spent: a document child's CPU budget, and the costs that attempts add
up to, per stage and per job (`JobStatus.cost`; docjobs/domain/costs.py adds released jobs' costs up)."""

from __future__ import annotations

from pydantic import Field

from docjobs.domain.base import Frozen


class CpuBudget(Frozen):
    """The CPU seconds a stage's document child may use: a base, plus a share per page once it knows how many."""

    base_seconds: float = Field(default=60.0, gt=0)
    per_page_seconds: float = Field(default=10.0, ge=0)

    def seconds(self, pages: int) -> float:
        return self.base_seconds + self.per_page_seconds * max(pages, 0)


class Cost(Frozen):
    """What stage attempts cost: CPU seconds (user + system, of the document child and the tools it ran, and of the
    worker thread that fetched and stored the blobs), wall seconds, the peak resident memory of one attempt, and the
    bytes read and written (read/write system calls of the child and its tools). Adding costs sums them, except
    the peak, which is the larger one."""

    attempts: int = Field(default=0, ge=0)
    cpu_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    wall_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    peak_memory_mb: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    bytes_read: int = Field(default=0, ge=0)
    bytes_written: int = Field(default=0, ge=0)

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            attempts=self.attempts + other.attempts,
            cpu_seconds=round(self.cpu_seconds + other.cpu_seconds, 6),
            wall_seconds=round(self.wall_seconds + other.wall_seconds, 6),
            peak_memory_mb=max(self.peak_memory_mb, other.peak_memory_mb),
            bytes_read=self.bytes_read + other.bytes_read,
            bytes_written=self.bytes_written + other.bytes_written,
        )


class JobCost(Frozen):
    """A job's cost: per stage (every attempt, failed and retried ones included) and in total."""

    total: Cost = Cost()
    stages: dict[str, Cost] = Field(default_factory=dict)

    def adding(self, stage: str, cost: Cost) -> JobCost:
        stages = {**self.stages, stage: self.stages.get(stage, Cost()) + cost}
        return JobCost(total=self.total + cost, stages=stages)
