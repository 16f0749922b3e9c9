"""OCR of a long scan in page ranges, end to end on real workers: a worker killed half-way costs only the chunk
it held, a cancel stops every running chunk, and the status counts the pages across chunks."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client
from temporalio.worker import Replayer

from docjobs.domain.policy import Policy
from docjobs.domain.states import JobState, Stage
from docjobs.isolation.page_range_work import RANGE_NICENESS
from docjobs.isolation.sandbox_child import NICENESS
from docjobs.settings.policies import PolicyBook
from docjobs.store.storage import job_prefix, sha256_file
from docjobs.temporal.client import JobClient
from docjobs.temporal.converter import data_converter
from tests.conftest import FAULT_WORKER, Env, StartWorker, wait_terminal
from tests.fault_worker import Hold
from tests.fixtures.policy_files import named
from tests.fixtures.scans import make_scan_pdf
from tests.test_jobs import job_files
from tests.test_ocr_jobs import needs_ocr_tools, ocr_processes, words_for
from workflows.document_job import DocumentJobWorkflow

PAGES = 6
CHUNK_PAGES = 2  # three chunks: 1-2, 3-4, 5-6
HELD = 5  # the chunk the first worker holds (and dies holding)


def chunked(policies: PolicyBook, max_parallel: int = 2) -> Policy:
    scan = policies.get("scan")
    ocr = scan.ocr.model_copy(update={"chunk_pages": CHUNK_PAGES, "max_parallel": max_parallel})
    return scan.model_copy(update={"ocr": ocr})


def long_scan(path: Path) -> list[list[str]]:
    words = words_for(PAGES, per_page=8)
    make_scan_pdf(path, words, dpi=150)
    return words


async def activity_events(client: Client, job_id: str, name: str) -> list[tuple[HistoryEvent, dict[str, Any]]]:
    """The job's scheduled activities of type `name`, with their decoded inputs."""
    history = await client.get_workflow_handle(job_id).fetch_history()
    found = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name == name:
                (payload,) = await client.data_converter.decode(scheduled.input.payloads)
                found.append((event, payload))
    return found


async def range_attempts(client: Client, job_id: str, failures: list[str] | None = None) -> dict[str, list[int]]:
    """Per chunk (`first-last`), the attempt of each of its recorded starts (one per completed chunk: Temporal
    records the start of a retried activity once, with the attempt that ended it); `failures` gets the last
    failure of each chunk that was retried."""
    history = await client.get_workflow_handle(job_id).fetch_history()
    scheduled = {
        event.event_id: payload["pages"] for event, payload in await activity_events(client, job_id, "ocr_chunk")
    }
    attempts: dict[str, list[int]] = {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            pages = scheduled.get(started.scheduled_event_id)
            if pages is not None:
                attempts.setdefault(f"{pages['first']}-{pages['last']}", []).append(started.attempt)
                if failures is not None and started.HasField("last_failure"):
                    failures.append(f"{pages}: {started.last_failure.message}")
    return attempts


async def wait_until(condition: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.2)


def stored_ranges(env: Env, job_id: str) -> dict[str, str]:
    """The chunks in the job's run folder (`first-last-a<attempt>-<id>.pdf`): `first-last` -> sha256."""
    runs = Path(env.vars["DOCJOBS_DATA_DIR"]) / "blobs" / job_prefix(job_id) / "runs"
    return {path.stem.split("-a")[0]: sha256_file(path) for path in runs.glob("*/ocr/*.pdf")}


def niceness(pid: int) -> int:
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except ProcessLookupError:  # ended meanwhile
        return NICENESS + RANGE_NICENESS


def page_words(path: Path) -> list[set[str]]:
    text = subprocess.run(["pdftotext", "-raw", str(path), "-"], capture_output=True, text=True, check=True).stdout
    return [{word.strip(".,;:").lower() for word in page.split()} for page in text.split("\f")[:-1]]


@needs_ocr_tools
async def test_a_worker_killed_mid_stage_costs_only_its_chunk(
    jobs: JobClient, env: Env, policies: PolicyBook, start_worker: StartWorker, tmp_path: Path
) -> None:
    queue, holds = "docjobs-ocr-chunk-kill", tmp_path / "holds"
    holds.mkdir()
    doomed = start_worker(
        queue,
        script=FAULT_WORKER,
        DOCJOBS_FAULT="hold-ocr-chunk",
        DOCJOBS_HOLD_DIR=str(holds),
        DOCJOBS_HOLD_CHUNK=str(HELD),
    )
    words = long_scan(source := tmp_path / "long-scan.pdf")
    client = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    job_id = (await client.submit(source, named(client, chunked(policies)), key="ocr-chunk-kill")).job_id
    hold = Hold(holds, job_id)
    await asyncio.to_thread(hold.wait, f"chunk-{HELD}.held", 180)

    async def two_ranges_done() -> bool:
        chunks = (await client.status(job_id)).ocr_chunks
        return chunks is not None and chunks.chunks_done == 2

    await wait_until(two_ranges_done)
    assert sorted(await range_attempts(jobs.client, job_id)) == ["1-2", "3-4"]
    status = await client.status(job_id)
    assert status.stage is Stage.OCR and status.ocr_chunks is not None
    assert (status.ocr_chunks.pages_done, status.ocr_chunks.pages_total) == (4, PAGES)
    assert status.progress == {"stage": "ocr", "pages_done": 4, "pages_total": PAGES}  # the held chunk: 0 pages
    handle = jobs.client.get_workflow_handle(job_id)
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert metadata.current_details == f"OCR: 4 of {PAGES} pages"  # what the Web UI shows
    before = stored_ranges(env, job_id)
    assert sorted(before) == ["1-2", "3-4"]
    doomed.kill()  # holding chunk 5-6: its lease lapses, and another worker takes it over

    start_worker(queue)
    status = await wait_terminal(client, job_id, timeout=300)
    assert status.state is JobState.SUCCEEDED, status
    assert status.pages_ocred == list(range(1, PAGES + 1))
    assert status.ocr_chunks is not None and status.ocr_chunks.chunks_done == 3
    failures: list[str] = []
    attempts = await range_attempts(jobs.client, job_id, failures)
    assert attempts["1-2"] == [1] and attempts["3-4"] == [1], failures  # finished chunks never ran again
    assert len(attempts["5-6"]) == 1 and attempts["5-6"][0] >= 2  # the held one ran again, on the second worker
    ((_, merge),) = await activity_events(jobs.client, job_id, "ocr_merge")
    merged = {f"{part['pages']['first']}-{part['pages']['last']}": part["chunk"]["sha256"] for part in merge["chunks"]}
    assert {name: merged[name] for name in before} == before  # the merge took the chunks stored before the kill

    out = tmp_path / "out.pdf"
    await client.fetch(job_id, out)
    found = page_words(out)
    assert len(found) == PAGES
    for number, expected in enumerate(words):  # every page's own words, on that page: complete, in page order
        own = {word.lower() for word in expected}
        assert len(own & found[number]) >= 0.75 * len(own), (number + 1, found[number])
    # chunks removed
    assert job_files(env, job_id) == ["artifact.pdf", "commitment.salt", "evidence.json", "run.json", "text.json"]

    history = await jobs.client.get_workflow_handle(job_id).fetch_history()
    replayer = Replayer(workflows=[DocumentJobWorkflow], data_converter=data_converter(client.settings))
    assert (await replayer.replay_workflow(history, raise_on_replay_failure=False)).replay_failure is None


async def range_results(client: Client, job_id: str) -> dict[str, dict[str, Any]]:
    """Per chunk (`first-last`), the decoded result of its completed `ocr_chunk`."""
    history = await client.get_workflow_handle(job_id).fetch_history()
    results = {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = event.activity_task_completed_event_attributes
            (result,) = await client.data_converter.decode(completed.result.payloads)
            if isinstance(result, dict) and "pages_resumed" in result:
                results[f"{result['pages']['first']}-{result['pages']['last']}"] = result
    return results


async def checkpointed_pages(client: Client, job_id: str, pages: str) -> list[int]:
    """The pages (numbered in the document) whose checkpoints the running `ocr_chunk` of `pages` named in the
    heartbeats the server has."""
    description = await client.get_workflow_handle(job_id).describe()
    for pending in description.raw_description.pending_activities:
        if pending.activity_type.name != "ocr_chunk" or not pending.heartbeat_details.payloads:
            continue
        (details,) = await client.data_converter.decode(pending.heartbeat_details.payloads)
        named = [entry for entry in details.get("checkpoints", []) if f"/pages/{pages}/" in entry["blob"]["key"]]
        if named:
            first = int(pages.split("-")[0])
            return sorted(first - 1 + int(entry["name"][:6]) for entry in named)
    return []


@needs_ocr_tools
@pytest.mark.parametrize("loss", ["killed", "failed"])
async def test_a_range_resumes_after_the_pages_its_lost_attempt_read(
    jobs: JobClient, env: Env, policies: PolicyBook, start_worker: StartWorker, tmp_path: Path, loss: str
) -> None:
    """The held range's first attempt stores a page's words, names them in its heartbeats, and dies with its
    worker (or fails with a retryable error); the next attempt takes those pages from the checkpoints (its child
    did not read them again: it reports them resumed) and reads the others."""
    queue, holds = f"docjobs-ocr-chunk-resume-{loss}", tmp_path / "holds"
    holds.mkdir()
    doomed = start_worker(
        queue,
        script=FAULT_WORKER,
        DOCJOBS_FAULT="hold-ocr-checkpoint" if loss == "killed" else "fail-ocr-checkpoint",
        DOCJOBS_HOLD_DIR=str(holds),
        DOCJOBS_HOLD_CHUNK=str(HELD),
    )
    words = long_scan(source := tmp_path / "resume-scan.pdf")
    client = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    job_id = (await client.submit(source, named(client, chunked(policies)), key=f"ocr-chunk-resume-{loss}")).job_id
    hold = Hold(holds, job_id)
    await asyncio.to_thread(hold.wait, f"chunk-{HELD}.checkpointed", 180)
    read: list[int] = json.loads(hold.path(f"chunk-{HELD}.checkpointed").read_text())
    assert read and set(read) <= {HELD, HELD + 1}
    held = f"{HELD}-{HELD + CHUNK_PAGES - 1}"
    if loss == "killed":

        async def recorded() -> bool:  # the heartbeat that names them reached the server
            return await checkpointed_pages(jobs.client, job_id, held) == read

        await wait_until(recorded, timeout=30)
        doomed.kill()
        start_worker(queue)
    status = await wait_terminal(client, job_id, timeout=300)
    assert status.state is JobState.SUCCEEDED, status
    assert (await range_attempts(jobs.client, job_id))[held][0] >= 2
    results = await range_results(jobs.client, job_id)
    assert results[held]["pages_resumed"] == read  # not read again
    assert all(results[name]["pages_resumed"] == [] for name in results if name != held)
    assert results[held]["pages_ocred"] == [HELD, HELD + 1]
    out = tmp_path / "out.pdf"
    await client.fetch(job_id, out)
    found = page_words(out)
    for number, expected in enumerate(words):  # the resumed pages' words too, on their own pages
        own = {word.lower() for word in expected}
        assert len(own & found[number]) >= 0.75 * len(own), (number + 1, found[number])
    # checkpoints gone
    assert job_files(env, job_id) == ["artifact.pdf", "commitment.salt", "evidence.json", "run.json", "text.json"]


@needs_ocr_tools
async def test_cancel_stops_every_running_chunk(
    jobs: JobClient, env: Env, policies: PolicyBook, start_worker: StartWorker, tmp_path: Path
) -> None:
    queue, holds = "docjobs-ocr-chunk-cancel", tmp_path / "holds"
    holds.mkdir()
    start_worker(
        queue,
        script=FAULT_WORKER,
        DOCJOBS_FAULT="hold-ocr-chunk",
        DOCJOBS_HOLD_DIR=str(holds),
        DOCJOBS_HOLD_CHUNK="1",
    )
    long_scan(source := tmp_path / "cancel-scan.pdf")
    client = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    job_id = (await client.submit(source, named(client, chunked(policies)), key="ocr-chunk-cancel")).job_id
    hold = Hold(holds, job_id)
    await asyncio.to_thread(hold.wait, "chunk-1.held", 180)  # chunk 1-2 held, chunk 3-4 OCRing beside it

    deadline = time.monotonic() + 120
    while not ocr_processes(job_id):
        assert time.monotonic() < deadline, "the second chunk's OCR never started"
        await asyncio.sleep(0.05)
    assert min(niceness(pid) for pid in ocr_processes(job_id)) >= NICENESS + RANGE_NICENESS  # yields to short jobs
    await client.cancel_running(job_id)
    started = time.monotonic()
    while ocr_processes(job_id) and time.monotonic() - started < 10:
        await asyncio.sleep(0.1)
    assert ocr_processes(job_id) == [], "a chunk's OCR outlived the cancel"
    await asyncio.to_thread(hold.wait, "chunk-1.canceled", 30)  # the held chunk heard it too
    status = await wait_terminal(client, job_id, timeout=60)
    assert (status.state, status.cancel_reason) == (JobState.CANCELED, "requested")
    scheduled = [payload["pages"]["first"] for _, payload in await activity_events(jobs.client, job_id, "ocr_chunk")]
    assert scheduled[:2] == [1, 3]  # in page order, two at once
    assert job_files(env, job_id) == ["commitment.salt", "evidence.json", "run.json"]  # no chunk outlived the job
