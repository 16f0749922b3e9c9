"""The clean-up of a job's staged attempts, in its wrap-up and, when the store did not answer there, after its end.

In the wrap-up it is a local activity (a marker in history, retried by the worker within one workflow task, three
attempts). A store outage must not fail the run: a failed run reads `workflow.terminated`, as if an operator had
terminated it, and a job that released would lose its `succeeded`. So the job ends in the state it decided, the
tenant is told, and the clean-up is retried as an activity, with backoff, for as long as the run may still live;
what it still cannot delete goes with the run's folder in the retention sweep (docjobs/temporal/retention.py).
"""

from __future__ import annotations

from contextlib import suppress
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from docjobs.domain.contract import DEADLINE_GRACE
    from docjobs.domain.job_status import CleanupOutcome
    from docjobs.domain.models import CleanupInput
    from workflows import stages
    from workflows.endings import LOCAL_ACTIVITY_FAILURES, WRAP_UP_TIMEOUT

RETRY_CAP = timedelta(minutes=5)  # the longest wait between the attempts after the end
MARGIN = timedelta(minutes=1)  # how long before the run's execution timeout the attempts after the end stop


async def clean_up(job_id: str) -> bool:
    """Delete the run's staged attempts, in the wrap-up. False when the store did not answer its three attempts."""
    try:
        await workflow.execute_local_activity(
            stages.cleanup,
            CleanupInput(job_id=job_id),
            start_to_close_timeout=WRAP_UP_TIMEOUT,
            retry_policy=RetryPolicy(maximum_attempts=3),
        )
    except LOCAL_ACTIVITY_FAILURES:
        return False
    return True


async def clean_up_after_the_end(job_id: str, deadline_at: datetime) -> CleanupOutcome:
    """The clean-up the wrap-up could not finish, retried until a minute before the run's execution timeout (or
    before the job's deadline plus its grace, in a run started without one)."""
    info = workflow.info()
    timeout = info.execution_timeout
    closes_at = info.workflow_start_time + timeout if timeout else deadline_at + DEADLINE_GRACE
    left = closes_at - MARGIN - workflow.now()
    if left < WRAP_UP_TIMEOUT:  # not the time for one attempt: the run would close in the middle of it
        return CleanupOutcome.LEFT_TO_RETENTION
    with suppress(ActivityError):
        await workflow.execute_activity(
            stages.cleanup,
            CleanupInput(job_id=job_id),
            start_to_close_timeout=WRAP_UP_TIMEOUT,
            schedule_to_close_timeout=left,
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=10), backoff_coefficient=2.0, maximum_interval=RETRY_CAP
            ),
        )
        return CleanupOutcome.DONE_AFTER_THE_END
    return CleanupOutcome.LEFT_TO_RETENTION
