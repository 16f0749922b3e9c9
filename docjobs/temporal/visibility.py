"""What Temporal visibility knows of jobs: listings filtered by the search attributes, and a job's status rebuilt
from its start memo when no worker can answer a query."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client

from docjobs.models import JobRequest, JobStatus, JobSummary
from docjobs.states import JobState, Stage, parse_state
from workflows import search_attributes as sa
from workflows.document_job import WORKFLOW_TYPE

SAFE_QUERY_VALUE = re.compile(r"[A-Za-z0-9_.@-]+")  # what may be put in a visibility query unquoted-safe


async def list_jobs(
    client: Client,
    *,
    state: JobState | None = None,
    tenant: str | None = None,
    older_than: timedelta | None = None,
    running_only: bool = False,
    limit: int | None = 100,
) -> list[JobSummary]:
    """Jobs through Temporal visibility (newest first), filtered by the search attributes.

    `running_only` leaves out workflows that ended outside the job's logic (terminated, timed out): their
    state attribute still says where they were. `limit=None` lists every match.
    """
    clauses = [f'WorkflowType = "{WORKFLOW_TYPE}"']
    if running_only:
        clauses.append('ExecutionStatus = "Running"')
    if tenant is not None:
        if not SAFE_QUERY_VALUE.fullmatch(tenant):
            raise ValueError("a tenant name may only hold letters, digits and . _ @ -")
        clauses.append(f'{sa.TENANT.name} = "{tenant}"')
    if state is not None:
        clauses.append(f'{sa.STATE.name} = "{state.value}"')
    if older_than is not None:
        clauses.append(f'StartTime < "{(datetime.now(UTC) - older_than).isoformat()}"')
    found: list[JobSummary] = []
    async for execution in client.list_workflows(" AND ".join(clauses), limit=limit):
        attributes = execution.typed_search_attributes
        found.append(
            JobSummary(
                job_id=execution.id,
                state=attributes.get(sa.STATE),
                stage=attributes.get(sa.STAGE) or None,
                tenant=attributes.get(sa.TENANT),
                document_class=attributes.get(sa.DOCUMENT_CLASS),
                started_at=execution.start_time,
            )
        )
    return found


def status_from_visibility(job_id: str, memo: Any, description: Any) -> JobStatus:
    """A status rebuilt from the start memo and search attributes, when no worker can answer a query.

    It carries no transitions: their times are only known to the workflow.
    """
    request = JobRequest.model_validate(memo)
    attributes = description.typed_search_attributes
    state = parse_state(attributes.get(sa.STATE) or JobState.QUEUED.value)
    stage_name = attributes.get(sa.STAGE)
    stage = Stage(stage_name) if stage_name else None
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
        deadline_at=request.accepted_at + timedelta(seconds=request.deadline_seconds),
    )
