"""The job routes: upload a document and get its job ID at once; read, cancel, fetch, list.

The upload never waits for processing. Its order is fixed: spool the body (bounded) to a temp file, check
its kind by content, derive the workflow ID; if that job exists, answer (the same job, or `idempotency.conflict`
when its key was used with another digest or ask) with nothing stored; else reserve a running slot, charge the
bytes, store them by sha256, start the workflow, answer. A retry of the same upload (same `Idempotency-Key`, or
without a key the same bytes and policy) finds the same workflow, so it never creates a second job. The tenant
comes only from the API key; another tenant's job answers 404.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from starlette.requests import ClientDisconnect
from temporalio.service import RPCError, RPCStatusCode

from docjobs.api.deps import ApiContext, Context, Tenant, owned_status
from docjobs.api.errors import ERRORS, ApiError
from docjobs.api.uploads import CHUNK, TooLarge, Upload, policy_part_schema, spool, tenant_policy
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.idempotency import CLIENT_KEY_RULE, is_valid_client_key
from docjobs.domain.models import BlobRef, InputKind, JobOverrides, JobSummary
from docjobs.domain.states import JobState, is_terminal
from docjobs.pdf.inspect import input_kind
from docjobs.settings.quotas import TenantLimits
from docjobs.store.storage import source_key, verified_chunks
from docjobs.store.templates import (
    TEMPLATE_NAME,
    TemplateNotFound,
    TemplateVersion,
    is_valid_template_name,
    manifest_bytes,
)
from docjobs.temporal.client import Submitted
from docjobs.temporal.job_plan import asked_of, derive_job_id

log = logging.getLogger("docjobs.api")

UNSUPPORTED_MESSAGE = (
    "the body is not a PDF, PNG, JPEG or TIFF, an office document, HTML (Content-Type: text/html) or a zip bundle"
)
RETRY_AFTER_SECONDS = 2
INTERNAL_FIELDS = {"artifact_key", "evidence_key"}  # storage layout, not the caller's business

router = APIRouter()


class Accepted(BaseModel):
    job_id: str
    status_url: str


class CancelRequested(BaseModel):
    job_id: str
    cancel_requested: bool


class JobList(BaseModel):
    jobs: list[JobSummary]


def job_path(job_id: str) -> str:
    return f"/v1/jobs/{quote(job_id, safe='/')}"


@router.post(
    "/v1/jobs",
    status_code=202,
    response_model=Accepted,
    responses={200: {"model": Accepted, "description": "the job already existed"}, **ERRORS},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/pdf": {"schema": {"type": "string", "format": "binary"}},
                "text/html": {"schema": {"type": "string"}},
                "application/zip": {"schema": {"type": "string", "format": "binary"}},
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "description": "a `file` part, or a `template` name and its JSON `data`; a JSON `policy`",
                        "properties": {
                            "file": {"type": "string", "format": "binary"},
                            "template": {
                                "type": "string",
                                "pattern": f"^{TEMPLATE_NAME.pattern}$",
                                "description": "a stored template's name",
                            },
                            "data": {"type": "string", "format": "binary", "description": "JSON: the template's data"},
                            "policy": policy_part_schema(),
                        },
                        # A document, or a template job (its name and data): never both, never a name alone.
                        "oneOf": [
                            {"required": ["file"], "not": {"required": ["template"]}},
                            {"required": ["template", "data"], "not": {"required": ["file"]}},
                        ],
                        "dependentRequired": {"template": ["data"]},
                        "additionalProperties": False,
                    },
                    "encoding": {"policy": {"contentType": "application/json"}},
                },
            },
        }
    },
)
async def submit(
    request: Request,
    context: Context,
    name: Tenant,
    idempotency_key: Annotated[str | None, Header()] = None,
    policy: Annotated[str | None, Query(description="policy name (raw-body uploads)")] = None,
) -> Response:
    """Accept a document (raw body: PDF, image, `text/html` or a zip bundle; or multipart `file`, or `template` +
    `data`, with a JSON `policy`); answer with its job ID at once."""
    if idempotency_key is not None and not is_valid_client_key(idempotency_key):
        raise ApiError(422, "idempotency.invalid", f"Idempotency-Key: {CLIENT_KEY_RULE}")
    limits = await context.admit(name)  # no byte left today: refused before the body is read
    spool_dir = context.settings.spool_dir
    spool_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=spool_dir, prefix="upload-") as folder:
        upload = await _spooled(request, Path(folder), context.upload_limit)
        planned = await _plan(context, name, upload, idempotency_key)
        if await context.jobs.exists(planned.job_id):  # a repeat or a conflict: answered with nothing stored or counted
            return await _existing(
                context, planned.job_id, (planned.digest, planned.asked), keyed=planned.key is not None
            )
        reservation = await context.reserve(name, limits, planned.job_id)  # one running job: 429 before storing
        charged = 0
        try:
            charged = await _charge(context, name, upload, planned, limits)
            submitted = await _start(context, name, upload, planned)
        except DocJobError as error:
            context.admissions.release(reservation)
            await context.refund(name, charged)
            raise acceptance_error(error) from None
        except BaseException:
            context.admissions.release(reservation)
            await context.refund(name, charged)
            raise
    if submitted.created:
        context.admissions.started(reservation)
        body = {"job_id": submitted.job_id, "status_url": job_path(submitted.job_id)}
        return JSONResponse(body, status_code=202, headers={"Location": body["status_url"]})
    # Started meanwhile by another request (a race). A conflict the client found before storing the document
    # (`conflict`) stored none of it (a template job's data was stored already: it stays counted). Found after
    # storing: these bytes stay counted, unless they are the existing job's own (a true repeat: the same digest,
    # counted when that job stored it).
    context.admissions.release(reservation)
    if submitted.conflict:
        if upload.template is None:
            await context.refund(name, charged)
        raise ApiError(422, "idempotency.conflict", "this Idempotency-Key was used with a different document or policy")
    answer = await _existing(
        context, submitted.job_id, (submitted.input_sha256, planned.asked), keyed=planned.key is not None
    )
    await context.refund(name, charged)  # reached only for a true repeat: a conflict raised above
    return answer


@dataclass(frozen=True)
class _Planned:
    """What an upload's job will be, known before a byte is stored."""

    kind: InputKind
    policy: str
    overrides: JobOverrides
    asked: str  # the ask the job ID binds (asked_of)
    digest: str  # the job's input: the document's digest, or the template job's manifest's
    job_id: str
    key: str | None  # the client's Idempotency-Key
    version: TemplateVersion | None = None  # a template job: the template's version, read once
    manifest: bytes | None = None  # a template job: its manifest, as it will be stored


async def _spooled(request: Request, folder: Path, limit: int) -> Upload:
    try:
        return await spool(request, folder, limit)
    except TooLarge:
        raise ApiError(413, "input.too_large", f"the document is larger than {limit} bytes") from None
    except ClientDisconnect:
        raise ApiError(400, "request.incomplete", "the client left before the body was complete") from None


async def _plan(context: ApiContext, name: str, upload: Upload, key: str | None) -> _Planned:
    """The job's kind, policy, input digest and ID: the digest of a template job's input is that of its manifest
    (the template's current version and the data's digest)."""
    spooled, kind = upload.document, InputKind.TEMPLATE
    if upload.template is None:
        found = input_kind(spooled.head, declared_html=upload.declared_html)
        if found is None:
            raise ApiError(415, "input.unsupported", UNSUPPORTED_MESSAGE)
        kind = found
    chosen, overrides = tenant_policy(context, name, upload.part)
    asked = asked_of(chosen, overrides)
    manifest: bytes | None = None
    version: TemplateVersion | None = None
    if upload.template is not None:
        version = await _template_version(context, name, upload.template)
        data = BlobRef(key=source_key(spooled.sha256), sha256=spooled.sha256, size=spooled.size)
        manifest = manifest_bytes(upload.template, version, data)
    digest = spooled.sha256 if manifest is None else hashlib.sha256(manifest).hexdigest()
    job_id = derive_job_id(name, key, digest, asked, context.jobs.id_key)
    return _Planned(kind, chosen, overrides, asked, digest, job_id, key, version, manifest)


async def _charge(context: ApiContext, name: str, upload: Upload, planned: _Planned, limits: TenantLimits) -> int:
    """Every byte stored is counted: the document, and a template job's manifest too. Returns what was charged."""
    size = upload.document.size + (len(planned.manifest) if planned.manifest is not None else 0)
    await context.charge(name, size, limits)
    return size


async def _start(context: ApiContext, name: str, upload: Upload, planned: _Planned) -> Submitted:
    """Store the job's input (a template job's is its manifest, hashed when it is stored) and start its workflow."""
    document = upload.document.path
    if upload.template is not None:
        document = await _template_manifest(
            context, name, upload.template, planned.version, upload.document.path, context.upload_limit
        )
    return await context.jobs.submit(
        document,
        planned.policy,
        overrides=planned.overrides,
        input_kind=planned.kind,
        tenant=name,
        key=planned.key,
        hashed=upload.document.sha256 if upload.template is None else None,
    )


async def _existing(context: ApiContext, job_id: str, accepted_as: tuple[str, str], *, keyed: bool) -> Response:
    """The answer to an upload whose job exists: `200` with the job, if it was accepted with the same input digest
    and the same ask (policy and overrides); `422 idempotency.conflict` if its key was used for another."""
    if keyed and await context.jobs.accepted_as(job_id) != accepted_as:
        raise ApiError(422, "idempotency.conflict", "this Idempotency-Key was used with a different document or policy")
    body = {"job_id": job_id, "status_url": job_path(job_id)}
    return JSONResponse(body, status_code=200, headers={"Content-Location": body["status_url"]})


def check_kind(head: bytes) -> None:
    """Accept only documents (a batch's: no HTML, bundles or templates), by their magic bytes (nothing parses
    the document here)."""
    if input_kind(head, declared_html=False) not in (InputKind.DOCUMENT, InputKind.OFFICE):
        raise ApiError(415, "input.unsupported", "the body is not a PDF, PNG, JPEG, TIFF or office document")


def acceptance_error(error: DocJobError) -> ApiError:
    return ApiError(413 if error.code == FailureCode.INPUT_TOO_LARGE else 422, error.code, error.message)


async def _template_version(context: ApiContext, tenant: str, template: str) -> TemplateVersion:
    """The template's current version, read once: the job's ID is derived from the manifest it makes, and the
    manifest stored is made from it too (a version added meanwhile cannot make them differ)."""
    if not is_valid_template_name(template):
        raise ApiError(422, "template.unknown", "the tenant has no template of that name")
    try:
        return await asyncio.to_thread(context.jobs.templates.current, tenant, template)
    except TemplateNotFound:
        raise ApiError(422, "template.unknown", "the tenant has no template of that name") from None


async def _template_manifest(
    context: ApiContext, tenant: str, template: str, version: TemplateVersion | None, data: Path, limit: int
) -> Path:
    """A template job's input: its manifest (the template's `version` and the data, stored by digest)."""
    return await asyncio.to_thread(
        context.jobs.templates.manifest, tenant, template, data, data.parent, max_data_bytes=limit, version=version
    )


@router.get("/v1/jobs", response_model=JobList, responses=ERRORS)
async def list_jobs(
    context: Context,
    name: Tenant,
    state: Annotated[JobState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobList:
    """The tenant's jobs (newest first), optionally in one state, from Temporal visibility."""
    return JobList(jobs=await context.jobs.list_jobs(state=state, tenant=name, limit=limit))


# The sub-resources come before the status route: `{job_id:path}` would swallow their suffix.
@router.get(
    "/v1/jobs/{job_id:path}/artifact",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/pdf": {}}}, **ERRORS},
)
async def artifact(job_id: str, context: Context, name: Tenant) -> StreamingResponse:
    """The released PDF of a succeeded job; 409 `job.not_released` otherwise."""
    status = await owned_status(context, job_id, name)
    if status.state is not JobState.SUCCEEDED:
        raise ApiError(409, "job.not_released", f"the job is {status.state.value}: only a succeeded job has one")
    if not status.artifact_key or not status.output_sha256:
        raise ApiError(409, "job.not_released", "the job succeeded, but its artifact reference could not be read")
    return await _stream(context, job_id, status.artifact_key, "application/pdf", status.output_sha256)


@router.get(
    "/v1/jobs/{job_id:path}/evidence",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/json": {}}}, **ERRORS},
)
async def evidence(job_id: str, context: Context, name: Tenant) -> StreamingResponse:
    """The job's signed evidence envelope (every terminal job has one); 409 before that."""
    status = await owned_status(context, job_id, name)
    if not status.evidence_key or not status.evidence_sha256:
        raise ApiError(409, "job.not_released", f"the job is {status.state.value} and has no evidence yet")
    return await _stream(context, job_id, status.evidence_key, "application/json", status.evidence_sha256)


async def _stream(context: ApiContext, job_id: str, key: str, media_type: str, sha256: str) -> StreamingResponse:
    """The blob, re-hashed while it is sent: if it no longer has its recorded digest, the response breaks off.

    No Content-Length (the body is chunked), so a client can tell a broken-off body from a complete one:
    the error comes before the last chunk and uvicorn then closes the connection without the final one.
    """
    try:
        blob = await asyncio.to_thread(context.jobs.store.open, key)  # on S3 a GetObject: never on the event loop
    except DocJobError:
        raise ApiError(409, "job.not_released", "the stored file is not available") from None

    def chunks() -> Iterator[bytes]:  # a plain iterator: Starlette reads it in its thread pool
        try:
            yield from verified_chunks(blob, sha256, chunk_size=CHUNK)
        except DocJobError as error:
            log.error("%s: download of job %s broken off", error.code, job_id)
            raise

    return StreamingResponse(chunks(), media_type=media_type, headers={"X-Docjobs-Sha256": sha256})


@router.post("/v1/jobs/{job_id:path}/cancel", status_code=202, response_model=CancelRequested, responses=ERRORS)
async def cancel(job_id: str, context: Context, name: Tenant) -> CancelRequested:
    """Request cancellation: the job ends `canceled` with reason `requested` (409 if it has already ended)."""
    status = await owned_status(context, job_id, name)
    if is_terminal(status.state):
        raise ApiError(409, "job.ended", f"the job has already ended ({status.state.value})")
    try:
        await context.jobs.handle(job_id).cancel()
    except RPCError as error:
        if error.status is RPCStatusCode.NOT_FOUND:
            raise ApiError(409, "job.ended", "the job has already ended") from None
        raise
    return CancelRequested(job_id=job_id, cancel_requested=True)


@router.get("/v1/jobs/{job_id:path}", responses=ERRORS)
async def job_status(job_id: str, context: Context, name: Tenant) -> JSONResponse:
    """State, stage, attempts, digests, failure code and transitions; `Retry-After` while it is active."""
    status = await owned_status(context, job_id, name)
    headers = {} if is_terminal(status.state) else {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return JSONResponse(status.model_dump(mode="json", exclude=INTERNAL_FIELDS), headers=headers)
