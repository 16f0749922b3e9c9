"""Batches end to end: a real dev server, real workers (the batch's own, with a recording `render` double where
concurrency and cancellation are measured), real PDFs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History
from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import Replayer

from docjobs.batching import BatchState, BatchStatus
from docjobs.models import Policy
from docjobs.policies import PolicyBook
from docjobs.states import JobState
from docjobs.temporal.batches import BatchClient
from docjobs.temporal.client import JobClient, JobNotFound, connect
from docjobs.temporal.converter import data_converter
from tests.conftest import REPO, Env, StartWorker, payloads_in
from tests.fixtures.samples import make_sample_pdf, truncate_pdf
from workflows.batch_job import DocumentBatchWorkflow

BATCH_WORKER = REPO / "tests" / "batch_worker.py"


def documents(folder: Path, count: int, tag: str) -> list[Path]:
    """`count` distinct one-page PDFs (distinct bytes: distinct jobs)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        path = folder / f"{tag}-{index:03}.pdf"
        make_sample_pdf(path, pages=1, marker=f"{tag} document {index}")
        paths.append(path)
    return paths


def unsigned(policies: PolicyBook) -> Policy:
    return policies.resolve("standard", sign=False)


async def batch_client(env: Env, task_queue: str) -> BatchClient:
    settings = env.settings(DOCJOBS_TASK_QUEUE=task_queue)
    return BatchClient(JobClient(await connect(settings), settings))


async def finished(batches: BatchClient, batch_id: str, timeout: float = 240) -> BatchStatus:
    status = await batches.wait(batch_id, timeout=timeout, interval=0.5)
    assert status.state is not BatchState.RUNNING, f"{batch_id} still running: {status}"
    return status


def max_inside(record: Path) -> int:
    """The most renders inside at once, from the double's ordered enter/exit lines."""
    inside = peak = 0
    for line in record.read_text().splitlines():
        inside += 1 if line.startswith("enter ") else -1
        peak = max(peak, inside)
    return peak


def max_overlap(spans: list[tuple[datetime, datetime]]) -> int:
    """The most jobs running at once, from the server's start and close times (a close before a start at the
    same instant counts first)."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


@pytest.fixture(scope="module")
async def gated(env: Env, start_worker: StartWorker, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Path]:
    """A worker on its own queue whose renders record themselves and wait for 5 of them to be inside; more
    stage threads (6) than the batch's limit, so only the batch can keep a sixth job out."""
    record = tmp_path_factory.mktemp("gated") / "record.txt"
    record.touch()
    start_worker(
        "batch-gated",
        script=BATCH_WORKER,
        DOCJOBS_BATCH_RECORD=str(record),
        DOCJOBS_BATCH_GATE="5",
        DOCJOBS_ACTIVITY_THREADS="6",
    )
    yield record


async def test_a_batch_of_50_never_runs_more_than_5_and_each_document_has_its_outcome(
    env: Env, gated: Path, policies: PolicyBook, tmp_path: Path
) -> None:
    batches = await batch_client(env, "batch-gated")
    paths = documents(tmp_path, 49, "fifty")
    broken = tmp_path / "broken.pdf"
    truncate_pdf(paths[0], broken, fraction=0.4)
    paths.insert(17, broken)
    sources = await batches.accept_files(paths)
    submitted = await batches.submit(sources, unsigned(policies), tenant="cli", key="fifty", concurrency=5)
    assert submitted.created and submitted.total == 50

    status = await finished(batches, submitted.batch_id, timeout=600)
    assert status.state is BatchState.COMPLETED
    assert (status.succeeded, status.failed, status.quarantined, status.canceled) == (49, 1, 0, 0)
    assert [outcome.index for outcome in status.outcomes] == list(range(50))
    broken_outcome = status.outcomes[17]
    assert broken_outcome.state is JobState.FAILED and broken_outcome.failure_code == "input.malformed"

    # Every document is a job of its own, readable as any job, with its own digest; measured concurrency.
    spans = []
    for outcome, source in zip(status.outcomes, sources, strict=True):
        job = await batches.jobs.status(outcome.job_id)
        assert job.state is outcome.state and job.input_sha256 == source.sha256
        assert outcome.job_id == f"cli/fifty.{source.sha256[:16]}"
        description = await batches.jobs.handle(outcome.job_id).describe()
        assert description.start_time and description.close_time
        spans.append((description.start_time, description.close_time))
    assert max_overlap(spans) == 5
    assert max_inside(gated) == 5


async def test_cancelling_a_batch_cancels_its_running_jobs_and_starts_no_more(
    env: Env, start_worker: StartWorker, policies: PolicyBook, tmp_path: Path
) -> None:
    record, hold = tmp_path / "record.txt", tmp_path / "release"
    record.touch()
    start_worker(
        "batch-held",
        script=BATCH_WORKER,
        DOCJOBS_BATCH_RECORD=str(record),
        DOCJOBS_BATCH_HOLD=str(hold),
        DOCJOBS_ACTIVITY_THREADS="4",
    )
    batches = await batch_client(env, "batch-held")
    sources = await batches.accept_files(documents(tmp_path / "docs", 6, "held"))
    submitted = await batches.submit(sources, unsigned(policies), tenant="cli", key="held", concurrency=2)
    for _ in range(1200):  # until both running jobs are held in render (at most two minutes)
        if record.read_text().count("enter ") >= 2:
            break
        await asyncio.sleep(0.1)
    progress = await batches.status(submitted.batch_id, outcomes=False)
    assert record.read_text().count("enter ") == 2 and progress.running == 2 and progress.not_started == 4

    await batches.cancel(submitted.batch_id)
    status = await finished(batches, submitted.batch_id)
    hold.touch()  # nothing may be waiting for it any more: no job of this batch may still be held
    assert status.state is BatchState.CANCELED
    assert (status.canceled, status.running, status.not_started, status.ended) == (2, 0, 4, 2)
    for outcome in status.outcomes:
        job = await batches.jobs.status(outcome.job_id)
        assert job.state is JobState.CANCELED and job.cancel_reason == "requested"
    started = {outcome.job_id for outcome in status.outcomes}
    for source in sources:
        job_id = f"cli/held.{source.sha256[:16]}"
        if job_id not in started:
            with pytest.raises(JobNotFound):
                await batches.jobs.status(job_id)
    assert record.read_text().count("enter ") == 2


async def test_a_resubmitted_batch_key_returns_the_same_batch(
    env: Env, jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    batches = BatchClient(jobs)
    sources = await batches.accept_files(documents(tmp_path, 3, "again"))
    first = await batches.submit(sources, unsigned(policies), tenant="cli", key="again")
    again = await batches.submit(sources, unsigned(policies), tenant="cli", key="again", concurrency=1)
    assert first.created and not again.created and not again.conflict
    assert again.batch_id == first.batch_id == "cli/batch-again" and again.total == 3
    other = await batches.submit(sources[:2], unsigned(policies), tenant="cli", key="again")
    assert other.conflict and not other.created
    # Without a key, the same documents under the same policy are the same batch.
    auto = await batches.submit(sources, unsigned(policies), tenant="cli")
    assert (await batches.submit(sources, unsigned(policies), tenant="cli")).batch_id == auto.batch_id
    status = await finished(batches, first.batch_id)
    assert status.succeeded == 3 and len(status.outcomes) == 3
    await finished(batches, auto.batch_id)


async def test_continue_as_new_keeps_the_progress_and_no_run_carries_the_sources(
    env: Env, jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    batches = BatchClient(jobs)
    sources = await batches.accept_files(documents(tmp_path, 5, "relay"))
    submitted = await batches.submit(
        sources, unsigned(policies), tenant="cli", key="relay", concurrency=2, documents_per_run=2
    )
    status = await finished(batches, submitted.batch_id)
    assert status.state is BatchState.COMPLETED and status.succeeded == 5
    assert status.runs >= 3 and len(status.segments) >= 2  # outcomes of more than one run, read back
    assert [outcome.index for outcome in status.outcomes] == list(range(5))
    assert len({outcome.job_id for outcome in status.outcomes}) == 5

    run_ids = await batch_runs(jobs, submitted.batch_id)
    assert len(run_ids) == status.runs
    replayer = Replayer(workflows=[DocumentBatchWorkflow], data_converter=data_converter(jobs.settings))
    for number, run_id in enumerate(run_ids, start=1):
        handle = jobs.client.get_workflow_handle(submitted.batch_id, run_id=run_id)
        history = await handle.fetch_history()
        last = number == len(run_ids)
        ended_as = WorkflowExecutionStatus.COMPLETED if last else WorkflowExecutionStatus.CONTINUED_AS_NEW
        assert (await handle.describe()).status is ended_as
        text = history_text(History(events=history.events))
        assert not any(source.sha256 in text for source in sources), f"run {number} carries a source digest"
        replay = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replay.replay_failure is None, replay.replay_failure


async def batch_runs(jobs: JobClient, batch_id: str) -> list[str]:
    """The batch's run IDs, first to last, following each run's `continued_execution_run_id` back."""
    runs = []
    run_id: str | None = (await jobs.client.get_workflow_handle(batch_id).describe()).run_id
    while run_id:
        runs.append(run_id)
        history = await jobs.client.get_workflow_handle(batch_id, run_id=run_id).fetch_history()
        first = history.events[0]
        assert first.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
        run_id = first.workflow_execution_started_event_attributes.continued_execution_run_id or None
    return runs[::-1]


def history_text(history: History) -> str:
    return "\n".join(payload.data.decode("utf-8", "replace") for _, payload in payloads_in(history))
