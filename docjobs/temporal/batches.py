"""The batch client: accept many documents under one policy, start-or-get their batch, read its progress, cancel.

A batch's workflow ID is `{tenant}/batch-{key}`; without a client key, the key is a digest of tenant, manifest
and what it asks, the policy's name and overrides (the same documents in the same order asked the same are the same
batch); the client resolves no policy: the batch pins it in its first step (workflows/batch_job.py). Its
documents' jobs are ordinary jobs (workflows/batch_job.py).

A resubmission is told apart before anything is stored: the manifest (and so its digest) is computed from the
sources' references alone, and compared with the existing batch's memo. A batch's running jobs are bounded by
its `slots` (its concurrency, at most its document count), recorded in its memo: `running_slots` counts a
tenant's share from visibility, each running batch by its full slots and each other running job by one.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import secrets
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
    BatchManifest,
    BatchRequest,
    BatchState,
    BatchStatus,
)
from docjobs.domain.canonical import canonical_model
from docjobs.domain.contract import WORKFLOW_TYPE as JOB_WORKFLOW_TYPE
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.idempotency import batch_document_prefix, keyed_job_id, keyless_digest
from docjobs.domain.models import BlobRef, JobOverrides
from docjobs.store.batch_store import MANIFESTS, read_outcomes, store_manifest
from docjobs.store.storage import owned_source
from docjobs.temporal.client import QUERY_TIMEOUT, JobClient
from docjobs.temporal.job_plan import asked_of
from docjobs.temporal.settings import TemporalSettings
from docjobs.temporal.visibility import SAFE_QUERY_VALUE
from workflows import search_attributes as sa
from workflows.batch_job import WORKFLOW_TYPE, DocumentBatchWorkflow

BATCH_MEMO = "batch"
SLOTS_MEMO = "slots"  # how many of the tenant's running jobs the batch may hold at once (its reservation)
DIGEST_HEX = frozenset("0123456789abcdef")
SAFE_WORKFLOW_ID = re.compile(r"[A-Za-z0-9_.@~:/-]+")  # tenant names and keys: safe inside a quoted query value


class BatchNotFound(Exception):
    pass


def batch_task_queue(settings: TemporalSettings) -> str:
    """The batch workflows and their steps have their own queue: waiting for jobs never takes a stage's slot."""
    return f"{settings.task_queue}-batch"


def derive_batch_id(tenant: str, key: str | None, manifest_sha256: str, asked: str, id_key: bytes) -> tuple[str, str]:
    """(batch ID, batch key): `{tenant}/batch-{key}`, the key a client's or a keyed digest of what the batch is: its
    documents and what it asks (`asked_of`; `keyless_digest`: the deployment's job-ID key)."""
    if not key:
        key = "auto-" + keyless_digest(id_key, "batch", tenant, manifest_sha256, asked)
    return f"{tenant}/batch-{key}", key


@dataclass(frozen=True)
class BatchSubmitted:
    batch_id: str
    created: bool
    total: int
    conflict: bool = False  # the key names an existing batch of other documents or another policy


@dataclass(frozen=True)
class BatchPlan:
    """What a batch is, computed before anything is stored: its ID and key, its distinct sources and its manifest
    (the blob's bytes and the reference it will have once stored)."""

    batch_id: str
    key: str
    distinct: list[BlobRef]
    manifest: BlobRef
    manifest_body: bytes
    identity: dict[str, object]  # its memo: a resubmission is compared with it


def batch_slots(concurrency: int, total: int) -> int:
    """The running jobs a batch may hold at once: its concurrency, never more than its documents."""
    return max(1, min(concurrency, total))


def distinct_sources(sources: list[BlobRef]) -> list[BlobRef]:
    """Sources by digest, the first of each kept, in order (duplicates are one document: one job)."""
    return list({source.sha256: source for source in sources}.values())


class BatchClient:
    def __init__(self, jobs: JobClient) -> None:
        self.jobs = jobs

    async def accept_files(self, paths: list[Path], *, tenant: str) -> list[BlobRef]:
        """Accept every file as a single submit does (size check, hash, store, owner), in order."""
        return [await self.jobs.accept(path, tenant=tenant) for path in paths]

    async def stored_sources(self, digests: list[str], *, tenant: str) -> list[BlobRef]:
        """References to sources `tenant` stored, by sha256, each digest looked up once (duplicates are one
        document); `source.missing` if one is not there or another tenant's only (the same answer after the same
        work: a digest is no proof of owning the document)."""
        sources = []
        for digest in dict.fromkeys(digests):
            stored = await asyncio.to_thread(owned_source, self.jobs.store, digest, tenant)
            if stored is None:
                raise DocJobError(FailureCode.SOURCE_MISSING, "a listed source is not in the store")
            sources.append(BlobRef(key=stored.key, sha256=digest, size=stored.size))
        return sources

    async def submit(
        self,
        sources: list[BlobRef],
        policy: str,
        *,
        overrides: JobOverrides,
        tenant: str,
        key: str | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        deadline_seconds: int | None = None,
        documents_per_run: int = DOCUMENTS_PER_RUN,
    ) -> BatchSubmitted:
        """Start-or-get the batch of `sources` (duplicates by digest count once: they are the same job).

        The batch asks for the named `policy` with `overrides`; nothing here resolves it: the batch's first step pins
        what they resolve to (workflows/batch_job.py). A batch that exists already is answered from its memo before
        the manifest is stored (`conflict` if it is another)."""
        plan = self.plan(sources, policy, overrides, tenant=tenant, key=key)
        existing = await self.existing(plan)
        if existing is not None:
            return existing
        distinct = plan.distinct
        manifest = await asyncio.to_thread(store_manifest, self.jobs.store, distinct)
        batch_id, batch_key = plan.batch_id, plan.key
        settings = self.jobs.settings
        request = BatchRequest(
            batch_id=batch_id,
            tenant=tenant,
            key=batch_key,
            document_salt=secrets.token_hex(32),
            policy_name=policy,
            overrides=overrides,
            manifest=manifest,
            total=len(distinct),
            concurrency=concurrency,
            documents_per_run=documents_per_run,
            deadline_seconds=deadline_seconds,
            timing=settings.timing,
            job_task_queue=settings.task_queue,
            ocr_task_queue=settings.ocr_task_queue,
            notify_task_queue=settings.notify_task_queue,
            accepted_at=datetime.now(UTC),
        )
        # What the batch is, in its memo: a resubmission is compared with it, and gc keeps the manifest's sources.
        identity = {**plan.identity, "manifest": manifest.model_dump(mode="json")}
        try:
            await self.jobs.client.start_workflow(
                DocumentBatchWorkflow.run,
                BatchInput(request=request),
                id=batch_id,
                task_queue=batch_task_queue(settings),
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                search_attributes=TypedSearchAttributes([SearchAttributePair(sa.TENANT, tenant)]),
                memo={BATCH_MEMO: identity, SLOTS_MEMO: batch_slots(concurrency, len(distinct))},
            )
        except WorkflowAlreadyStartedError:  # started meanwhile (a race): compared as a resubmission is
            answer = await self.existing(plan)
            return answer or BatchSubmitted(batch_id, created=False, total=0, conflict=True)
        return BatchSubmitted(batch_id, created=True, total=len(distinct))

    def plan(
        self, sources: list[BlobRef], policy: str, overrides: JobOverrides, *, tenant: str, key: str | None
    ) -> BatchPlan:
        """The batch `submit` would start, computed from the references and what it asks alone: nothing is stored,
        nothing resolved."""
        distinct = distinct_sources(sources)
        if not distinct:
            raise DocJobError(FailureCode.INPUT_EMPTY, "a batch needs at least one document")
        body = canonical_model(BatchManifest(sources=distinct))  # exactly the bytes `store_manifest` stores
        digest = hashlib.sha256(body).hexdigest()
        manifest = BlobRef(key=f"{MANIFESTS}/{digest}.json", sha256=digest, size=len(body))
        asked = asked_of(policy, overrides)
        batch_id, batch_key = derive_batch_id(tenant, key, digest, asked, self.jobs.id_key)
        identity: dict[str, object] = {
            "manifest": manifest.model_dump(mode="json"),
            "asked": asked,  # its identity: the policy's name and the overrides, the terms among them
            "total": len(distinct),
        }
        return BatchPlan(batch_id, batch_key, distinct, manifest, body, identity)

    async def existing(self, plan: BatchPlan) -> BatchSubmitted | None:
        """The answer to a resubmission, if the plan's batch ID exists: the same batch (`created` False), or a
        `conflict` when it is another batch (other documents or policy, or not a batch); None if it does not."""
        try:
            description = await self.handle(plan.batch_id).describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                return None
            raise
        existing = await description.memo_value(BATCH_MEMO, default=None)
        same = description.workflow_type == WORKFLOW_TYPE and existing == plan.identity
        total = existing.get("total", 0) if isinstance(existing, dict) else 0
        return BatchSubmitted(plan.batch_id, created=False, total=total, conflict=not same)

    async def running_slots(self, tenant: str, *, limit: int) -> int:
        """The tenant's share in use: each running batch counts its slots (the jobs it may run at once, from its
        memo), or its running jobs if more; each other running job counts one. At the limit, the count of running
        jobs alone says so; with no running batch, it is the share.

        Visibility is eventually consistent: a start a moment ago may be missing (the API counts its own recent
        admissions until `visible` names them), and an end a moment ago may still count (a few seconds too many)."""
        if not SAFE_QUERY_VALUE.fullmatch(tenant):
            raise ValueError("a tenant name may only hold letters, digits and . _ @ -")
        client = self.jobs.client
        running = await self.jobs.count_running(tenant)
        if running >= limit:
            return running
        mine = f'ExecutionStatus = "Running" AND {sa.TENANT.name} = "{tenant}"'
        batches: dict[str, int] = {}  # document job ID prefix -> the batch's slots
        async for execution in client.list_workflows(f'WorkflowType = "{WORKFLOW_TYPE}" AND {mine}', limit=limit):
            _, _, batch_key = execution.id.partition("/batch-")
            prefix = keyed_job_id(tenant, batch_document_prefix(batch_key))
            batches[prefix] = await self._slots(execution.id, await execution.memo_value(SLOTS_MEMO, default=None))
        if not batches:
            return running
        held = dict.fromkeys(batches, 0)  # running jobs of each running batch
        others = 0
        query = f'WorkflowType = "{JOB_WORKFLOW_TYPE}" AND {mine}'
        async for execution in client.list_workflows(query, limit=limit + sum(batches.values())):
            prefix, _, digest = execution.id.rpartition(".")
            if f"{prefix}." in held and len(digest) == 16 and set(digest) <= DIGEST_HEX:
                held[f"{prefix}."] += 1
            else:
                others += 1
        return max(running, others + sum(max(slots, held[prefix]) for prefix, slots in batches.items()))

    async def visible(self, workflow_id: str) -> bool:
        """Whether visibility has the workflow (running or closed): from then on its counts include it."""
        if not SAFE_WORKFLOW_ID.fullmatch(workflow_id):
            raise ValueError("not a docjobs workflow ID")
        return (await self.jobs.client.count_workflows(f'WorkflowId = "{workflow_id}"')).count > 0

    async def _slots(self, batch_id: str, recorded: object) -> int:
        """A running batch's slots: from its memo; a batch accepted before they were recorded, by its progress."""
        if isinstance(recorded, int) and recorded >= 1:
            return recorded
        try:
            progress = await self.handle(batch_id).query(DocumentBatchWorkflow.progress, rpc_timeout=QUERY_TIMEOUT)
        except RPCError:  # no worker to answer: its running jobs count (each by one)
            return 0
        return batch_slots(progress.concurrency, progress.total - progress.ended)

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
