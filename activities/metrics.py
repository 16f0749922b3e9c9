"""What stage attempts report to metrics: their outcome and duration, fidelity failures, lost leases.

Recorded through the activity's metric meter, so they go wherever the worker's runtime sends the SDK's own
metrics (a no-op meter when the worker has no metrics endpoint).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from docjobs.domain.metric_names import (
    ACTIVITY_ATTEMPTS,
    FIDELITY_FAILURES,
    LEASE_EXPIRATIONS,
    STAGE_CPU,
    STAGE_DURATION,
    shape_labels,
)
from docjobs.domain.models import JobShape

log = logging.getLogger("docjobs.activities")
DESCRIBE_TIMEOUT = timedelta(seconds=5)
FIDELITY_PREFIX = "fidelity."


def outcome_after_failure(*, retryable: bool) -> str:
    """`retrying` while the server will schedule another attempt, else `failed`."""
    info = activity.info()
    most = info.retry_policy.maximum_attempts if info.retry_policy else 0  # 0: no limit
    return "retrying" if retryable and (most == 0 or info.attempt < most) else "failed"


def record_attempt(
    stage: str, shape: JobShape | None, outcome: str, seconds: float, code: str | None, cpu: float | None = None
) -> None:
    """One attempt's outcome and duration; its CPU seconds (document child, tools and worker thread) when measured."""
    meter = activity.metric_meter()
    meter.create_counter(ACTIVITY_ATTEMPTS, "stage attempts by outcome").add(1, {"stage": stage, "outcome": outcome})
    meter.create_histogram_float(STAGE_DURATION, "time a stage attempt worked, whatever its outcome", "s").record(
        seconds, {"stage": stage, **shape_labels(shape)}
    )
    if cpu is not None:
        meter.create_histogram_float(STAGE_CPU, "CPU seconds of a stage attempt, tools included", "s").record(
            cpu, {"stage": stage, **shape_labels(shape), "outcome": outcome}
        )
    if code is not None and code.startswith(FIDELITY_PREFIX):
        meter.create_counter(FIDELITY_FAILURES, "outputs that failed a fidelity check before release").add(
            1, {"check": code.removeprefix(FIDELITY_PREFIX)}
        )


class LeaseExpiries(Interceptor):
    """Counts stage attempts that lost their lease (`docjobs_lease_expirations` by stage).

    Only the server sees a heartbeat time out: the dead attempt cannot report it. So when a retry starts,
    one describe of the job's workflow reads why the previous attempt ended (first attempts cost nothing).
    """

    def __init__(self, client: Client) -> None:
        self._client = client

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _LeaseExpiryInbound(next, self._client)


class _LeaseExpiryInbound(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, client: Client) -> None:
        super().__init__(next)
        self._client = client

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if info.attempt > 1 and info.heartbeat_timeout is not None and info.workflow_id is not None:
            try:
                if await self._previous_lease_expired(info.workflow_id, info.workflow_run_id, info.activity_id):
                    activity.metric_meter().create_counter(
                        LEASE_EXPIRATIONS, "stage attempts whose worker stopped renewing the lease"
                    ).add(1, {"stage": info.activity_type})
            except RPCError as error:  # a metric is not worth failing the stage for
                log.warning("stage %s: could not look up its previous attempt (%s)", info.activity_type, error.status)
        return await self.next.execute_activity(input)

    async def _previous_lease_expired(self, workflow_id: str, run_id: str | None, activity_id: str) -> bool:
        handle = self._client.get_workflow_handle(workflow_id, run_id=run_id)
        description = await handle.describe(rpc_timeout=DESCRIBE_TIMEOUT)
        for pending in description.raw_description.pending_activities:
            if pending.activity_id == activity_id and pending.last_failure.HasField("timeout_failure_info"):
                timeout = pending.last_failure.timeout_failure_info.timeout_type
                return bool(timeout == TimeoutType.TIMEOUT_TYPE_HEARTBEAT)
        return False
