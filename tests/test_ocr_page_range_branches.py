"""The real `DocumentJobWorkflow`'s OCR in page ranges, against test doubles (tests/test_workflow_branches.py's):
at most `max_parallel` ranges at once, in page order, then the merge; a range that fails for good cancels the
ones running and fails the job with its code; a document of one range keeps the single `ocr` activity; ranges
run on a queue of their own, so a short document's `ocr` never waits behind a long one's."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from docjobs.domain.models import BlobRef, JobRequest, OcrInput, OcrOutput, RenderInput, RenderOutput
from docjobs.domain.ocr_page_ranges import OcrMergeInput, OcrMergeOutput, OcrPageRangeInput, OcrPageRangeOutput
from docjobs.domain.policy import OcrMode, OcrPolicy, Policy, WatermarkPolicy
from docjobs.domain.stage_cost import Cost
from docjobs.domain.states import JobState
from docjobs.temporal.client import JobClient, connect
from tests.conftest import Env
from tests.test_replay import replayer
from tests.test_workflow_branches import HEARTBEAT_THROTTLE, SOURCE, TIMING, Doubles, Hold, failing
from workflows.document_job import DocumentJobWorkflow

TENANT = "branches"
PAGES = 6
OCR = OcrPolicy(mode=OcrMode.SKIP, chunk_pages=2, max_parallel=2)  # ranges 1-2, 3-4, 5-6, two at once
POLICY = Policy(name="chunks", watermark=WatermarkPolicy(text="CHUNKS"), ocr=OCR, max_pages=PAGES)


def fake_blob(name: str) -> BlobRef:
    return BlobRef(key=f"workflow-branches/{name}", sha256="c" * 64, size=1)


@dataclass
class PageRangeDoubles(Doubles):
    """The doubles of tests/test_workflow_branches.py, with a render of PAGES pages and the OCR activities;
    `range_behaviour[first page]` runs before that range's double answers."""

    range_behaviour: dict[int, Callable[[], Awaitable[None]]] = field(default_factory=dict)

    @activity.defn(name="render")
    async def render(self, request: RenderInput) -> RenderOutput:
        attempt = await self._enter("render")
        return RenderOutput(staged=request.source, page_count=PAGES, input_encryption="none", attempt=attempt)

    @activity.defn(name="ocr")
    async def ocr(self, request: OcrInput) -> OcrOutput:
        attempt = await self._enter("ocr")
        return OcrOutput(staged=request.staged, text=fake_blob("text"), pages_ocred=[1], attempt=attempt)

    @activity.defn(name="ocr_chunk")
    async def ocr_chunk(self, request: OcrPageRangeInput) -> OcrPageRangeOutput:
        pages = request.pages
        self.behaviour[f"ocr_chunk {pages.name}"] = self.range_behaviour.get(pages.first, _answer)
        attempt = await self._enter(f"ocr_chunk {pages.name}")
        return OcrPageRangeOutput(
            chunk=fake_blob(pages.name),
            pages=pages,
            pages_ocred=list(range(pages.first, pages.last + 1)),
            attempt=attempt,
            cost=Cost(attempts=1, cpu_seconds=pages.pages),
        )

    @activity.defn(name="ocr_merge")
    async def ocr_merge(self, request: OcrMergeInput) -> OcrMergeOutput:
        attempt = await self._enter("ocr_merge")
        assert [chunk.pages.name for chunk in request.chunks] == ["1-2", "3-4", "5-6"]
        return OcrMergeOutput(staged=request.staged, text=fake_blob("text"), attempt=attempt)

    def activities(self) -> list[Callable[..., Awaitable[object]]]:
        return [*super().activities(), self.ocr, self.ocr_chunk, self.ocr_merge]  # its render is this class's


async def _answer() -> None:
    return None


@dataclass
class Harness:
    jobs: JobClient
    doubles: PageRangeDoubles
    started: list[str] = field(default_factory=list)
    # The queues the requests name for OCR and for the ranges of long documents (None: as a request that does not)
    ocr_task_queue: str | None = None
    ocr_chunk_task_queue: str | None = None

    async def start(self, chunk_pages: int = OCR.chunk_pages) -> str:
        job_id = f"{TENANT}/{uuid.uuid4().hex[:12]}"
        policy = POLICY.model_copy(update={"ocr": OCR.model_copy(update={"chunk_pages": chunk_pages})})
        request = JobRequest(
            job_id=job_id,
            tenant=TENANT,
            source=SOURCE,
            policy=policy,
            policy_version=policy.version,
            deadline_seconds=600,
            accepted_at=datetime.now(UTC),
            timing=TIMING,
            ocr_task_queue=self.ocr_task_queue,
            ocr_chunk_task_queue=self.ocr_chunk_task_queue,
        )
        assert await self.doubles.resolved.start(self.jobs, request)
        self.started.append(job_id)
        return job_id

    async def scheduled_ranges(self, job_id: str) -> list[str]:
        history = await self.jobs.handle(job_id).fetch_history()
        names = []
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attributes = event.activity_task_scheduled_event_attributes
                if attributes.activity_type.name == "ocr_chunk":
                    names.append(event.user_metadata.summary.data.decode().strip('"'))
        return names

    async def activity_queues(self, job_id: str) -> dict[str, set[str]]:
        """The task queues each activity of the job was scheduled on, from its history."""
        history = await self.jobs.handle(job_id).fetch_history()
        queues: dict[str, set[str]] = {}
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attributes = event.activity_task_scheduled_event_attributes
                queues.setdefault(attributes.activity_type.name, set()).add(attributes.task_queue.name)
        return queues


@asynccontextmanager
async def running_harness(env: Env, folder: Path, *, ocr_queues: bool) -> AsyncIterator[Harness]:
    """Doubles of every activity on the workflow's queue; with `ocr_queues`, also a worker as an OCR worker
    runs them: one slot on the OCR queue, and on the queue of long documents' ranges as many as a job runs."""
    client: Client = await connect(env.settings())
    queue = f"chunk-branches-{uuid.uuid4().hex[:8]}"
    settings = env.settings(DOCJOBS_TASK_QUEUE=queue)
    doubles = PageRangeDoubles(settings.blob_store(), folder)
    throttle: dict[str, Any] = {
        "max_heartbeat_throttle_interval": HEARTBEAT_THROTTLE,
        "default_heartbeat_throttle_interval": HEARTBEAT_THROTTLE,
    }
    workers = [
        Worker(client, task_queue=queue, workflows=[DocumentJobWorkflow], activities=doubles.activities(), **throttle)
    ]
    made = Harness(JobClient(client, settings), doubles)
    if ocr_queues:
        ocr_parts: list[Callable[..., Awaitable[object]]] = [doubles.ocr_chunk, doubles.ocr_merge]
        workers += [
            Worker(
                client,
                task_queue=settings.ocr_task_queue,
                activities=[doubles.ocr, *ocr_parts],
                max_concurrent_activities=1,
                **throttle,
            ),
            Worker(
                client,
                task_queue=settings.ocr_chunk_task_queue,
                activities=ocr_parts,
                max_concurrent_activities=OCR.max_parallel,
                **throttle,
            ),
        ]
        made.ocr_task_queue, made.ocr_chunk_task_queue = settings.ocr_task_queue, settings.ocr_chunk_task_queue
    running = [asyncio.create_task(worker.run()) for worker in workers]
    yield made
    for act in doubles.range_behaviour.values():
        if isinstance(act, Hold):
            act.released.set()
    for job_id in made.started:
        with suppress(RPCError):
            await made.jobs.handle(job_id).terminate("test over")
    await asyncio.gather(*(worker.shutdown() for worker in workers))
    await asyncio.gather(*running)


@pytest.fixture
async def harness(env: Env, tmp_path: Path) -> AsyncIterator[Harness]:
    async with running_harness(env, tmp_path, ocr_queues=False) as made:
        yield made


@pytest.fixture
async def ocr_harness(env: Env, tmp_path: Path) -> AsyncIterator[Harness]:
    async with running_harness(env, tmp_path, ocr_queues=True) as made:
        yield made


async def test_ranges_run_two_at_once_in_page_order_then_merge(harness: Harness) -> None:
    first, second = Hold(), Hold()
    harness.doubles.range_behaviour.update({1: first, 3: second})
    job_id = await harness.start()
    await asyncio.wait_for(asyncio.gather(first.started.wait(), second.started.wait()), 60)
    # Both were scheduled by one workflow task; without the cap the third would have been too.
    assert await harness.scheduled_ranges(job_id) == ["ocr: pages 1-2", "ocr: pages 3-4"]
    status = await harness.jobs.status(job_id)
    assert status.ocr_chunks is not None
    assert (status.ocr_chunks.pages_done, status.ocr_chunks.chunks_total) == (0, 3)
    second.released.set()  # the second range ends first: the third takes its place
    first.released.set()
    status = await harness.jobs.ended(job_id)
    assert status.state is JobState.SUCCEEDED, status
    assert status.pages_ocred == list(range(1, PAGES + 1))
    assert status.ocr_chunks is not None and (status.ocr_chunks.pages_done, status.ocr_chunks.chunks_done) == (6, 3)
    assert status.attempts["ocr"] == 1
    assert status.cost.stages["ocr"].cpu_seconds == PAGES  # every range's cost, under the stage
    assert harness.doubles.log.index("ocr_merge:1") > harness.doubles.log.index("ocr_chunk 5-6:1")
    assert "ocr:1" not in harness.doubles.log  # no single ocr activity


async def test_a_range_that_fails_for_good_cancels_the_running_one_and_fails_the_job(harness: Harness) -> None:
    held = Hold()
    harness.doubles.range_behaviour.update({1: held, 3: failing("ocr.page_unreadable", non_retryable=True)})
    status = await harness.jobs.ended(await harness.start())
    assert (status.state, status.failure_code) == (JobState.FAILED, "ocr.page_unreadable"), status
    assert held.saw_cancel  # the running range was cancelled (and waited for) before the job ended
    assert "ocr_merge:1" not in harness.doubles.log


async def test_a_document_of_one_range_keeps_the_single_ocr_activity(harness: Harness) -> None:
    status = await harness.jobs.ended(await harness.start(chunk_pages=PAGES))
    assert status.state is JobState.SUCCEEDED, status
    assert status.ocr_chunks is None
    assert [entry for entry in harness.doubles.log if entry.startswith("ocr")] == ["ocr:1"]


async def replays(harness: Harness, job_id: str) -> None:
    history = await harness.jobs.handle(job_id).fetch_history()
    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure


async def test_a_short_scan_is_ocred_while_a_long_one_holds_every_range_slot(ocr_harness: Harness) -> None:
    """The long job's ranges hold every slot of their queue (and, were they on the OCR queue, would hold its
    one slot): the short job's `ocr` starts on the OCR queue and the job succeeds, no range released."""
    first, second = Hold(), Hold()
    ocr_harness.doubles.range_behaviour.update({1: first, 3: second})
    long_job = await ocr_harness.start()
    await asyncio.wait_for(asyncio.gather(first.started.wait(), second.started.wait()), 60)
    short_job = await ocr_harness.start(chunk_pages=PAGES)  # one range: the single `ocr` activity
    status = await asyncio.wait_for(ocr_harness.jobs.ended(short_job), 60)
    assert status.state is JobState.SUCCEEDED, status
    assert not (first.released.is_set() or second.released.is_set())
    assert (await ocr_harness.jobs.status(long_job)).state is JobState.PROCESSING
    ocr_queue, range_queue = ocr_harness.ocr_task_queue, ocr_harness.ocr_chunk_task_queue
    assert (await ocr_harness.activity_queues(short_job))["ocr"] == {ocr_queue}
    first.released.set()
    second.released.set()
    status = await asyncio.wait_for(ocr_harness.jobs.ended(long_job), 60)
    assert status.state is JobState.SUCCEEDED, status
    scheduled = await ocr_harness.activity_queues(long_job)
    assert (scheduled["ocr_chunk"], scheduled["ocr_merge"]) == ({range_queue}, {range_queue})
    await replays(ocr_harness, long_job)


async def test_a_job_accepted_before_the_range_queue_runs_its_ranges_on_the_ocr_queue(ocr_harness: Harness) -> None:
    """A request that names no queue for ranges (accepted by an older client) keeps them on the OCR queue, where
    the OCR workers still serve them."""
    ocr_harness.ocr_chunk_task_queue = None
    ocr_queue = ocr_harness.ocr_task_queue
    job_id = await ocr_harness.start()
    status = await asyncio.wait_for(ocr_harness.jobs.ended(job_id), 60)
    assert status.state is JobState.SUCCEEDED, status
    scheduled = await ocr_harness.activity_queues(job_id)
    assert (scheduled["ocr_chunk"], scheduled["ocr_merge"]) == ({ocr_queue}, {ocr_queue})
    await replays(ocr_harness, job_id)
