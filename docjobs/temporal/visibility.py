"""What Temporal visibility knows of jobs: listings filtered by the search attributes, a job's status rebuilt
from its start memo when no worker can answer a query, and the state of a run Temporal closed itself."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from docjobs.domain.contract import WORKFLOW_TYPE
from docjobs.domain.errors import FailureCode
from docjobs.domain.job_status import JobStatus
from docjobs.domain.models import JobRequest, JobSummary
from docjobs.domain.policy import WatermarkMode
from docjobs.domain.states import JobState, Stage, is_terminal, parse_state
from workflows import search_attributes as sa

SAFE_QUERY_VALUE = re.compile(r"[A-Za-z0-9_.@-]+")  # what may be put in a visibility query unquoted-safe


@dataclass(frozen=True)
class OutsideEnding:
    """How a run that Temporal closed outside the workflow's own logic is reported."""

    state: JobState
    failure_code: FailureCode | None = None
    cancel_reason: str | None = None


def closed_outside(execution: WorkflowExecutionStatus | None, *, deadline_passed: bool) -> OutsideEnding:
    """The job state of a run the workflow did not end itself: canceled by request, timed out by Temporal
    (its execution timeout: `deadline_exceeded` once the job's deadline had passed, else `workflow.timed_out`,
    a run that ran out of Temporal time for another reason), or terminated (by an operator) or failed."""
    if execution is WorkflowExecutionStatus.CANCELED:
        return OutsideEnding(JobState.CANCELED, cancel_reason="requested")
    if execution is WorkflowExecutionStatus.TIMED_OUT:
        if deadline_passed:
            return OutsideEnding(JobState.CANCELED, cancel_reason="deadline_exceeded")
        return OutsideEnding(JobState.FAILED, failure_code=FailureCode.WORKFLOW_TIMED_OUT)
    return OutsideEnding(JobState.FAILED, failure_code=FailureCode.WORKFLOW_TERMINATED)


# Visibility's name of each way Temporal closes a run outside the workflow's logic -> the job states it reads as.
CLOSED_OUTSIDE: dict[str, frozenset[JobState]] = {
    "Canceled": frozenset({JobState.CANCELED}),
    "TimedOut": frozenset({JobState.CANCELED, JobState.FAILED}),
    "Terminated": frozenset({JobState.FAILED}),
    "Failed": frozenset({JobState.FAILED}),
}


def state_clause(state: JobState) -> str:
    """The visibility query for jobs in `state`: by the workflow's state attribute while it runs or once it
    ended itself; a run Temporal closed otherwise still has the attribute of where it was, so it is matched by
    how it closed instead, or, once its workflow had decided a terminal state, by that state."""
    statuses = "" if is_terminal(state) else ' AND ExecutionStatus IN ("Running", "Completed")'
    own = f'({sa.STATE.name} = "{state.value}"{statuses})'
    closed = [f'"{name}"' for name, states in CLOSED_OUTSIDE.items() if state in states]
    return f"({own} OR ExecutionStatus IN ({', '.join(closed)}))" if closed else own


async def listed_closed_outside(execution: WorkflowExecution) -> OutsideEnding:
    """How a listed run that Temporal closed reads: in the terminal state its workflow had decided (and was
    telling the tenant about), else by how it closed (a timed-out one by its job's deadline, from the memo)."""
    recorded = execution.typed_search_attributes.get(sa.STATE)
    if recorded and is_terminal(decided := parse_state(recorded)):
        return OutsideEnding(decided)
    deadline_passed = True
    memo = (
        await execution.memo_value("request", default=None)
        if execution.status is WorkflowExecutionStatus.TIMED_OUT
        else None
    )
    if memo is not None:  # None: a public input that timed out before it was resolved
        request = JobRequest.model_validate(memo)
        deadline_passed = (execution.close_time or datetime.now(UTC)) >= request.deadline_at
    return closed_outside(execution.status, deadline_passed=deadline_passed)


async def count_running(client: Client, tenant: str) -> int:
    """How many of the tenant's jobs are running, in one visibility count (eventually consistent: a job started
    a moment ago may not be counted yet)."""
    if not SAFE_QUERY_VALUE.fullmatch(tenant):
        raise ValueError("a tenant name may only hold letters, digits and . _ @ -")
    query = f'WorkflowType = "{WORKFLOW_TYPE}" AND ExecutionStatus = "Running" AND {sa.TENANT.name} = "{tenant}"'
    return (await client.count_workflows(query)).count


async def list_jobs(
    client: Client,
    *,
    state: JobState | None = None,
    tenant: str | None = None,
    older_than: timedelta | None = None,
    running_only: bool = False,
    closed_within: timedelta | None = None,
    limit: int | None = 100,
) -> list[JobSummary]:
    """Jobs through Temporal visibility (newest first), filtered by the search attributes.

    A run that Temporal closed outside the job's logic (terminated, timed out, canceled before it started)
    is listed, and filtered, in the state `status` reports for it, not by its last state attribute.
    `running_only` lists running workflows only, `closed_within` only those that closed since now minus it.
    `limit=None` lists every match.
    """
    clauses = [f'WorkflowType = "{WORKFLOW_TYPE}"']
    if running_only:
        clauses.append('ExecutionStatus = "Running"')
    if closed_within is not None:
        closed_after = (datetime.now(UTC) - closed_within).isoformat()
        clauses.append(f'ExecutionStatus != "Running" AND CloseTime > "{closed_after}"')
    if tenant is not None:
        if not SAFE_QUERY_VALUE.fullmatch(tenant):
            raise ValueError("a tenant name may only hold letters, digits and . _ @ -")
        clauses.append(f'{sa.TENANT.name} = "{tenant}"')
    if state is not None:
        clauses.append(state_clause(state))
    if older_than is not None:
        clauses.append(f'StartTime < "{(datetime.now(UTC) - older_than).isoformat()}"')
    found: list[JobSummary] = []
    async for execution in client.list_workflows(" AND ".join(clauses), limit=limit):
        attributes = execution.typed_search_attributes
        listed_state = attributes.get(sa.STATE)
        if execution.status not in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED):
            listed_state = (await listed_closed_outside(execution)).state.value
            if state is not None and listed_state != state.value:
                continue  # a timed-out run matched by how it closed, read in the other state
        found.append(
            JobSummary(
                job_id=execution.id,
                state=listed_state,
                stage=attributes.get(sa.STAGE) or None,
                tenant=attributes.get(sa.TENANT),
                document_class=attributes.get(sa.DOCUMENT_CLASS),
                started_at=execution.start_time,
            )
        )
    return found


def status_from_visibility(job_id: str, memo: Any, description: Any) -> JobStatus:
    """A status rebuilt from the request memo and search attributes, when no worker can answer a query.

    It carries no transitions: their times are only known to the workflow. A job started with the public input
    has its request memo once `resolve` has run; before that (`memo` None) only what visibility knows is there.
    """
    attributes = description.typed_search_attributes
    state = parse_state(attributes.get(sa.STATE) or JobState.QUEUED.value)
    stage_name = attributes.get(sa.STAGE)
    stage = Stage(stage_name) if stage_name else None
    if memo is None:
        started = description.start_time
        return JobStatus(
            job_id=job_id,
            tenant=attributes.get(sa.TENANT) or "",
            document_class=attributes.get(sa.DOCUMENT_CLASS) or "",
            policy_version="",
            watermark_mode=WatermarkMode.STRUCTURE,
            state=state,
            stage=stage,
            input_sha256="",
            accepted_at=started,
            deadline_at=started,
        )
    request = JobRequest.model_validate(memo)
    return JobStatus(
        job_id=job_id,
        tenant=request.tenant,
        document_class=request.document_class,
        policy_version=request.policy_version,
        watermark_mode=request.policy.watermark.mode,
        state=state,
        stage=stage,
        input_sha256=request.source.sha256,
        page_count=request.page_count,
        accepted_at=request.accepted_at,
        deadline_at=request.deadline_at,
    )
