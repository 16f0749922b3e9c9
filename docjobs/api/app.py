"""The HTTP API's app: its context, the job and batch routes, the docs page and the error handlers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from opentelemetry import trace
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Span

from docjobs.api import batches, jobs, templates
from docjobs.api.body_timeout import BodyReadTimeout
from docjobs.api.deps import ApiContext
from docjobs.api.docs import OPENAPI_URL, install_docs
from docjobs.api.errors import install_error_handlers
from docjobs.settings.policies import PolicyBook
from docjobs.settings.tenants import TenantBook
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.logs import configure_logging, default_log_format
from docjobs.temporal.settings import TemporalSettings
from docjobs.temporal.tracing import configure_tracing


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Connects the job client (on the server's own loop) unless the app was given one."""
    context: ApiContext = app.state.context
    context.settings.spool_dir.mkdir(parents=True, exist_ok=True)
    if context.client is None:
        context.client = JobClient(await connect(context.settings), context.settings)
    yield


# What the request span may keep of what FastAPI's instrumentation records when it starts (either semantic
# convention). The rest (the path and its query string, the full URL, the user agent, the client's address and any
# captured request header) is overwritten with semconv's "REDACTED": a path or a query string may name a tenant's
# file or template; the route template (`http.route`) and `docjobs.job_id` say which request it was.
REQUEST_ATTRIBUTES_KEPT = frozenset(
    {
        "http.method",
        "http.request.method",
        "http.request.method_original",
        "http.scheme",
        "url.scheme",
        "http.flavor",
        "network.protocol.version",
        "http.host",
        "http.server_name",
        "server.address",
        "net.host.port",
        "server.port",
        "http.route",
    }
)
REDACTED = "REDACTED"


def scrub_request_span(span: Span, scope: dict[str, Any]) -> None:
    """The instrumentation's server request hook: redacts what may carry a tenant's words."""
    recorded = (span.attributes or {}) if isinstance(span, ReadableSpan) else {}
    span.set_attributes({key: REDACTED for key in recorded if key not in REQUEST_ATTRIBUTES_KEPT})


async def job_on_request_span(request: Request) -> None:
    """`docjobs.job_id` on the request's span, for a job's routes (a dependency: the path is matched by then)."""
    job_id = request.path_params.get("job_id")
    if job_id:
        trace.get_current_span().set_attribute("docjobs.job_id", job_id)


def instrument_requests(app: FastAPI) -> None:
    """FastAPI's OpenTelemetry instrumentation: a server span per request, named by its route template, continuing
    the caller's W3C `traceparent`. No span per body chunk (an upload would make thousands), and no request metrics
    from it (their attributes carry the target with its query string; the API's metrics are its own)."""
    FastAPIInstrumentor.instrument_app(
        app,
        server_request_hook=scrub_request_span,
        meter_provider=NoOpMeterProvider(),
        exclude_spans=["receive", "send"],
    )


def create_app(
    settings: TemporalSettings,
    client: JobClient | None = None,
    *,
    tenants: TenantBook | None = None,
    upload_limit: int | None = None,
    body_read_timeout: float | None = None,
) -> FastAPI:
    """The API app. Without `client`, it connects to the configured cluster when it starts (on its own loop).
    `body_read_timeout`: seconds a request body may stall (default DOCJOBS_BODY_READ_TIMEOUT_SECONDS)."""
    app = FastAPI(
        title="docjobs",
        version="1",
        description="Durable, auditable PDF document jobs: upload returns a job ID at once.",
        lifespan=lifespan,
        openapi_url=OPENAPI_URL,
        docs_url=None,  # FastAPI's own pages load their scripts from a public CDN: see docs.py
        redoc_url=None,
        dependencies=[Depends(job_on_request_span)],
    )
    app.state.context = ApiContext(
        settings=settings,
        policies=PolicyBook.load(settings.policy_file),
        tenants=tenants or TenantBook(settings.tenants_file),
        upload_limit=upload_limit if upload_limit is not None else settings.max_upload_bytes,
        client=client,
    )
    configure_tracing("docjobs-api")
    instrument_requests(app)
    install_docs(app)
    install_error_handlers(app)
    seconds = body_read_timeout if body_read_timeout is not None else settings.body_read_timeout_seconds
    app.add_middleware(BodyReadTimeout, seconds=seconds)
    app.include_router(jobs.router)
    app.include_router(batches.router)
    app.include_router(templates.router)
    return app


def app_from_env() -> FastAPI:
    """The app of one process of `starter.py serve --workers N` (uvicorn's factory): settings and logging from
    the environment; it connects when it starts."""
    configure_logging(default_log_format())
    return create_app(TemporalSettings.from_env())
