"""One trace per job: an upload through the real API and an in-process worker, seen by the SDK's in-memory exporter.

The API (uvicorn in a thread) and the worker (on the test's loop) run in the test process, so every span they end
reaches the exporter; the stages' document work still runs in the worker's child processes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio import activity

import worker
from activities.render import RenderActivities
from docjobs.models import RenderInput, RenderOutput
from docjobs.policies import PolicyBook
from docjobs.states import JobState
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.logs import JsonFormatter
from docjobs.temporal.tracing import configure_tracing
from docjobs.tenants import add_tenant
from tests.conftest import Env, run_starter
from tests.fault_worker import HeldRender
from tests.fixtures.samples import make_sample_pdf
from tests.test_api import serve_api

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"  # the trace of a caller that sends a W3C traceparent
TRANSIENT = "test.transient"


class RenderFailingOnce(RenderActivities):
    """`render` whose first attempt fails with a retryable error, as a worker lost in mid-stage would."""

    @activity.defn(name="render")
    def render(self, request: RenderInput) -> RenderOutput:
        if activity.info().attempt == 1:
            raise RuntimeError(TRANSIENT)
        return super().render(request)


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


async def test_one_upload_is_one_trace_from_the_request_to_every_stage_attempt(
    env: Env, exporter: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = env.settings(DOCJOBS_TASK_QUEUE=f"tracing-{uuid.uuid4().hex[:8]}")
    tenants = tmp_path / "tenants.json"
    keys = {"acme": add_tenant(tenants, "acme")}
    document = tmp_path / "in.pdf"
    make_sample_pdf(document, pages=2, marker="traced")
    monkeypatch.setattr(worker, "RenderActivities", RenderFailingOnce)
    api = serve_api(settings, tenants, keys)
    served = next(api)
    try:
        client = await connect(settings)
        async with worker.serving(client, settings), httpx.AsyncClient(base_url=served.base, timeout=60) as http:
            response = await http.post(
                "/v1/jobs",
                files={"file": ("tenant-secret-name.pdf", document.read_bytes())},
                data={"policy": json.dumps({"name": "standard"})},
                headers={**served.auth(), "traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"},
            )
            assert response.status_code == 202, response.text
            status_url = response.json()["status_url"]
            for _ in range(600):
                status = (await http.get(status_url, headers=served.auth())).json()
                if status["state"] in ("succeeded", "failed", "quarantined", "canceled"):
                    break
                await asyncio.sleep(0.2)
    finally:
        next(api, None)
    assert status["state"] == "succeeded", status
    assert status["trace_id"] == CALLER_TRACE  # the API status shows the job's trace: the caller's
    assert status["attempts"]["render"] == 2

    spans = [span for span in exporter.get_finished_spans() if format(span.context.trace_id, "032x") == CALLER_TRACE]
    names = [span.name for span in spans]
    request = next(span for span in spans if span.name == "HTTP POST /v1/jobs")
    assert request.kind is trace.SpanKind.SERVER and request.parent is not None
    assert format(request.parent.span_id, "016x") == "00f067aa0ba902b7"
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
    everything = json.dumps([json.loads(span.to_json()) for span in spans])
    assert "tenant-secret-name" not in everything and "traced" not in everything  # no file names, no content


async def test_a_deadline_is_visible_in_the_job_trace(
    env: Env, exporter: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its render holds until it is canceled: the job's deadline, not a document's size, ends it."""
    settings = env.settings(DOCJOBS_TASK_QUEUE=f"tracing-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("DOCJOBS_HOLD_DIR", str(tmp_path))
    monkeypatch.setattr(worker, "RenderActivities", HeldRender)
    document = tmp_path / "in.pdf"
    make_sample_pdf(document, pages=1, marker="deadline")
    client = await connect(settings)
    jobs = JobClient(client, settings)
    async with worker.serving(client, settings):
        with trace.get_tracer("test").start_as_current_span("caller") as caller:
            submitted = await jobs.submit(
                document, PolicyBook.load(settings.policy_file).get("standard"), deadline_seconds=3
            )
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
