"""One trace per job: OpenTelemetry through the SDK's own integration, configured by the standard `OTEL_*` variables.

`connect()` puts `client_interceptors()` on every client, so its workers inherit them: the API request (or the
CLI command) that starts a job is the parent of the workflow's spans, and each stage attempt is a span of the
same trace. Spans are always made (their IDs go on JSON log lines and into the job's status); they are exported
only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, over OTLP/HTTP, and
never when `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.

Attributes carry the job ID, stage, attempt, page count and outcome: never content, file names or URLs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from temporalio import activity
from temporalio.client import Interceptor as ClientInterceptor
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput
from temporalio.worker import Interceptor as WorkerInterceptor

TRACER = "docjobs"
TRACE_ID_MEMO = "trace_id"  # the memo field the job's trace ID is stored under at start


def _exporting() -> bool:
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").lower() == "none":
        return False
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure_tracing(service: str) -> None:
    """The process's tracer provider (once; a provider set before, e.g. a test's, is kept).

    `service`: the default `service.name`; `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` override it."""
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider(resource=Resource.create({"service.name": service}).merge(Resource.create()))
    if _exporting():
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


def client_interceptors() -> list[ClientInterceptor]:
    """The SDK's tracing interceptor, then docjobs' stage attributes inside its activity span."""
    return [TracingInterceptor(trace.get_tracer(TRACER)), StageSpans()]


def current_ids() -> dict[str, str]:
    """`trace_id` and `span_id` of the current span (hex, as trace viewers show them), if there is one."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


def current_trace_id() -> str | None:
    return current_ids().get("trace_id")


@contextmanager
def command_span(name: str) -> Iterator[None]:
    """A new trace for one CLI command (its jobs' traces start here)."""
    configure_tracing("docjobs-cli")
    with trace.get_tracer(TRACER).start_as_current_span(f"docjobs {name}", kind=trace.SpanKind.CLIENT):
        yield


def _failure_code(error: BaseException) -> str:
    if isinstance(error, ApplicationError) and error.type:
        return error.type
    return type(error).__name__


class _StageSpan(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        span = trace.get_current_span()  # the SDK's RunActivity span
        info = activity.info()
        span.set_attributes(
            {
                "docjobs.job_id": info.workflow_id or "",
                "docjobs.stage": info.activity_type,
                "docjobs.attempt": info.attempt,
            }
        )
        if info.attempt > 1:
            span.add_event("retry", {"docjobs.attempt": info.attempt})
        try:
            result = await super().execute_activity(input)
        except BaseException as error:
            details = activity.cancellation_details()
            if details is not None and details.timed_out:
                span.add_event("lease.lost", {"docjobs.attempt": info.attempt})
            elif details is not None and details.cancel_requested:
                span.add_event("cancelled", {"docjobs.attempt": info.attempt})
            span.set_attribute("docjobs.outcome", _failure_code(error))
            raise
        span.set_attribute("docjobs.outcome", "ok")
        pages = getattr(result, "page_count", None)
        if isinstance(pages, int):
            span.set_attribute("docjobs.page_count", pages)
        return result


class StageSpans(ClientInterceptor, WorkerInterceptor):
    """Job ID, stage, attempt, page count and outcome on each stage attempt's span; retries, lost leases and
    cancels as span events."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _StageSpan(next)
