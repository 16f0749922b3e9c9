"""Batches end to end: a real dev server, real workers (the batch's own, with a recording `render` double where
concurrency and cancellation are measured), real PDFs."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History
from temporalio.client import WorkflowExecutionStatus
from temporalio.worker import Replayer

from docjobs.api.app import create_app
from docjobs.domain.batching import BatchInput, BatchPin, BatchRequest, BatchState, BatchStatus, JobOutcome
from docjobs.domain.idempotency import batch_document_key, keyed_job_id
from docjobs.domain.models import BlobRef, DocumentJobInput, JobOverrides
from docjobs.domain.policy import Policy
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook, job_overrides
from docjobs.settings.tenants import CLI_TENANT, TenantBook, add_tenant
from docjobs.store.batch_store import store_manifest
from docjobs.temporal.batches import BatchClient, BatchSubmitted, batch_task_queue, derive_batch_id
from docjobs.temporal.client import JobClient, JobNotFound, connect
from docjobs.temporal.converter import data_converter
from docjobs.temporal.retention import collect_garbage
from tests.conftest import REPO, Env, StartWorker, WorkerProcess, payloads_in, run_starter
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


UNSIGNED = job_overrides(sign=False)


async def submit_unsigned(batches: BatchClient, sources: list[BlobRef], **options: Any) -> BatchSubmitted:
    """A batch asked for the standard policy unsigned: its first step pins it as the workers resolve it."""
    return await batches.submit(sources, "standard", overrides=UNSIGNED, **options)


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
    env: Env, gated: Path, tmp_path: Path
) -> None:
    batches = await batch_client(env, "batch-gated")
    paths = documents(tmp_path, 49, "fifty")
    broken = tmp_path / "broken.pdf"
    truncate_pdf(paths[0], broken, fraction=0.4)
    paths.insert(17, broken)
    sources = await batches.accept_files(paths, tenant="cli")
    submitted = await submit_unsigned(batches, sources, tenant="cli", key="fifty", concurrency=5)
    assert submitted.created and submitted.total == 50

    status = await finished(batches, submitted.batch_id, timeout=600)
    assert status.state is BatchState.COMPLETED
    unexpected = [outcome for outcome in status.outcomes if outcome.state is not JobState.SUCCEEDED]
    assert (status.succeeded, status.failed, status.quarantined, status.canceled) == (49, 1, 0, 0), unexpected
    assert [outcome.index for outcome in status.outcomes] == list(range(50))
    broken_outcome = status.outcomes[17]
    assert broken_outcome.state is JobState.FAILED and broken_outcome.failure_code == "input.malformed"

    # Every document is a job of its own, readable as any job, with its own digest; measured concurrency.
    spans = []
    salt = (await batch_started_with(batches.jobs, submitted.batch_id)).request.document_salt
    assert salt is not None
    for outcome, source in zip(status.outcomes, sources, strict=True):
        job = await batches.jobs.status(outcome.job_id)
        assert job.state is outcome.state and job.input_sha256 == source.sha256
        assert outcome.job_id == keyed_job_id("cli", batch_document_key("fifty", source.sha256, salt))
        assert source.sha256[:16] not in outcome.job_id  # the ID tells nobody the document's digest
        description = await batches.jobs.handle(outcome.job_id).describe()
        assert description.start_time and description.close_time
        spans.append((description.start_time, description.close_time))
    assert max_overlap(spans) == 5
    assert max_inside(gated) == 5


async def test_cancelling_a_batch_cancels_its_running_jobs_and_starts_no_more(
    env: Env, start_worker: StartWorker, tmp_path: Path
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
    sources = await batches.accept_files(documents(tmp_path / "docs", 6, "held"), tenant="cli")
    submitted = await submit_unsigned(batches, sources, tenant="cli", key="held", concurrency=2)
    for _ in range(1200):  # until both running jobs are held in render (at most two minutes)
        if record.read_text().count("enter ") >= 2:
            break
        await asyncio.sleep(0.1)
    progress = await batches.status(submitted.batch_id, outcomes=False)
    assert record.read_text().count("enter ") == 2 and progress.running == 2 and progress.not_started == 4

    # The retention sweep keeps the sources of documents still waiting for their turn (they have no job yet).
    await collect_garbage(batches.jobs.client, batches.jobs.store, source_grace=timedelta(0))
    assert all(batches.jobs.store.exists(source.key) for source in sources)

    await batches.cancel(submitted.batch_id)
    status = await finished(batches, submitted.batch_id)
    hold.touch()  # nothing may be waiting for it any more: no job of this batch may still be held
    assert status.state is BatchState.CANCELED
    assert (status.canceled, status.running, status.not_started, status.ended) == (2, 0, 4, 2)
    for outcome in status.outcomes:
        job = await batches.jobs.status(outcome.job_id)
        assert job.state is JobState.CANCELED and job.cancel_reason == "requested"
    started = {outcome.job_id for outcome in status.outcomes}
    salt = (await batch_started_with(batches.jobs, submitted.batch_id)).request.document_salt
    for source in sources:
        job_id = keyed_job_id("cli", batch_document_key("held", source.sha256, salt))
        if job_id not in started:
            with pytest.raises(JobNotFound):
                await batches.jobs.status(job_id)
    assert record.read_text().count("enter ") == 2
    history = await batches.handle(submitted.batch_id).fetch_history()
    replay = Replayer(workflows=[DocumentBatchWorkflow], data_converter=data_converter(batches.jobs.settings))
    assert (await replay.replay_workflow(history, raise_on_replay_failure=False)).replay_failure is None


async def test_a_resubmitted_batch_key_returns_the_same_batch(env: Env, jobs: JobClient, tmp_path: Path) -> None:
    batches = BatchClient(jobs)
    sources = await batches.accept_files(documents(tmp_path, 3, "again"), tenant="cli")
    first = await submit_unsigned(batches, sources, tenant="cli", key="again")
    again = await submit_unsigned(batches, sources, tenant="cli", key="again", concurrency=1)
    assert first.created and not again.created and not again.conflict
    assert again.batch_id == first.batch_id == "cli/batch-again" and again.total == 3
    other = await submit_unsigned(batches, sources[:2], tenant="cli", key="again")
    assert other.conflict and not other.created
    # Without a key, the same documents under the same policy are the same batch.
    auto = await submit_unsigned(batches, sources, tenant="cli")
    assert (await submit_unsigned(batches, sources, tenant="cli")).batch_id == auto.batch_id
    status = await finished(batches, first.batch_id)
    assert status.succeeded == 3 and len(status.outcomes) == 3
    await finished(batches, auto.batch_id)


async def batch_started_with(jobs: JobClient, batch_id: str) -> BatchInput:
    """The input a batch's workflow was started with (its first run's)."""
    history = await jobs.client.get_workflow_handle(batch_id, first_execution_run_id=None).fetch_history()
    payloads = history.events[0].workflow_execution_started_event_attributes.input.payloads
    [started] = await jobs.client.data_converter.decode(payloads)
    return BatchInput.model_validate(started)


async def started_with(jobs: JobClient, job_id: str) -> DocumentJobInput:
    """The input a job's workflow was started with: the first event of its history, as the worker reads it."""
    history = await jobs.handle(job_id).fetch_history()
    payloads = history.events[0].workflow_execution_started_event_attributes.input.payloads
    [started] = await jobs.client.data_converter.decode(payloads)
    return DocumentJobInput.model_validate(started)


async def test_a_batch_starts_its_documents_with_the_public_input_held_to_its_policy_version(
    env: Env, jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    batches = BatchClient(jobs)
    sources = await batches.accept_files(documents(tmp_path, 2, "public"), tenant="cli")
    submitted = await submit_unsigned(batches, sources, tenant="cli", key="public")
    status = await finished(batches, submitted.batch_id)
    assert status.state is BatchState.COMPLETED and status.succeeded == 2
    pinned = policies.resolve("standard", UNSIGNED).version
    assert status.policy_version == pinned
    salt = (await batch_started_with(jobs, submitted.batch_id)).request.document_salt
    for outcome, source in zip(status.outcomes, sources, strict=True):
        assert outcome.job_id == keyed_job_id("cli", batch_document_key("public", source.sha256, salt))
        started = await started_with(jobs, outcome.job_id)
        assert isinstance(started, DocumentJobInput)
        assert (started.policy, started.overrides, started.policy_version) == ("standard", UNSIGNED, pinned)
        assert (started.source.sha256, started.source.size) == (source.sha256, source.size)
        assert started.deadline_seconds == policies.get("standard").deadline_seconds
        memo = await (await jobs.handle(outcome.job_id).describe()).memo_value("input")
        assert DocumentJobInput.model_validate(memo) == started
        job = await jobs.status(outcome.job_id)
        assert job.state is JobState.SUCCEEDED and job.policy_version == pinned and job.signature is None

    # The batch pinned its policy in its first step, on a worker, before any document started: nothing else did.
    scheduled = [
        event.activity_task_scheduled_event_attributes.activity_type.name
        async for event in batches.handle(submitted.batch_id).fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled[:2] == ["pin_batch_policy", "start_batch_documents"] and scheduled.count("pin_batch_policy") == 1
    assert (await batch_started_with(jobs, submitted.batch_id)).request.policy is None  # the client resolved none

    # As if the policy file had changed after the batch pinned its policy: the workers resolve what the batch asks
    # (the standard policy, signed) to another version than the one it pinned. No document runs with it.
    request = (await batch_started_with(jobs, submitted.batch_id)).request
    stale = BatchPin.of(policies.resolve("standard", UNSIGNED), None)
    changed_id = "cli/batch-changed"
    changed_request = request.model_copy(
        update={"batch_id": changed_id, "key": "changed", "overrides": JobOverrides(), "total": 1}
    )
    await jobs.client.start_workflow(
        DocumentBatchWorkflow.run,
        BatchInput(request=changed_request, pin=stale),
        id=changed_id,
        task_queue=batch_task_queue(jobs.settings),
    )
    status = await finished(batches, changed_id)
    assert (status.state, status.failed) == (BatchState.COMPLETED, 1)
    [outcome] = status.outcomes
    assert (outcome.state, outcome.failure_code) == (JobState.FAILED, "policy.changed")
    assert [
        event.activity_task_scheduled_event_attributes.activity_type.name
        async for event in jobs.handle(outcome.job_id).fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ] == ["resolve"]


async def test_a_batch_whose_policy_cannot_be_pinned_fails_with_its_code_and_starts_nothing(
    env: Env, jobs: JobClient, tmp_path: Path
) -> None:
    """No client resolves a batch's policy, so a name the workers do not know is found by the batch's first step:
    the batch ends `failed` with `policy.unknown` (not retried), and no document's job is started."""
    batches = BatchClient(jobs)
    sources = await batches.accept_files(documents(tmp_path, 2, "unpinned"), tenant="cli")
    submitted = await batches.submit(sources, "no-such-policy", overrides=JobOverrides(), tenant="cli", key="unpinned")
    status = await finished(batches, submitted.batch_id)
    assert (status.state, status.failure_code, status.policy_version) == (BatchState.FAILED, "policy.unknown", None)
    assert (status.ended, status.not_started, status.outcomes) == (0, 2, [])
    scheduled = [
        event.activity_task_scheduled_event_attributes.activity_type.name
        async for event in batches.handle(submitted.batch_id).fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert scheduled == ["pin_batch_policy"]
    prefix = f"cli/{submitted.batch_id.partition('/batch-')[2]}."
    assert not [job async for job in jobs.client.list_workflows(f'WorkflowId STARTS_WITH "{prefix}"')]


async def old_batch_outcome(jobs: JobClient, tmp_path: Path, name: str, policy: Policy) -> JobOutcome:
    """The one document's outcome of a batch as older code accepted it: the policy its client resolved, no
    overrides, no pin, no salt (its request as an old history records it), run by this code."""
    batches = BatchClient(jobs)
    [source] = await batches.accept_files(documents(tmp_path / name, 1, name), tenant="cli")
    batch_id, key = derive_batch_id("cli", name, "", "", jobs.id_key)
    manifest = await asyncio.to_thread(store_manifest, jobs.store, [source])
    old = BatchRequest(
        batch_id=batch_id,
        tenant="cli",
        key=key,
        policy=policy,
        manifest=manifest,
        total=1,
        deadline_seconds=policy.deadline_seconds,
        job_task_queue=jobs.settings.task_queue,
        accepted_at=datetime.now(UTC),
    )
    assert old.overrides is None
    await jobs.client.start_workflow(
        DocumentBatchWorkflow.run, BatchInput(request=old), id=batch_id, task_queue=batch_task_queue(jobs.settings)
    )
    [outcome] = (await finished(batches, batch_id)).outcomes
    # It had no salt: its document keeps the ID such batches always gave (the digest itself).
    assert outcome.job_id == f"cli/{name}.{source.sha256[:16]}"
    return outcome


async def test_a_batch_accepted_before_the_public_input_starts_its_documents_with_it(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    """A batch from an old history records the policy its client resolved, not what it asked: its documents (new
    code) ask for that policy's name with the overrides that remake it, held to its fingerprint, with the public
    input as every job now starts. One no override can remake (a changed page limit) fails `policy.changed`: no
    document runs with another policy than its batch's, and none starts with the internal request."""
    policy = policies.resolve("standard", UNSIGNED)
    outcome = await old_batch_outcome(jobs, tmp_path, "pinned", policy)
    assert outcome.state is JobState.SUCCEEDED, outcome
    started = await started_with(jobs, outcome.job_id)
    assert (started.policy, started.overrides, started.policy_version) == ("standard", UNSIGNED, policy.fingerprint)
    assert (await jobs.status(outcome.job_id)).signature is None
    tighter = policy.model_copy(update={"max_pages": policy.max_pages - 1})
    outcome = await old_batch_outcome(jobs, tmp_path, "remade", tighter)
    assert (outcome.state, outcome.failure_code) == (JobState.FAILED, "policy.changed")


async def test_continue_as_new_keeps_the_progress_and_no_run_carries_the_sources(
    env: Env, jobs: JobClient, tmp_path: Path
) -> None:
    batches = BatchClient(jobs)
    sources = await batches.accept_files(documents(tmp_path, 5, "relay"), tenant="cli")
    submitted = await submit_unsigned(batches, sources, tenant="cli", key="relay", concurrency=2, documents_per_run=2)
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


async def test_the_api_accepts_a_batch_once_and_lists_each_outcome(env: Env, jobs: JobClient, tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.json"
    keys = {name: add_tenant(tenants, name) for name in ("acme", "globex")}
    app = create_app(env.settings(), jobs, tenants=TenantBook(tenants))
    paths = documents(tmp_path / "docs", 3, "api")
    files = [("file", (path.name, path.read_bytes(), "application/pdf")) for path in paths]
    policy = {"policy": json.dumps({"name": "standard", "watermark": "BATCH API"})}
    acme = {"Authorization": f"Bearer {keys['acme']}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as http:
        keyed = {**acme, "Idempotency-Key": "api-batch"}
        first = await http.post("/v1/batches?concurrency=2", files=files, data=policy, headers=keyed)
        assert first.status_code == 202, first.text
        assert first.json() == {
            "batch_id": "acme/batch-api-batch",
            "status_url": "/v1/batches/acme/batch-api-batch",
            "total": 3,
        }
        again = await http.post("/v1/batches?concurrency=2", files=files, data=policy, headers=keyed)
        assert again.status_code == 200 and again.json()["batch_id"] == "acme/batch-api-batch"
        conflict = await http.post("/v1/batches", files=files[:2], data=policy, headers=keyed)
        assert conflict.status_code == 422 and conflict.json()["code"] == "idempotency.conflict"

        # One refused document refuses the batch, and the answer names its position only.
        garbage = ("file", ("secret-name.pdf", b"not a document at all", "application/pdf"))
        refused = await http.post("/v1/batches", files=[files[0], garbage], headers=acme)
        assert refused.status_code == 415 and refused.json()["code"] == "input.unsupported"
        assert "document 2" in refused.json()["message"] and "secret" not in refused.text

        # The same documents named as stored sources: a batch of its own (no key: derived from what it is).
        digests = [hashlib.sha256(path.read_bytes()).hexdigest() for path in paths]
        stored = await http.post("/v1/batches", json={"sources": digests, "policy": {"name": "standard"}}, headers=acme)
        assert stored.status_code == 202 and stored.json()["batch_id"].startswith("acme/batch-auto-")
        missing = await http.post("/v1/batches", json={"sources": ["0" * 64]}, headers=acme)
        assert missing.status_code == 422 and missing.json()["code"] == "source.missing"

        for batch in (first.json(), stored.json()):
            body: dict[str, Any] = {}
            for _ in range(480):
                answer = await http.get(batch["status_url"], headers=acme)
                assert answer.status_code == 200
                body = answer.json()
                if body["state"] != "running":
                    break
                assert answer.headers["Retry-After"]
                await asyncio.sleep(0.5)
            assert body["state"] == "completed" and body["succeeded"] == 3 and "segments" not in body
            assert sorted(outcome["index"] for outcome in body["outcomes"]) == [0, 1, 2]
            assert {outcome["state"] for outcome in body["outcomes"]} == {"succeeded"}
            job = await http.get(f"/v1/jobs/{body['outcomes'][0]['job_id']}", headers=acme)
            assert job.status_code == 200 and job.json()["state"] == "succeeded"
        ended = await http.post("/v1/batches/acme/batch-api-batch/cancel", headers=acme)
        assert ended.status_code == 409 and ended.json()["code"] == "batch.ended"
        globex = {"Authorization": f"Bearer {keys['globex']}"}
        hidden = await http.get("/v1/batches/acme/batch-api-batch", headers=globex)
        assert hidden.status_code == 404 and hidden.json()["code"] == "batch.not_found"


def test_the_command_line_submits_waits_with_a_progress_bar_and_lists_outcomes(
    env: Env, main_worker: WorkerProcess, tmp_path: Path
) -> None:
    folder = tmp_path / "docs"
    documents(folder, 2, "cli")
    (folder / ".hidden").write_text("skipped")
    code, submitted, _ = run_starter(env, "submit-batch", str(folder), "--key", "cli-batch", "--no-sign")
    assert code == 0 and submitted["created"] and submitted["total"] == 2
    batch_id = submitted["batch_id"]
    assert batch_id == f"{CLI_TENANT}/batch-cli-batch"
    code, again, _ = run_starter(
        env, "submit-batch", *sorted(map(str, folder.glob("*.pdf"))), "--key", "cli-batch", "--no-sign"
    )
    assert code == 0 and again == {**submitted, "created": False}

    code, waited, stderr = run_starter(env, "batch", "wait", batch_id, "--timeout", "240")
    assert code == 0, (waited, stderr)
    assert waited["state"] == "completed" and waited["wait_end"] == "terminal" and waited["succeeded"] == 2
    assert "2/2 ended: 2 succeeded" in stderr
    code, status, _ = run_starter(env, "batch", "status", batch_id)
    assert code == 0 and [outcome["index"] for outcome in status["outcomes"]] == [0, 1]
    assert run_starter(env, "batch", "cancel", batch_id)[1]["error"] == "batch.ended"
    code, unknown, _ = run_starter(env, "batch", "status", f"{CLI_TENANT}/batch-nothing")
    assert code == 2 and unknown["error"] == "batch.not_found"
    code, invalid, _ = run_starter(env, "submit-batch", str(folder), "--key", "k" * 101)
    assert code == 2 and invalid["error"] == "idempotency.invalid"
