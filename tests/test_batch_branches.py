"""The real `DocumentBatchWorkflow` against activity doubles on the session's dev server: a cancel request that
meets a start of documents still cancels every document that start began (none is left running unknown to
the batch), with no wait on a machine being slow: the start double holds until the test releases it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from docjobs.domain.batching import (
    AwaitJobs,
    BatchInput,
    BatchRequest,
    BatchState,
    BatchStatus,
    EndedJob,
    RecordOutcomes,
    RunningJob,
    StartDocuments,
)
from docjobs.domain.models import BlobRef
from docjobs.domain.policy import Policy, WatermarkPolicy
from docjobs.domain.states import JobState
from docjobs.temporal.client import connect
from tests.conftest import Env
from workflows.batch_job import DocumentBatchWorkflow

POLICY = Policy(name="batch-branches", watermark=WatermarkPolicy(text="BATCH"))
CANCEL_REQUESTED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
TASK_COMPLETED = EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
MANIFEST = BlobRef(key="batches/" + "c" * 64, sha256="c" * 64, size=1)  # the doubles never open it


@dataclass
class BatchDoubles:
    """The batch's activities: `start` holds until `release` is set; cancels and waits are recorded."""

    release: asyncio.Event = field(default_factory=asyncio.Event)
    starting: asyncio.Event = field(default_factory=asyncio.Event)
    canceled: list[str] = field(default_factory=list)

    @activity.defn(name="start_batch_documents")
    async def start(self, request: StartDocuments) -> list[RunningJob]:
        self.starting.set()
        while not self.release.is_set():  # a start runs to its end, whatever the batch is told meanwhile
            await asyncio.sleep(0.05)
        batch = request.batch
        indexes = range(request.first, request.first + request.count)
        return [RunningJob(index=index, job_id=f"{batch.batch_id}.{index}") for index in indexes]

    @activity.defn(name="cancel_batch_jobs")
    async def cancel(self, job_ids: list[str]) -> int:
        self.canceled.extend(job_ids)
        return len(job_ids)

    @activity.defn(name="await_batch_jobs")
    async def wait(self, request: AwaitJobs) -> list[EndedJob]:
        ended = [job_id for job_id in request.job_ids if job_id in self.canceled]
        return [EndedJob(job_id=job_id, state=JobState.CANCELED) for job_id in ended]

    @activity.defn(name="record_batch_outcomes")
    async def record(self, request: RecordOutcomes) -> BlobRef:
        return BlobRef(key=f"batches/{request.run}", sha256="d" * 64, size=1)


@pytest.fixture
async def batch_worker(env: Env) -> AsyncIterator[tuple[Client, str, BatchDoubles]]:
    client = await connect(env.settings())
    queue = f"batch-branches-{uuid.uuid4().hex[:8]}"
    doubles = BatchDoubles()
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[DocumentBatchWorkflow],
        activities=[doubles.start, doubles.cancel, doubles.wait, doubles.record],
    )
    async with worker:
        yield client, queue, doubles
    doubles.release.set()


async def test_a_cancel_during_a_start_cancels_what_the_start_began(
    batch_worker: tuple[Client, str, BatchDoubles],
) -> None:
    client, queue, doubles = batch_worker
    batch_id = f"branches/batch-{uuid.uuid4().hex[:8]}"
    request = BatchRequest(
        batch_id=batch_id,
        tenant="branches",
        key=batch_id.partition("/")[2],
        policy=POLICY,
        manifest=MANIFEST,
        total=3,
        concurrency=3,
        deadline_seconds=600,
        job_task_queue=queue,
        accepted_at=datetime.now(UTC),
    )
    batch = BatchInput(request=request)
    handle = await client.start_workflow(DocumentBatchWorkflow.run, batch, id=batch_id, task_queue=queue)
    await doubles.starting.wait()
    await handle.cancel()  # while the start runs: before, the start was canceled and its documents forgotten
    for _ in range(200):  # the workflow has taken the cancel request (a task completed after it) ...
        kinds = [event.event_type for event in (await handle.fetch_history()).events]
        requested = kinds.index(CANCEL_REQUESTED) if CANCEL_REQUESTED in kinds else len(kinds)
        if TASK_COMPLETED in kinds[requested:]:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the batch never took the cancel request")
    doubles.release.set()  # ... and only then does the start end
    status: BatchStatus = await handle.result()
    expected = [f"{batch_id}.{index}" for index in range(3)]
    assert (status.state, status.canceled, status.running) == (BatchState.CANCELED, 3, 0), status
    assert doubles.canceled == expected
