"""What a stage attempt costs, and what the attempts before it cost: carried from attempt to attempt on the lease.

The workflow sees only the last attempt of a stage (its result, or its failure), so each attempt reports the
cost of every attempt so far: it starts from what the previous attempt left in its heartbeat details (the
server hands a retry the last heartbeat of the attempt before), and leaves its own running total there. A
successful attempt returns the total in its output, a failed one in its failure's details; an attempt whose
worker died is counted with the wall time up to its last heartbeat (its CPU died with its document child).
"""

from __future__ import annotations

import resource
import time
from typing import Any

from pydantic import ValidationError
from temporalio import activity

from docjobs.domain.stage_cost import Cost
from docjobs.isolation.protocol import TaskUsage

COST_DETAIL = "cost"  # the key of the running total in a stage's heartbeat details


def earlier_attempts() -> Cost:
    """What the attempts before this one cost, from the last heartbeat the previous attempt left (none: nothing)."""
    details = activity.info().heartbeat_details
    previous = details[0] if details else None
    if not isinstance(previous, dict):
        return Cost()
    try:
        return Cost.model_validate(previous.get(COST_DETAIL) or {})
    except ValidationError:
        return Cost()


def _thread_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


class AttemptMeter:
    """Measures one attempt: its wall time, the CPU of the activity's own thread (fetches, digests, staging) and
    what its document child's task cost. Made, and `finished`, in the activity's thread."""

    def __init__(self) -> None:
        self.earlier = earlier_attempts()
        self._started = time.monotonic()
        self._thread_cpu = _thread_cpu()
        self._child = TaskUsage()
        self._own: Cost | None = None

    def add_child(self, usage: TaskUsage) -> None:
        self._child = TaskUsage(
            cpu_seconds=self._child.cpu_seconds + usage.cpu_seconds,
            peak_memory_mb=max(self._child.peak_memory_mb, usage.peak_memory_mb),
            bytes_read=self._child.bytes_read + usage.bytes_read,
            bytes_written=self._child.bytes_written + usage.bytes_written,
        )

    def wall_seconds(self) -> float:
        return time.monotonic() - self._started

    def running(self) -> Cost:
        """Every attempt so far, this one by its wall time only (callable from any thread: the lease's)."""
        return self.earlier + Cost(attempts=1, wall_seconds=round(self.wall_seconds(), 6))

    def finished(self) -> Cost:
        """This attempt's own cost, complete; fixed by the first call (in the activity's thread, after its work)."""
        if self._own is None:
            child = self._child
            self._own = Cost(
                attempts=1,
                cpu_seconds=round(child.cpu_seconds + max(_thread_cpu() - self._thread_cpu, 0.0), 6),
                wall_seconds=round(self.wall_seconds(), 6),
                peak_memory_mb=child.peak_memory_mb,
                bytes_read=child.bytes_read,
                bytes_written=child.bytes_written,
            )
        return self._own

    def total(self) -> Cost:
        """Every attempt so far, this one complete: what the stage's output or failure reports."""
        return self.earlier + self.finished()


def cost_detail(cost: Cost) -> dict[str, Any]:
    return {COST_DETAIL: cost.model_dump(mode="json")}
