"""One trace per job: an upload through the real API and an in-process worker, seen by the SDK's in-memory exporter.

The API (uvicorn in a thread) and the worker (on the test's loop) run in the test process, so every span they end
reaches the exporter; the stages' document work still runs in the worker's child processes. A worker that is to be
killed is a process of its own (tests/fault_worker.py), writing each span it ends to a file.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel
from temporalio import activity

from activities.adapter import StageActivities
from docjobs import worker
from docjobs.domain import stage_specs as specs
from docjobs.domain.models import StageInput
from docjobs.domain.states import JobState
from docjobs.isolation.entries import StageEntry
from docjobs.settings.tenants import add_tenant
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.logs import JsonFormatter
from docjobs.temporal.settings import TemporalSettings
from docjobs.temporal.tracing import configure_tracing
from tests.conftest import FAULT_WORKER, LEASE_SECONDS, Env, StartWorker, run_starter
from tests.fault_worker import HeldRender, Hold
from tests.fixtures.samples import make_sample_pdf
from tests.test_api import Api, serve_api

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"  # the trace of a caller that sends a W3C traceparent
CALLER_SPAN = "00f067aa0ba902b7"
TRANSIENT = "test.transient"
SECRET_QUERY = {"file": "tenant-secret-name.pdf"}
SECRET_AGENT = {"User-Agent": "tenant-secret-name-agent"}
InputT = TypeVar("InputT", bound=StageInput)
OutputT = TypeVar("OutputT", bound=BaseModel)


class RenderFailingOnce(StageActivities):
    """`render` whose first attempt fails with a retryable error, as a worker lost in mid-stage would."""

    def run_stage(self, entry: StageEntry[InputT, OutputT, Any, Any], request: InputT) -> OutputT:
        if entry.spec is specs.RENDER and activity.info().attempt == 1:
            raise RuntimeError(TRANSIENT)
        return super().run_stage(entry, request)


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """The process's SDK provider (set here, or by an earlier connect()), with an in-memory exporter added."""
    configure_tracing("docjobs-test")
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory
    memory.shutdown()


def attribute(span: ReadableSpan, name: str) -> object:
    return (span.attributes or {}).get(name)


def attempt(span: ReadableSpan) -> int:
    number = attribute(span, "docjobs.attempt")
    assert isinstance(number, int), span.name
    return number


@asynccontextmanager
async def tenant_api(settings: TemporalSettings, folder: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Api]]:
    """The real API (uvicorn in a thread) for tenant `acme`, and an HTTP client for it."""
    tenants = folder / "tenants.json"
    api = serve_api(settings, tenants, {"acme": add_tenant(tenants, "acme")})
    served = next(api)
    try:
        async with httpx.AsyncClient(base_url=served.base, timeout=60) as http:
            yield http, served
    finally:
        next(api, None)


async def upload(http: httpx.AsyncClient, served: Api, document: Path, trace_id: str) -> dict[str, str]:
    """A multipart upload (the file's name is in the body) from a caller whose span is `trace_id`/CALLER_SPAN."""
    response = await http.post(
        "/v1/jobs",
        files={"file": ("tenant-secret-name.pdf", document.read_bytes())},
        data={"policy": json.dumps({"name": "standard"})},
        headers={**served.auth(), "traceparent": f"00-{trace_id}-{CALLER_SPAN}-01"},
    )
    assert response.status_code == 202, response.text
    accepted: dict[str, str] = response.json()
    return accepted


async def wait_ended(http: httpx.AsyncClient, served: Api, status_url: str) -> dict[str, Any]:
    for _ in range(900):  # a query string and a user agent a tenant chose: neither reaches a span
        polled = await http.get(status_url, params=SECRET_QUERY, headers={**served.auth(), **SECRET_AGENT})
        status: dict[str, Any] = polled.json()
        if status["state"] in ("succeeded", "failed", "quarantined", "canceled"):
            return status
        await asyncio.sleep(0.2)
    raise AssertionError(f"the job did not end: {status}")


async def test_one_upload_is_one_trace_from_the_request_to_every_stage_attempt(
    env: Env, exporter: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = env.settings(DOCJOBS_TASK_QUEUE=f"tracing-{uuid.uuid4().hex[:8]}")
    document = tmp_path / "in.pdf"
    make_sample_pdf(document, pages=2, marker="traced")
    monkeypatch.setattr(worker, "StageActivities", RenderFailingOnce)
    client = await connect(settings)
    async with worker.serving(client, settings), tenant_api(settings, tmp_path) as (http, served):
        accepted = await upload(http, served, document, CALLER_TRACE)
        status = await wait_ended(http, served, accepted["status_url"])
    assert status["state"] == "succeeded", status
    assert status["trace_id"] == CALLER_TRACE  # the API status shows the job's trace: the caller's
    assert status["attempts"]["render"] == 2

    spans = [span for span in exporter.get_finished_spans() if format(span.context.trace_id, "032x") == CALLER_TRACE]
    names = [span.name for span in spans]
    request = next(span for span in spans if span.name == "POST /v1/jobs")  # FastAPI's instrumentation's
    assert request.kind is trace.SpanKind.SERVER and request.parent is not None
    assert format(request.parent.span_id, "016x") == CALLER_SPAN
    assert (attribute(request, "http.route"), attribute(request, "http.status_code")) == ("/v1/jobs", 202)
    assert request.parent.is_remote  # the caller's span: the request continues its trace
    assert "StartWorkflow:DocumentJob" in names and "RunWorkflow:DocumentJob" in names, names
    stage_spans = [span for span in spans if span.name.startswith("RunActivity:")]
    for stage, attempts in status["attempts"].items():
        tried = sorted(attempt(span) for span in stage_spans if span.name == f"RunActivity:{stage}")
        assert tried == list(range(1, attempts + 1)), (stage, tried, names)
    renders = {attempt(span): span for span in stage_spans if span.name == "RunActivity:render"}
    assert attribute(renders[1], "docjobs.outcome") == "RuntimeError"
    assert [event.name for event in renders[2].events] == ["retry"]
    assert attribute(renders[2], "docjobs.outcome") == "ok" and attribute(renders[2], "docjobs.page_count") == 2
    assert {attribute(span, "docjobs.job_id") for span in stage_spans} == {status["job_id"]}
    ended = next(span for span in spans if span.name == "JobEnded")
    assert (attribute(ended, "docjobs.outcome"), attribute(ended, "docjobs.page_count")) == ("succeeded", 2)
    code, shown, _ = run_starter(env, "status", status["job_id"], DOCJOBS_TASK_QUEUE=settings.task_queue)
    assert code == 0 and shown["trace_id"] == CALLER_TRACE  # `starter.py status` shows it too
    polls = [span for span in exporter.get_finished_spans() if span.name == "GET /v1/jobs/{job_id:path}"]
    assert polls and {attribute(span, "docjobs.job_id") for span in polls} == {status["job_id"]}
    assert attribute(polls[0], "http.target") == "REDACTED" and attribute(polls[0], "http.url") == "REDACTED"
    everything = json.dumps([json.loads(span.to_json()) for span in spans + polls])
    assert "tenant-secret-name" not in everything and "traced" not in everything  # no file names, no content


def as_json(span: ReadableSpan) -> dict[str, Any]:
    """A span as the SDK writes it out (`to_json`): how the killed worker's spans reached this test."""
    written: dict[str, Any] = json.loads(span.to_json())
    return written


def in_trace(spans: list[dict[str, Any]], trace_id: str) -> list[dict[str, Any]]:
    return [span for span in spans if span["context"]["trace_id"] == f"0x{trace_id}"]


async def test_a_stage_retried_after_its_worker_was_killed_stays_in_the_job_trace(
    env: Env, exporter: InMemorySpanExporter, start_worker: StartWorker, tmp_path: Path
) -> None:
    """The first worker (a process) is SIGKILLed while its render holds; once that attempt's lease
    (DOCJOBS_LEASE_SECONDS) has run out, the second worker (in this process) runs the render's second attempt."""
    queue = f"tracing-killed-{uuid.uuid4().hex[:8]}"
    settings = env.settings(DOCJOBS_TASK_QUEUE=queue, DOCJOBS_LEASE_SECONDS=str(LEASE_SECONDS))
    caller_trace = uuid.uuid4().hex
    killed_spans = tmp_path / "killed-worker-spans.jsonl"
    first = start_worker(
        queue,
        script=FAULT_WORKER,
        DOCJOBS_FAULT="hold-render",
        DOCJOBS_HOLD_DIR=str(tmp_path),
        DOCJOBS_SPAN_FILE=str(killed_spans),
        DOCJOBS_LEASE_SECONDS=str(LEASE_SECONDS),
    )
    document = tmp_path / "in.pdf"
    make_sample_pdf(document, pages=2, marker="retraced")  # another document: another job
    async with tenant_api(settings, tmp_path) as (http, served):
        accepted = await upload(http, served, document, caller_trace)
        hold = Hold(tmp_path, accepted["job_id"])
        await asyncio.to_thread(hold.wait, "held")  # the first attempt is running in the first worker
        first.kill()
        client = await connect(settings)
        async with worker.serving(client, settings):  # the same stages, not held
            status = await wait_ended(http, served, accepted["status_url"])
    assert status["state"] == "succeeded", status
    assert status["trace_id"] == caller_trace and status["attempts"]["render"] == 2, status

    # What each worker made of the job's trace: the killed one's ended spans from its file, its open attempt
    # as the held render left it, the second worker's (and the API's) from the in-memory exporter.
    killed = in_trace([json.loads(line) for line in killed_spans.read_text().splitlines()], caller_trace)
    lost_attempt = json.loads(hold.path("span").read_text())
    here = in_trace([as_json(span) for span in exporter.get_finished_spans()], caller_trace)
    assert "RunWorkflow:DocumentJob" in [span["name"] for span in killed], killed
    scheduled = next(span for span in killed if span["name"] == "StartActivity:render")
    request = next(span for span in here if span["name"] == "POST /v1/jobs")
    assert request["parent_id"] == f"0x{CALLER_SPAN}"
    assert lost_attempt["context"]["trace_id"] == f"0x{caller_trace}" and lost_attempt["end_time"] is None
    assert (lost_attempt["name"], lost_attempt["attributes"]["docjobs.attempt"]) == ("RunActivity:render", 1)
    retried = next(span for span in here if span["name"] == "RunActivity:render")
    assert retried["attributes"]["docjobs.attempt"] == 2 and retried["attributes"]["docjobs.outcome"] == "ok"
    assert [event["name"] for event in retried["events"]] == ["retry"]
    assert lost_attempt["parent_id"] == retried["parent_id"] == scheduled["context"]["span_id"]  # one stage
    assert lost_attempt["context"]["span_id"] != retried["context"]["span_id"]
    for stage in ("sign", "verify", "publish"):  # the rest of the job, on the second worker, in the same trace
        tried = [span["attributes"]["docjobs.attempt"] for span in here if span["name"] == f"RunActivity:{stage}"]
        assert tried == [1], (stage, tried)
    job_ids = {span["attributes"]["docjobs.job_id"] for span in [lost_attempt, *here] if "RunActivity" in span["name"]}
    assert job_ids == {accepted["job_id"]}
    ended = next(span for span in here if span["name"] == "JobEnded")
    assert ended["attributes"]["docjobs.outcome"] == "succeeded"


async def test_a_deadline_is_visible_in_the_job_trace(
    env: Env, exporter: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its render holds until it is canceled: the job's deadline, not a document's size, ends it."""
    settings = env.settings(DOCJOBS_TASK_QUEUE=f"tracing-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("DOCJOBS_HOLD_DIR", str(tmp_path))
    monkeypatch.setattr(worker, "StageActivities", HeldRender)
    document = tmp_path / "in.pdf"
    make_sample_pdf(document, pages=1, marker="deadline")
    client = await connect(settings)
    jobs = JobClient(client, settings)
    async with worker.serving(client, settings):
        with trace.get_tracer("test").start_as_current_span("caller") as caller:
            submitted = await jobs.submit(document, "standard", deadline_seconds=3)
        for _ in range(300):
            status = await jobs.status(submitted.job_id)
            if status.state is JobState.CANCELED:
                break
            await asyncio.sleep(0.2)
    trace_id = format(caller.get_span_context().trace_id, "032x")
    assert (status.cancel_reason, status.trace_id) == ("deadline_exceeded", trace_id), status
    spans = [span for span in exporter.get_finished_spans() if format(span.context.trace_id, "032x") == trace_id]
    assert any(span.name == "DeadlineExceeded" for span in spans), [span.name for span in spans]
    ended = next(span for span in spans if span.name == "JobEnded")
    assert (attribute(ended, "docjobs.outcome"), attribute(ended, "docjobs.cancel_reason")) == (
        "canceled",
        "deadline_exceeded",
    )
    render = next(span for span in spans if span.name == "RunActivity:render")
    assert "cancelled" in [event.name for event in render.events]


def test_a_json_line_logged_inside_a_span_carries_its_trace_and_span() -> None:
    configure_tracing("docjobs-test")
    record = logging.makeLogRecord({"name": "docjobs.test", "levelname": "INFO", "msg": "inside"})
    with trace.get_tracer("test").start_as_current_span("work") as span:
        line = json.loads(JsonFormatter().format(record))
    assert line["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert line["span_id"] == format(span.get_span_context().span_id, "016x")
    assert "trace_id" not in json.loads(JsonFormatter().format(record))
