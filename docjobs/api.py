"""HTTP ingress: upload a document, get an auditable job ID back at once; read, cancel, fetch, list.

The upload never waits for processing. Its order is fixed: spool the body (bounded) to a temp file, check
its kind by content, store it by sha256, derive the workflow ID, start-or-get the workflow, answer. A retry
of the same upload (same `Idempotency-Key`, or without a key the same bytes and policy) finds the same
workflow, so it never creates a second job. The tenant comes only from the API key; another tenant's job
answers 404. Every error is JSON `{"code", "message"}`: a stable code and a message without content.

The docs page (`/docs`) is Swagger UI served from the pinned `fastapi-offline` package: it works offline and
its Content-Security-Policy lets it load nothing from anywhere but this API.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import re
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ValidationError
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.service import RPCError, RPCStatusCode

from docjobs.config import ConfigError
from docjobs.errors import DocJobError
from docjobs.idempotency import CLIENT_KEY_RULE, is_valid_client_key
from docjobs.linear_regex import UNSUPPORTED_FEATURES, UnsupportedRegex
from docjobs.models import JobRequest, JobStatus, JobSummary, Policy
from docjobs.pdf.inspect import sniff_kind
from docjobs.policies import PolicyBook
from docjobs.states import JobState, is_terminal
from docjobs.storage import verified_chunks
from docjobs.temporal.client import JobClient, JobNotFound, connect
from docjobs.temporal.codec import PayloadDecryptionError
from docjobs.temporal.settings import TemporalSettings
from docjobs.tenants import TenantBook, tenants_file

log = logging.getLogger("docjobs.api")

MULTIPART_SLACK = 64 * 1024  # boundaries, part headers and the policy part on top of the file itself
ACCEPTED_KINDS = frozenset({"pdf", "png", "jpeg", "tiff"})
RETRY_AFTER_SECONDS = 2
CHUNK = 64 * 1024
UNSUPPORTED_REGEX_MESSAGE = (  # never the regex itself: the answer names the kind of problem only
    f"a redaction regex uses features the linear-time regex engine (RE2) does not support ({UNSUPPORTED_FEATURES})"
)
INTERNAL_FIELDS = {"artifact_key", "evidence_key"}  # storage layout, not the caller's business
OPENAPI_URL = "/openapi.json"
DOCS_ASSETS = "/docs-assets"  # Swagger UI's JavaScript, CSS and favicon, from the pinned fastapi-offline package
INLINE_SCRIPT = re.compile(rb"<script>(.*?)</script>", re.DOTALL)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


class ErrorBody(BaseModel):
    code: str
    message: str


class Accepted(BaseModel):
    job_id: str
    status_url: str


class CancelRequested(BaseModel):
    job_id: str
    cancel_requested: bool


class JobList(BaseModel):
    jobs: list[JobSummary]


class PolicyPart(BaseModel):
    """The JSON `policy` part of a multipart upload: a named policy and optional overrides."""

    name: str | None = None
    watermark: str | None = None
    mode: str | None = None
    ocr: str | None = None
    redact: list[str] = []  # built-in pattern names or regexes, as `--redact`
    redact_regions: list[str] = []  # `PAGE:X0,Y0,X1,Y1`, as `--redact-region`


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (401, 404, 409, 413, 415, 422, 503)
}


def job_path(job_id: str) -> str:
    return f"/v1/jobs/{quote(job_id, safe='/')}"


def docs_page(title: str) -> tuple[bytes, str]:
    """Swagger UI's page with every asset on this origin, and the Content-Security-Policy that allows nothing else.

    FastAPI's page starts Swagger UI with an inline script: the policy names that script by its sha256
    rather than allowing inline scripts at all.
    """
    page = get_swagger_ui_html(
        openapi_url=OPENAPI_URL,
        title=title,
        swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        swagger_ui_parameters={"validatorUrl": None},  # else the UI shows a badge fetched from a public validator
    )
    html = bytes(page.body)
    inline = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(script).digest()).decode()}'"
        for script in INLINE_SCRIPT.findall(html)
    )
    policy = (
        f"default-src 'none'; script-src 'self' {inline}; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    )
    return html, policy


class WithHeaders:
    """An ASGI app whose every response also carries `headers` (the docs assets get the docs page's policy)."""

    def __init__(self, app: ASGIApp, headers: dict[str, str]) -> None:
        self.app = app
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(self.headers)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status_code=status, headers=headers)


def effective_policy(book: PolicyBook, part: PolicyPart) -> Policy:
    if part.name is not None and part.name not in book.policies:
        raise ApiError(422, "policy.unknown", "no policy of that name is configured")
    try:
        return book.resolve(
            part.name,
            watermark=part.watermark,
            mode=part.mode,
            ocr=part.ocr,
            redact=part.redact,
            redact_regions=part.redact_regions,
        )
    except ValidationError as error:
        if any(isinstance(detail.get("ctx", {}).get("error"), UnsupportedRegex) for detail in error.errors()):
            raise ApiError(422, "policy.invalid", UNSUPPORTED_REGEX_MESSAGE) from None
        raise ApiError(422, "policy.invalid", "the policy overrides are not valid") from None
    except ConfigError:
        raise ApiError(422, "policy.invalid", "the policy overrides are not valid") from None


class _TooLarge(Exception):
    pass


async def _limited(stream: AsyncIterator[bytes], limit: int) -> AsyncGenerator[bytes, None]:
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > limit:
            raise _TooLarge
        yield chunk


BEARER = HTTPBearer(auto_error=False, description="a tenant API key (`python starter.py tenant add NAME`)")


def authenticated_tenant(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)] = None
) -> str:
    """The tenant of the `Authorization: Bearer KEY` header; the only source of a request's tenant."""
    authorization = request.headers.get("authorization")
    if not authorization:
        raise ApiError(401, "auth.required", "send 'Authorization: Bearer KEY'", {"WWW-Authenticate": "Bearer"})
    scheme, _sep, key = authorization.partition(" ")
    book: TenantBook = request.app.state.tenants
    name = book.authenticate(key.strip()) if scheme.lower() == "bearer" and key.strip() else None
    if name is None:
        raise ApiError(401, "auth.invalid", "the API key is not valid", {"WWW-Authenticate": "Bearer"})
    return name


Tenant = Annotated[str, Depends(authenticated_tenant)]


def create_app(
    settings: TemporalSettings,
    client: JobClient | None = None,
    *,
    tenants: TenantBook | None = None,
    upload_limit: int | None = None,
) -> FastAPI:
    """The API app. Without `client`, it connects to the configured cluster when it starts (on its own loop)."""
    book = tenants or TenantBook(tenants_file(settings))
    limit = upload_limit if upload_limit is not None else settings.max_upload_bytes
    policies = PolicyBook.load(settings.policy_file)
    spool_dir = settings.spool_dir
    holder: dict[str, JobClient] = {}
    if client is not None:
        holder["jobs"] = client

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        spool_dir.mkdir(parents=True, exist_ok=True)
        if "jobs" not in holder:
            holder["jobs"] = JobClient(await connect(settings), settings)
        yield

    app = FastAPI(
        title="docjobs",
        version="1",
        description="Durable, auditable PDF document jobs: upload returns a job ID at once.",
        lifespan=lifespan,
        openapi_url=OPENAPI_URL,
        docs_url=None,  # FastAPI's own pages load their scripts from a public CDN: see `docs` below
        redoc_url=None,
    )
    app.state.tenants = book
    docs_html, docs_policy = docs_page(f"{app.title} API")
    docs_headers = {"Content-Security-Policy": docs_policy, "X-Content-Type-Options": "nosniff"}
    assets = StaticFiles(packages=[("fastapi_offline", "static")])
    app.mount(DOCS_ASSETS, WithHeaders(assets, docs_headers), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        """Swagger UI, offline: every script, style sheet and image comes from this API."""
        return HTMLResponse(docs_html, headers=docs_headers)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, error: ApiError) -> JSONResponse:
        return _error(error.status, error.code, error.message, error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, error: RequestValidationError) -> JSONResponse:
        where = ", ".join(".".join(str(part) for part in item.get("loc", ())) for item in error.errors())
        return _error(422, "request.invalid", f"invalid request parameters: {where}"[:300])

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        codes = {404: "http.not_found", 405: "http.method_not_allowed"}
        return _error(error.status_code, codes.get(error.status_code, "http.error"), str(error.detail)[:200])

    @app.exception_handler(RPCError)
    async def unavailable(_: Request, error: RPCError) -> JSONResponse:
        return _error(503, "unavailable", "the job service is unavailable; retry later", {"Retry-After": "5"})

    @app.exception_handler(PayloadDecryptionError)
    async def undecryptable(_: Request, error: PayloadDecryptionError) -> JSONResponse:
        log.error("codec.undecryptable: %s", error)  # names the key ID only
        return _error(500, "codec.undecryptable", "this server lacks the key that sealed the job's data")

    @app.exception_handler(Exception)
    async def internal(_: Request, error: Exception) -> JSONResponse:
        return _error(500, "internal.error", "an unexpected error; the server log has the details")

    def jobs() -> JobClient:
        return holder["jobs"]

    def own(job_id: str, name: str) -> str:
        if not job_id.startswith(f"{name}/"):
            raise ApiError(404, "job.not_found", "no such job")
        return job_id

    async def own_status(job_id: str, name: str) -> JobStatus:
        try:
            return await jobs().status(own(job_id, name))
        except JobNotFound:
            raise ApiError(404, "job.not_found", "no such job") from None

    async def spool(request: Request, tmp: Path) -> tuple[Path, PolicyPart]:
        """The document in `tmp` (never more than the limit read) and the policy part, if any."""
        declared = request.headers.get("content-length")
        content_type = request.headers.get("content-type", "")
        multipart = content_type.lower().startswith("multipart/form-data")
        cap = limit + MULTIPART_SLACK if multipart else limit
        if declared and declared.isdigit() and int(declared) > cap:
            raise _TooLarge
        target = tmp / "document"
        part = PolicyPart(name=request.query_params.get("policy"))
        if not multipart:
            with target.open("wb") as out:
                async for chunk in _limited(request.stream(), cap):
                    out.write(chunk)
            return target, part
        parser = MultiPartParser(request.headers, _limited(request.stream(), cap), max_files=1, max_fields=4)
        try:
            form = await parser.parse()
        except MultiPartException:
            raise ApiError(422, "request.invalid", "the multipart body cannot be parsed") from None
        try:
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise ApiError(422, "request.invalid", "the multipart body needs a 'file' part")
            raw_policy = form.get("policy")
            if raw_policy is not None:
                if isinstance(raw_policy, str):
                    text = raw_policy
                else:
                    text = (await raw_policy.read()).decode("utf-8", "replace")
                try:
                    loaded = json.loads(text)
                    part = PolicyPart.model_validate(loaded)
                except (ValueError, ValidationError):
                    raise ApiError(422, "policy.invalid", "the 'policy' part is not a valid policy object") from None
            size = 0
            with target.open("wb") as out:
                while chunk := await upload.read(CHUNK):
                    size += len(chunk)
                    if size > limit:
                        raise _TooLarge
                    out.write(chunk)
        finally:
            await form.close()
        return target, part

    @app.post(
        "/v1/jobs",
        status_code=202,
        response_model=Accepted,
        responses={200: {"model": Accepted, "description": "the job already existed"}, **ERRORS},
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/pdf": {"schema": {"type": "string", "format": "binary"}},
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                    "multipart/form-data": {
                        "schema": {
                            "type": "object",
                            "required": ["file"],
                            "properties": {
                                "file": {"type": "string", "format": "binary"},
                                "policy": {
                                    "type": "string",
                                    "description": "JSON: name, watermark, mode, ocr, redact, redact_regions",
                                },
                            },
                        }
                    },
                },
            }
        },
    )
    async def submit(
        request: Request,
        name: Tenant,
        idempotency_key: Annotated[str | None, Header()] = None,
        policy: Annotated[str | None, Query(description="policy name (raw-body uploads)")] = None,
    ) -> Response:
        """Accept a document (raw body or multipart `file` + JSON `policy`); answer with its job ID at once."""
        if idempotency_key is not None and not is_valid_client_key(idempotency_key):
            raise ApiError(422, "idempotency.invalid", f"Idempotency-Key: {CLIENT_KEY_RULE}")
        spool_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=spool_dir, prefix="upload-") as folder:
            try:
                document, part = await spool(request, Path(folder))
            except _TooLarge:
                raise ApiError(413, "input.too_large", f"the document is larger than {limit} bytes") from None
            except ClientDisconnect:
                raise ApiError(400, "request.incomplete", "the client left before the body was complete") from None
            with document.open("rb") as head:
                kind = sniff_kind(head.read(1024))
            if kind not in ACCEPTED_KINDS:
                raise ApiError(415, "input.unsupported", "the body is not a PDF, PNG, JPEG or TIFF document")
            chosen = effective_policy(policies, part)
            try:
                submitted = await jobs().submit(document, chosen, tenant=name, key=idempotency_key)
            except DocJobError as error:
                status = 413 if error.code == "input.too_large" else 422
                raise ApiError(status, error.code, error.message) from None
        body = {"job_id": submitted.job_id, "status_url": job_path(submitted.job_id)}
        if submitted.created:
            return JSONResponse(body, status_code=202, headers={"Location": body["status_url"]})
        if idempotency_key is not None:
            existing = await _request_of(submitted.job_id)
            if existing.source.sha256 != submitted.input_sha256 or existing.policy_version != chosen.version:
                raise ApiError(
                    422, "idempotency.conflict", "this Idempotency-Key was used with a different document or policy"
                )
        return JSONResponse(body, status_code=200, headers={"Content-Location": body["status_url"]})

    async def _request_of(job_id: str) -> JobRequest:
        description = await jobs().handle(job_id).describe()
        return JobRequest.model_validate(await description.memo_value("request"))

    @app.get("/v1/jobs", response_model=JobList, responses=ERRORS)
    async def list_jobs(
        name: Tenant,
        state: Annotated[JobState | None, Query()] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> JobList:
        """The tenant's jobs (newest first), optionally in one state, from Temporal visibility."""
        return JobList(jobs=await jobs().list_jobs(state=state, tenant=name, limit=limit))

    # The sub-resources come before the status route: `{job_id:path}` would swallow their suffix.
    @app.get(
        "/v1/jobs/{job_id:path}/artifact",
        response_class=StreamingResponse,
        responses={200: {"content": {"application/pdf": {}}}, **ERRORS},
    )
    async def artifact(job_id: str, name: Tenant) -> StreamingResponse:
        """The released PDF of a succeeded job; 409 `job.not_released` otherwise."""
        status = await own_status(job_id, name)
        if status.state is not JobState.SUCCEEDED or not status.artifact_key or not status.output_sha256:
            raise ApiError(409, "job.not_released", f"the job is {status.state.value}: only a succeeded job has one")
        return await _stream(job_id, status.artifact_key, "application/pdf", status.output_sha256)

    @app.get(
        "/v1/jobs/{job_id:path}/evidence",
        response_class=StreamingResponse,
        responses={200: {"content": {"application/json": {}}}, **ERRORS},
    )
    async def evidence(job_id: str, name: Tenant) -> StreamingResponse:
        """The job's signed evidence envelope (every terminal job has one); 409 before that."""
        status = await own_status(job_id, name)
        if not status.evidence_key or not status.evidence_sha256:
            raise ApiError(409, "job.not_released", f"the job is {status.state.value} and has no evidence yet")
        return await _stream(job_id, status.evidence_key, "application/json", status.evidence_sha256)

    async def _stream(job_id: str, key: str, media_type: str, sha256: str) -> StreamingResponse:
        """The blob, re-hashed while it is sent: if it no longer has its recorded digest, the response breaks off.

        No Content-Length (the body is chunked), so a client can tell a broken-off body from a complete one:
        the error comes before the last chunk and uvicorn then closes the connection without the final one.
        """
        try:
            blob = await asyncio.to_thread(jobs().store.open, key)  # on S3 a GetObject: never on the event loop
        except DocJobError:
            raise ApiError(409, "job.not_released", "the stored file is not available") from None

        def chunks() -> Iterator[bytes]:  # a plain iterator: Starlette reads it in its thread pool
            try:
                yield from verified_chunks(blob, sha256, chunk_size=CHUNK)
            except DocJobError as error:
                log.error("%s: download of job %s broken off", error.code, job_id)
                raise

        return StreamingResponse(chunks(), media_type=media_type, headers={"X-Docjobs-Sha256": sha256})

    @app.post("/v1/jobs/{job_id:path}/cancel", status_code=202, response_model=CancelRequested, responses=ERRORS)
    async def cancel(job_id: str, name: Tenant) -> CancelRequested:
        """Request cancellation: the job ends `canceled` with reason `requested` (409 if it has already ended)."""
        status = await own_status(job_id, name)
        if is_terminal(status.state):
            raise ApiError(409, "job.ended", f"the job has already ended ({status.state.value})")
        try:
            await jobs().handle(job_id).cancel()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                raise ApiError(409, "job.ended", "the job has already ended") from None
            raise
        return CancelRequested(job_id=job_id, cancel_requested=True)

    @app.get("/v1/jobs/{job_id:path}", responses=ERRORS)
    async def job_status(job_id: str, name: Tenant) -> JSONResponse:
        """State, stage, attempts, digests, failure code and transitions; `Retry-After` while it is active."""
        status = await own_status(job_id, name)
        headers = {} if is_terminal(status.state) else {"Retry-After": str(RETRY_AFTER_SECONDS)}
        return JSONResponse(status.model_dump(mode="json", exclude=INTERNAL_FIELDS), headers=headers)

    return app
