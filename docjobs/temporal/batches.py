"""The batch client: accept many documents under one policy, start-or-get their batch, read its progress, cancel.

A batch's workflow ID is `{tenant}/batch-{key}`; without a client key, the key is a digest of tenant, manifest
and policy version (the same documents in the same order under the same policy are the same batch). Its
documents' jobs are ordinary jobs (workflows/batch_job.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from docjobs.domain.batching import (
    DEFAULT_CONCURRENCY,
    DOCUMENTS_PER_RUN,
    BatchInput,
    BatchRequest,
    BatchState,
    BatchStatus,
)
from docjobs.domain.errors import DocJobError
from docjobs.domain.models import BlobRef, Policy
from docjobs.store.batch_store import read_outcomes, store_manifest
from docjobs.store.storage import owned_source
from docjobs.temporal.client import QUERY_TIMEOUT, JobClient
from docjobs.temporal.settings import TemporalSettings
from workflows import search_attributes as sa
from workflows.batch_job import WORKFLOW_TYPE, DocumentBatchWorkflow

BATCH_MEMO = "batch"


class BatchNotFound(Exception):
    pass


def batch_task_queue(settings: TemporalSettings) -> str:
    """The batch workflows and their steps have their own queue: waiting for jobs never takes a stage's slot."""
    return f"{settings.task_queue}-batch"


def derive_batch_id(tenant: str, key: str | None, manifest_sha256: str, policy_version: str) -> tuple[str, str]:
    """(batch ID, batch key): `{tenant}/batch-{key}`, the key a client's or a digest of what the batch is."""
    if not key:
        key = "auto-" + hashlib.sha256(f"{tenant}\0{manifest_sha256}\0{policy_version}".encode()).hexdigest()[:32]
    return f"{tenant}/batch-{key}", key


@dataclass(frozen=True)
class BatchSubmitted:
    batch_id: str
    created: bool
    total: int
    conflict: bool = False  # the key names an existing batch of other documents or another policy


class BatchClient:
    def __init__(self, jobs: JobClient) -> None:
        self.jobs = jobs

    async def accept_files(self, paths: list[Path], *, tenant: str) -> list[BlobRef]:
        """Accept every file as a single submit does (size check, hash, store, owner), in order."""
        return [await self.jobs.accept(path, tenant=tenant) for path in paths]

    async def stored_sources(self, digests: list[str], *, tenant: str) -> list[BlobRef]:
        """References to sources `tenant` stored, by sha256; `source.missing` if one is not there or another
        tenant's only (the same answer after the same work: a digest is no proof of owning the document)."""
        sources = []
        for digest in digests:
            stored = await asyncio.to_thread(owned_source, self.jobs.store, digest, tenant)
            if stored is None:
                raise DocJobError("source.missing", "a listed source is not in the store")
            sources.append(BlobRef(key=stored.key, sha256=digest, size=stored.size))
        return sources

    async def submit(
        self,
        sources: list[BlobRef],
        policy: Policy,
        *,
        tenant: str,
        key: str | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        deadline_seconds: int | None = None,
        documents_per_run: int = DOCUMENTS_PER_RUN,
    ) -> BatchSubmitted:
        """Start-or-get the batch of `sources` (duplicates by digest count once: they are the same job)."""
        distinct = list({source.sha256: source for source in sources}.values())
        if not distinct:
            raise DocJobError("input.empty", "a batch needs at least one document")
        manifest = await asyncio.to_thread(store_manifest, self.jobs.store, distinct)
        batch_id, batch_key = derive_batch_id(tenant, key, manifest.sha256, policy.version)
        settings = self.jobs.settings
        request = BatchRequest(
            batch_id=batch_id,
            tenant=tenant,
            key=batch_key,
            policy=policy,
            manifest=manifest,
            total=len(distinct),
            concurrency=concurrency,
            documents_per_run=documents_per_run,
            deadline_seconds=deadline_seconds or policy.deadline_seconds,
            timing=settings.timing,
            job_task_queue=settings.task_queue,
            ocr_task_queue=settings.ocr_task_queue,
            ocr_chunk_task_queue=settings.ocr_chunk_task_queue,
            notify_task_queue=settings.notify_task_queue,
            accepted_at=datetime.now(UTC),
        )
        # What the batch is, in its memo: a resubmission is compared with it, and gc keeps the manifest's sources.
        identity = {
            "manifest": manifest.model_dump(mode="json"),
            "policy_version": policy.version,
            "total": len(distinct),
        }
        try:
            await self.jobs.client.start_workflow(
                DocumentBatchWorkflow.run,
                BatchInput(request=request),
                id=batch_id,
                task_queue=batch_task_queue(settings),
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                search_attributes=TypedSearchAttributes([SearchAttributePair(sa.TENANT, tenant)]),
                memo={BATCH_MEMO: identity},
            )
        except WorkflowAlreadyStartedError:
            description = await self.handle(batch_id).describe()
            existing = await description.memo_value(BATCH_MEMO, default=None)
            same = description.workflow_type == WORKFLOW_TYPE and existing == identity
            total = existing.get("total", 0) if isinstance(existing, dict) else 0
            return BatchSubmitted(batch_id, created=False, total=total, conflict=not same)
        return BatchSubmitted(batch_id, created=True, total=len(distinct))

    def handle(self, batch_id: str) -> WorkflowHandle[DocumentBatchWorkflow, BatchStatus]:
        return self.jobs.client.get_workflow_handle_for(DocumentBatchWorkflow.run, batch_id)

    async def status(self, batch_id: str, *, outcomes: bool = True) -> BatchStatus:
        """Progress (the live query), or the result once the batch has ended; with `outcomes`, every ended
        job's outcome by manifest index (the earlier runs' read from the store)."""
        handle = self.handle(batch_id)
        try:
            description = await handle.describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                raise BatchNotFound(batch_id) from None
            raise
        if description.workflow_type != WORKFLOW_TYPE:
            raise BatchNotFound(batch_id)
        if description.status is WorkflowExecutionStatus.COMPLETED:
            status = await handle.result()
        else:
            status = await handle.query(DocumentBatchWorkflow.progress, rpc_timeout=QUERY_TIMEOUT)
            if description.status is not WorkflowExecutionStatus.RUNNING:
                status.state = BatchState.TERMINATED
        if outcomes:
            earlier = await asyncio.to_thread(read_outcomes, self.jobs.store, status.segments)
            status.outcomes = sorted([*earlier, *status.outcomes], key=lambda outcome: outcome.index)
        return status

    async def wait(
        self,
        batch_id: str,
        *,
        timeout: float,
        on_progress: Callable[[BatchStatus], None] | None = None,
        interval: float = 1.0,
    ) -> BatchStatus:
        """Poll the progress every `interval` seconds until the batch has ended or `timeout` passed; the last
        status seen (with every outcome once ended). The batch goes on if the caller stops waiting."""
        deadline = time.monotonic() + timeout
        while True:
            status = await self.status(batch_id, outcomes=False)
            if on_progress is not None:
                on_progress(status)
            if status.state is not BatchState.RUNNING:
                return await self.status(batch_id)
            if time.monotonic() + interval > deadline:
                return status
            await asyncio.sleep(interval)

    async def cancel(self, batch_id: str) -> BatchStatus:
        """Request cancellation: running jobs are canceled, no more start. Returns the progress at the request."""
        status = await self.status(batch_id, outcomes=False)
        await self.handle(batch_id).cancel()
        return status
