"""The HTTP API's app: its context, the job and batch routes, the docs page and the error handlers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from opentelemetry import propagate, trace
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docjobs.api import batches, jobs, templates
from docjobs.api.deps import ApiContext
from docjobs.api.docs import OPENAPI_URL, install_docs
from docjobs.api.errors import install_error_handlers
from docjobs.policies import PolicyBook
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.logs import configure_logging, default_log_format
from docjobs.temporal.settings import TemporalSettings
from docjobs.temporal.tracing import TRACER, configure_tracing
from docjobs.tenants import TenantBook


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Connects the job client (on the server's own loop) unless the app was given one."""
    context: ApiContext = app.state.context
    context.settings.spool_dir.mkdir(parents=True, exist_ok=True)
    if context.client is None:
        context.client = JobClient(await connect(context.settings), context.settings)
    yield


class TracedRequests:
    """A server span per HTTP request, continuing the caller's W3C `traceparent` (pure ASGI: the upload streams
    through untouched). Named by the route's template, so neither a path nor a query string (which may name a
    tenant's file) reaches a span."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        method = scope["method"]
        tracer = trace.get_tracer(TRACER)
        parent = propagate.extract(headers)
        with tracer.start_as_current_span(f"HTTP {method}", context=parent, kind=trace.SpanKind.SERVER) as span:
            span.set_attribute("http.request.method", method)

            async def send_traced(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                await send(message)

            try:
                await self.app(scope, receive, send_traced)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if route:
                    span.update_name(f"HTTP {method} {route}")
                    span.set_attribute("http.route", route)
                job_id = scope.get("path_params", {}).get("job_id")
                if job_id:
                    span.set_attribute("docjobs.job_id", job_id)


def create_app(
    settings: TemporalSettings,
    client: JobClient | None = None,
    *,
    tenants: TenantBook | None = None,
    upload_limit: int | None = None,
) -> FastAPI:
    """The API app. Without `client`, it connects to the configured cluster when it starts (on its own loop)."""
    app = FastAPI(
        title="docjobs",
        version="1",
        description="Durable, auditable PDF document jobs: upload returns a job ID at once.",
        lifespan=lifespan,
        openapi_url=OPENAPI_URL,
        docs_url=None,  # FastAPI's own pages load their scripts from a public CDN: see docs.py
        redoc_url=None,
    )
    app.state.context = ApiContext(
        settings=settings,
        policies=PolicyBook.load(settings.policy_file),
        tenants=tenants or TenantBook(settings.tenants_file),
        upload_limit=upload_limit if upload_limit is not None else settings.max_upload_bytes,
        client=client,
    )
    configure_tracing("docjobs-api")
    app.add_middleware(TracedRequests)
    install_docs(app)
    install_error_handlers(app)
    app.include_router(jobs.router)
    app.include_router(batches.router)
    app.include_router(templates.router)
    return app


def app_from_env() -> FastAPI:
    """The app of one process of `starter.py serve --workers N` (uvicorn's factory): settings and logging from
    the environment; it connects when it starts."""
    configure_logging(default_log_format())
    return create_app(TemporalSettings.from_env())
