"""The active-job gauges: how many jobs are `queued` / `processing` and how old the oldest of each is.

Read from Temporal visibility, namespace-wide, so a job waiting on a queue that no worker serves counts
too (that is the job an operator must hear about). Every worker serving the general queue refreshes them;
each refresh lists the running jobs of both active states (one visibility query per page of 1000).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime

from temporalio.client import Client
from temporalio.common import MetricMeter
from temporalio.service import RPCError

from docjobs.domain.metric_names import ACTIVE_JOBS, OLDEST_ACTIVE_JOB_AGE
from docjobs.domain.states import JobState
from docjobs.temporal.client import JobClient
from docjobs.temporal.settings import TemporalSettings

log = logging.getLogger("docjobs.metrics")
ACTIVE_STATES = (JobState.QUEUED, JobState.PROCESSING)


async def refresh_forever(jobs: JobClient, meter: MetricMeter, every: float) -> None:
    oldest_age = meter.create_gauge_float(OLDEST_ACTIVE_JOB_AGE, "age of the oldest running job in each state", "s")
    active = meter.create_gauge(ACTIVE_JOBS, "running jobs in each state")
    while True:
        try:
            for state in ACTIVE_STATES:
                found = await jobs.list_jobs(state=state, running_only=True, limit=None)
                starts = [job.started_at for job in found if job.started_at is not None]
                age = (datetime.now(UTC) - min(starts)).total_seconds() if starts else 0.0
                oldest_age.set(age, {"state": state.value})
                active.set(len(found), {"state": state.value})
        except RPCError as error:  # the gauges keep their last values; the next round tries again
            log.warning("active-job gauges not refreshed: %s", error.status)
        await asyncio.sleep(every)


@asynccontextmanager
async def active_job_gauges(
    client: Client, settings: TemporalSettings, meter: MetricMeter | None
) -> AsyncIterator[None]:
    """Keep the gauges fresh for as long as the block runs (nothing to do without a meter)."""
    if meter is None:
        yield
        return
    task = asyncio.create_task(refresh_forever(JobClient(client, settings), meter, settings.metrics_refresh_seconds))
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
