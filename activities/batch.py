"""The batch's steps: pin its policy, start its documents' jobs, wait for their endings, cancel them, store outcomes.

Thin adapters around the job client that docjobs/worker.py hands in (the same start-or-get as a single submit). They
run on the batch's own task queue, as async activities: waiting for a job takes no stage thread or slot.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from temporalio import activity

from activities.declared import implements
from activities.lease import typed_failures
from activities.resolve import resolved_policy
from docjobs.domain import stage_specs as specs
from docjobs.domain.batching import (
    AwaitJobs,
    BatchPin,
    BatchRequest,
    EndedJob,
    PinBatchPolicy,
    RecordOutcomes,
    RunningJob,
    StartDocuments,
    document_input,
)
from docjobs.domain.contract import job_summary
from docjobs.domain.idempotency import batch_document_key, keyed_job_id
from docjobs.domain.job_status import JobStatus
from docjobs.domain.models import BlobRef, DocumentJobInput, InputKind, JobOverrides, SourceRef
from docjobs.settings.config import Settings
from docjobs.settings.policies import PolicyBook, overrides_between
from docjobs.store.batch_store import read_manifest, store_outcomes
from docjobs.store.storage import BlobStore

HEARTBEAT_SECONDS = 5.0
MANIFESTS_KEPT = 8  # parsed manifests a worker keeps, by digest (several batches may run at once)


class DocumentJobs(Protocol):
    """What the batch needs of the job client (docjobs/temporal/client.py: JobClient)."""

    @property
    def store(self) -> BlobStore: ...

    def source_ref(self, stored: BlobRef, kind: InputKind = InputKind.DOCUMENT) -> SourceRef: ...

    async def start_input(
        self, job_id: str, job: DocumentJobInput, *, summary: str | None = None, task_queue: str | None = None
    ) -> bool: ...

    async def ended(self, job_id: str) -> JobStatus: ...

    async def cancel_running(self, job_id: str) -> None: ...


class BatchActivities:
    def __init__(self, jobs: DocumentJobs, settings: Settings) -> None:
        self._jobs = jobs
        self._settings = settings
        self._manifests: dict[str, list[BlobRef]] = {}

    @implements(specs.PIN_BATCH_POLICY)
    async def pin_policy(self, pin: PinBatchPolicy) -> BatchPin:
        """The batch's first step: what it asks resolved by this worker's policy file, as a job's `resolve` does (the
        tenant must be allowed it); the history keeps the pin, which every document is then held to."""
        with typed_failures("pin_batch_policy"):
            policy = await asyncio.to_thread(
                resolved_policy, self._settings, pin.tenant, pin.policy_name, pin.overrides
            )
            return BatchPin.of(policy, pin.deadline_seconds)

    @implements(specs.START_DOCUMENTS)
    async def start_documents(self, step: StartDocuments) -> list[RunningJob]:
        """Start-or-get the jobs of manifest entries `first` .. `first + count - 1` (a retry finds them started)."""
        batch = step.batch
        pin = step.pin
        if pin is None:  # scheduled by older code: the policy its client resolved is the pin
            assert batch.policy is not None and batch.deadline_seconds is not None, "a batch from an old history"
            pin = BatchPin.of(batch.policy, batch.deadline_seconds)
        overrides = batch.overrides if batch.overrides is not None else await asyncio.to_thread(self._asked, batch)
        sources = await self._sources(batch.manifest)
        started = []
        for index in range(step.first, min(step.first + step.count, len(sources))):
            source = sources[index]
            job_id = keyed_job_id(batch.tenant, batch_document_key(batch.key, source.sha256, batch.document_salt))
            job = document_input(pin, batch.tenant, overrides, self._jobs.source_ref(source))
            summary = job_summary(pin.name, pin.watermark_mode)
            await self._jobs.start_input(job_id, job, summary=summary, task_queue=batch.job_task_queue)
            started.append(RunningJob(index=index, job_id=job_id))
        return started

    def _asked(self, batch: BatchRequest) -> JobOverrides:
        """What a batch from an old history, which records only the policy its client resolved, asks its documents
        for: the overrides that make that policy of its named one in this worker's file (none, if the file no
        longer names it: its documents then fail `policy.unknown`). The pin holds each document to the policy
        itself, so one that overrides cannot remake fails `policy.changed`: no document runs another policy."""
        assert batch.policy is not None, "a batch from an old history"
        named = PolicyBook.load(self._settings.policy_file).policies.get(batch.policy.name)
        return overrides_between(named, batch.policy) if named is not None else JobOverrides()

    @implements(specs.AWAIT_JOBS)
    async def await_jobs(self, wait: AwaitJobs) -> list[EndedJob]:
        """The jobs that have ended, as soon as at least one has (or none, after `wait_seconds`)."""
        loop = asyncio.get_running_loop()
        waits = {asyncio.ensure_future(self._jobs.ended(job_id)): job_id for job_id in wait.job_ids}
        deadline = loop.time() + wait.wait_seconds
        try:
            while (remaining := deadline - loop.time()) > 0:
                done, _ = await asyncio.wait(
                    waits, timeout=min(HEARTBEAT_SECONDS, remaining), return_when=asyncio.FIRST_COMPLETED
                )
                if done:
                    break
                activity.heartbeat()
            ended = []
            for task, job_id in waits.items():
                if task.done():
                    status = task.result()  # a failed read is retried with the whole activity
                    ended.append(EndedJob(job_id=job_id, state=status.state, failure_code=status.failure_code))
            return ended
        finally:
            for task in waits:
                task.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    @implements(specs.CANCEL_JOBS)
    async def cancel_jobs(self, job_ids: list[str]) -> int:
        """Request cancellation of the batch's running jobs (each ends `canceled`, reason `requested`)."""
        for job_id in job_ids:
            await self._jobs.cancel_running(job_id)
        return len(job_ids)

    @implements(specs.RECORD_OUTCOMES)
    async def record_outcomes(self, record: RecordOutcomes) -> BlobRef:
        """Store a run's outcomes, so the next run (and the history) does not carry them."""
        return await asyncio.to_thread(store_outcomes, self._jobs.store, record)

    async def _sources(self, manifest: BlobRef) -> list[BlobRef]:
        if manifest.sha256 not in self._manifests:
            sources = await asyncio.to_thread(read_manifest, self._jobs.store, manifest)
            while len(self._manifests) >= MANIFESTS_KEPT:
                self._manifests.pop(next(iter(self._manifests)))
            self._manifests[manifest.sha256] = sources
        return self._manifests[manifest.sha256]
