"""An archive: one workflow per released B-LTA document, renewing its timestamps before they lapse, forever.

It sleeps on a durable timer until its renewal is due (`ArchiveState.renew_by`, its newest timestamp's TSA
certificate's expiry less the policy's `archive.renew_before_days`, spread within that day by the archive's ID),
renews (`renew_archive`: a new version, the old one its exact prefix), then continues as new with the new state, so
its history stays a few events long whatever its age. The `renew` signal renews at once. A renewal that fails is
tried again by Temporal with backoff (a TSA or a responder down for a day is a transient failure); one that fails
for good (a code that is not retried) is recorded (`last_problem`) and tried again a day later: an archive never
gives up on itself. It is started by its job with the ABANDON parent-close policy, so it outlives the job and the
retention of closed jobs; its versions are kept under `archives/` in the blob store, which the retention of jobs
never sweeps. The Web UI lists archives by type (`Archive`) with their next renewal (`DocjobsNextRenewal`).
"""

from __future__ import annotations

from contextlib import suppress
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from docjobs.domain.archive import (
        ARCHIVE_WORKFLOW,
        RENEW_SIGNAL,
        STATUS_QUERY,
        ArchiveState,
        ArchiveStatus,
        OpenArchiveInput,
        RenewInput,
    )
    from docjobs.domain.models import BlobRef, JobRequest
    from workflows import search_attributes as sa
    from workflows import stages
    from workflows.endings import NON_RETRYABLE_CODES, failure_of

RENEW_TIMEOUT = timedelta(minutes=10)  # one attempt: two TSA calls, a few OCSP and CRL fetches, one update
AFTER_A_FAILURE = timedelta(days=1)  # a renewal that failed for good is tried again this much later


@workflow.defn(name=ARCHIVE_WORKFLOW)
class ArchiveWorkflow:
    def __init__(self) -> None:
        self._state: ArchiveState | None = None
        self._asked = False
        self._renewing = False
        self._problem: str | None = None

    @workflow.run
    async def run(self, state: ArchiveState) -> None:
        self._state = state
        workflow.upsert_search_attributes(
            [sa.TENANT.value_set(state.tenant), sa.NEXT_RENEWAL.value_set(state.renew_by)]
        )
        while True:
            wait = max((state.renew_by - workflow.now()).total_seconds(), 0.0)
            if wait > 0 and not self._asked:
                with suppress(TimeoutError):  # due: the durable timer fired
                    await workflow.wait_condition(lambda: self._asked, timeout=wait)
            self._asked, self._renewing = False, True
            try:
                step = await workflow.execute_activity(
                    stages.renew_archive,
                    RenewInput(
                        job_id=state.job_id,
                        archive_id=state.archive_id,
                        tenant=state.tenant,
                        current=state.versions[-1],
                        renew_before_days=state.renew_before_days,
                    ),
                    task_queue=state.task_queue,
                    start_to_close_timeout=RENEW_TIMEOUT,
                    heartbeat_timeout=timedelta(seconds=state.timing.lease_seconds),
                    retry_policy=RetryPolicy(
                        maximum_interval=timedelta(hours=1), non_retryable_error_types=NON_RETRYABLE_CODES
                    ),
                    summary=f"renew: version {state.versions[-1].number + 1}",
                )
            except ActivityError as error:
                self._renewing, (self._problem, _, _) = False, failure_of(error)
                state = state.model_copy(update={"renew_by": workflow.now() + AFTER_A_FAILURE})
                self._state = state
                workflow.upsert_search_attributes([sa.NEXT_RENEWAL.value_set(state.renew_by)])
                continue
            renewed = state.model_copy(update={"versions": [*state.versions, step.version], "renew_by": step.renew_by})
            workflow.continue_as_new(renewed)

    @workflow.signal(name=RENEW_SIGNAL)
    def renew(self) -> None:
        """Renew now, whatever is due (`starter.py archive renew`)."""
        self._asked = True

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> ArchiveStatus:
        assert self._state is not None
        return ArchiveStatus.model_validate(  # the state's fields, and what is happening to it
            {**dict(self._state), "renewing": self._renewing, "last_problem": self._problem}
        )


async def open_archive(request: JobRequest, token: BlobRef, artifact: BlobRef) -> None:
    """From a B-LTA job's workflow: its release's archive, the first version copied out of the run
    (`open_archive`), then the archive's own workflow, which outlives the job (ABANDON) and renews it. Its ID names
    the job's run: a key reused after the job's retention makes a new release, with an archive of its own."""
    archive_id = f"archive/{request.job_id}/{workflow.info().run_id}"
    timing, renew_before = request.timing, request.policy.archive.renew_before_days
    opened = await workflow.execute_activity(
        stages.open_archive,
        OpenArchiveInput(
            job_id=request.job_id,
            archive_id=archive_id,
            tenant=request.tenant,
            artifact=artifact,
            token=token,
            renew_before_days=renew_before,
        ),
        start_to_close_timeout=timedelta(seconds=timing.base_seconds),
        heartbeat_timeout=timedelta(seconds=timing.lease_seconds),
        retry_policy=RetryPolicy(maximum_attempts=timing.max_attempts, non_retryable_error_types=NON_RETRYABLE_CODES),
        summary="open the archive",
    )
    state = ArchiveState(
        archive_id=archive_id,
        job_id=request.job_id,
        tenant=request.tenant,
        versions=[opened.version],
        renew_by=opened.renew_by,
        renew_before_days=renew_before,
        task_queue=request.archive_task_queue,
        timing=timing,
    )
    with suppress(WorkflowAlreadyStartedError):  # this run opened it before (a replay after a reset)
        await workflow.start_child_workflow(
            ArchiveWorkflow.run, state, id=archive_id, parent_close_policy=ParentClosePolicy.ABANDON
        )
