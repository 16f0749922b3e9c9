"""The document batch: one workflow that starts each document of a manifest as its own `DocumentJob`.

Each document is a plain workflow start made by an activity (`start_batch_documents`), with the same request,
memo, search attributes, ID policy and timeout as a single submit, and its own workflow ID
`{tenant}/{batch key}.{digest}`: status, fetch, evidence, cancel, audit and gc treat it as any job. It is no
child workflow, so a batch run can continue as new while its jobs run (they are carried over by ID), and the
batch's history holds only the start and wait activities, never the jobs' events or results.

Its first step pins its policy (`pin_batch_policy`): what it asks, the policy's name and overrides, resolved once on a
worker, as a job's `resolve` does, and kept in history; every document is held to that pin. A batch whose policy
cannot be pinned (unknown, forbidden to its tenant, invalid overrides) ends `failed` with the code, no job started.
A batch from an old history carries the policy its client resolved: that is its pin, and it takes no such step.

At most `concurrency` jobs run at once: a job is started only after one has ended. `await_batch_jobs` waits
(long polls, heartbeating) until at least one running job has ended. After `documents_per_run` starts, or when
Temporal suggests it, the run stores its outcomes in a blob and continues as new with the counts, the running
jobs and the next index; the manifest stays in the store. Cancelling the batch cancels its running jobs,
waits until they have ended, and starts no more.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from docjobs.domain.batching import (
        AwaitJobs,
        BatchInput,
        BatchPin,
        BatchProgress,
        BatchRequest,
        BatchState,
        BatchStatus,
        JobOutcome,
        PinBatchPolicy,
        RecordOutcomes,
        RunningJob,
        StartDocuments,
    )
    from docjobs.domain.errors import FAILURE_CODES
    from docjobs.domain.models import JobOverrides
    from docjobs.domain.states import JobState
    from workflows import stages

WORKFLOW_TYPE = "DocumentBatch"
WAIT_SECONDS = 60.0  # a wait activity returns after this even if no job ended (the loop then waits again)
WAIT_HEARTBEAT_TIMEOUT = timedelta(seconds=30)  # a batch worker that died hands the wait over this fast
STEP_TIMEOUT = timedelta(minutes=2)
# Starting and waiting are idempotent (start-or-get; waiting changes nothing): retried until they succeed.
PATIENT = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
# Asked only when a cancel request meets a start of documents: runs recorded before it replay as they ran.
START_FINISHES_AT_CANCEL = "batch-start-finishes-at-cancel"


@workflow.defn(name=WORKFLOW_TYPE)
class DocumentBatchWorkflow:
    @workflow.init
    def __init__(self, batch: BatchInput) -> None:
        self._request = batch.request
        self._progress = batch.progress or BatchProgress()
        self._outcomes: list[JobOutcome] = []  # ended in this run and not yet stored in a segment
        self._state = BatchState.RUNNING
        self._finished_at: datetime | None = None
        self._failure_code: str | None = None
        request = batch.request
        # An old history's batch carries the policy its client resolved: that is its pin.
        old_pin = BatchPin.of(request.policy, request.deadline_seconds) if request.policy is not None else None
        self._pin: BatchPin | None = batch.pin or old_pin

    @workflow.query
    def progress(self) -> BatchStatus:
        """Counts, the outcomes of this run and the references to the earlier runs' outcomes."""
        request, progress = self._request, self._progress
        return BatchStatus(
            batch_id=request.batch_id,
            tenant=request.tenant,
            policy_version=self._pin.version if self._pin else None,
            state=self._state,
            total=request.total,
            succeeded=progress.succeeded,
            failed=progress.failed,
            quarantined=progress.quarantined,
            canceled=progress.canceled,
            running=len(progress.running),
            concurrency=request.concurrency,
            runs=progress.runs,
            accepted_at=request.accepted_at,
            finished_at=self._finished_at,
            failure_code=self._failure_code,
            outcomes=sorted(self._outcomes, key=lambda outcome: outcome.index),
            segments=list(progress.segments),
        )

    @workflow.run
    async def run(self, batch: BatchInput) -> BatchStatus:
        canceled = False
        try:
            if self._pin is None and not await self._pinned():
                self._state, self._finished_at = BatchState.FAILED, workflow.now()
                return self.progress()
            await self._drive()
        except asyncio.CancelledError:
            canceled = True
        except ActivityError as error:  # the step in flight when the cancel request came was canceled with it
            if not isinstance(error.cause, CancelledError):
                raise
            canceled = True
        # Once the batch stops, a (further) cancel request must not cut short what its jobs need.
        settle = asyncio.create_task(self._settle(canceled))
        try:
            await asyncio.shield(settle)
        except asyncio.CancelledError:
            canceled = True
            await settle
            if self._progress.running:  # it came while this run was handing over: stop the running jobs too
                await self._settle(canceled=True)
        progress = self._progress
        if not canceled and (progress.running or progress.next_index < self._request.total):
            progress.runs += 1
            workflow.continue_as_new(BatchInput(request=self._request, progress=progress, pin=self._pin))
        self._state = BatchState.CANCELED if canceled else BatchState.COMPLETED
        self._finished_at = workflow.now()
        return self.progress()

    async def _pinned(self) -> bool:
        """Pin the policy the batch asks for (its first step); False, with the code kept, when it cannot be: the
        step's deterministic failures (policy.*) are not retried, the rest are until it succeeds."""
        request = self._request
        ask = PinBatchPolicy(
            tenant=request.tenant,
            policy_name=request.policy_name,
            overrides=request.overrides or JobOverrides(),
            deadline_seconds=request.deadline_seconds,
        )
        try:
            self._pin = await workflow.execute_activity(
                stages.pin_batch_policy, ask, start_to_close_timeout=STEP_TIMEOUT, retry_policy=PATIENT
            )
        except ActivityError as error:
            cause = error.cause
            if not (isinstance(cause, ApplicationError) and cause.non_retryable and cause.type in FAILURE_CODES):
                raise
            self._failure_code = cause.type
            return False
        return True

    async def _drive(self) -> None:
        """Start documents while there is room, wait for endings; return when all ended or it is time to hand
        over to a new run."""
        request, progress = self._request, self._progress
        started_here = 0
        while True:
            left = request.total - progress.next_index
            handover = left > 0 and started_here >= request.documents_per_run
            if handover or workflow.info().is_continue_as_new_suggested():
                return
            room = request.concurrency - len(progress.running)
            if room > 0 and left > 0:
                count = min(room, left, request.documents_per_run - started_here)
                started = await self._start(request, progress.next_index, count)
                progress.running.extend(started)
                progress.next_index += count
                started_here += count
                continue
            if not progress.running:
                return
            await self._await_endings()

    async def _start(self, request: BatchRequest, first: int, count: int) -> list[RunningJob]:
        """Start the next `count` documents. A cancel request that comes meanwhile (or with the result, in the
        same workflow task) lets the start finish: the documents it started are then running jobs of the batch,
        which its cancellation cancels. Cancelling the start instead left them running, unknown to the batch."""
        start = workflow.start_activity(
            stages.start_documents,
            StartDocuments(batch=request, pin=self._pin, first=first, count=count),
            start_to_close_timeout=STEP_TIMEOUT,
            retry_policy=PATIENT,
        )
        try:
            started: list[RunningJob] = await asyncio.shield(start)
        except asyncio.CancelledError:
            if not workflow.patched(START_FINISHES_AT_CANCEL):  # a run from before: as it was recorded
                start.cancel()
                raise
            self._progress.running.extend(await start)
            self._progress.next_index += count
            raise
        return started

    async def _await_endings(self) -> None:
        ended = await workflow.execute_activity(
            stages.await_jobs,
            AwaitJobs(job_ids=[job.job_id for job in self._progress.running], wait_seconds=WAIT_SECONDS),
            start_to_close_timeout=timedelta(seconds=WAIT_SECONDS) + STEP_TIMEOUT,
            heartbeat_timeout=WAIT_HEARTBEAT_TIMEOUT,
            retry_policy=PATIENT,
        )
        progress = self._progress
        by_id = {job.job_id: job for job in progress.running}
        for end in ended:
            job = by_id.pop(end.job_id, None)
            if job is None:
                continue
            self._outcomes.append(
                JobOutcome(index=job.index, job_id=job.job_id, state=end.state, failure_code=end.failure_code)
            )
            if end.state is JobState.SUCCEEDED:
                progress.succeeded += 1
            elif end.state is JobState.QUARANTINED:
                progress.quarantined += 1
            elif end.state is JobState.CANCELED:
                progress.canceled += 1
            else:
                progress.failed += 1
        progress.running = [job for job in progress.running if job.job_id in by_id]

    async def _settle(self, canceled: bool) -> None:
        """Cancel the running jobs and wait for their ends (when canceled); store this run's outcomes."""
        if canceled and self._progress.running:
            await workflow.execute_activity(
                stages.cancel_jobs,
                [job.job_id for job in self._progress.running],
                start_to_close_timeout=STEP_TIMEOUT,
                retry_policy=PATIENT,
            )
            while self._progress.running:
                await self._await_endings()
        if self._outcomes:
            segment = await workflow.execute_activity(
                stages.record_outcomes,
                RecordOutcomes(batch_id=self._request.batch_id, run=self._progress.runs, outcomes=self._outcomes),
                start_to_close_timeout=STEP_TIMEOUT,
                retry_policy=PATIENT,
            )
            self._progress.segments.append(segment)
            self._outcomes = []
