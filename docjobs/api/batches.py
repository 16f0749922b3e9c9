"""The batch routes: accept many documents under one policy as one batch; read its progress and outcomes; cancel.

A batch is either uploaded (multipart: several `file` parts and an optional JSON `policy` part, each file
accepted exactly as a single upload is: size, magic bytes, sha256, store) or names sources already in the store
by sha256 (JSON). Either way it is all or nothing: a document that is refused refuses the batch, and the error
names its position, never its name. `Idempotency-Key` is the batch's key (batch ID `{tenant}/batch-{key}`).
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, BinaryIO
from urllib.parse import quote

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, ValidationError
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect

from docjobs.api.deps import ApiContext, Context, Tenant
from docjobs.api.errors import ERRORS, ApiError
from docjobs.api.jobs import acceptance_error, check_kind
from docjobs.api.uploads import (
    HEAD_BYTES,
    MULTIPART_SLACK,
    PolicyPart,
    TooLarge,
    _limited,
    policy_part_schema,
    tenant_policy,
)
from docjobs.domain.base import SHA256_PATTERN
from docjobs.domain.batching import DEFAULT_CONCURRENCY, MAX_CONCURRENCY, BatchState, BatchStatus
from docjobs.domain.errors import DocJobError
from docjobs.domain.idempotency import BATCH_KEY_RULE, is_valid_batch_key
from docjobs.domain.models import BlobRef, JobOverrides
from docjobs.settings.quotas import (
    BATCH_BYTES,
    BYTES_PER_DAY,
    RUNNING_JOBS_RETRY_AFTER,
    QuotaExceeded,
    TenantLimits,
    batch_bytes_check,
    seconds_to_next_day,
)
from docjobs.store.storage import sha256_file, source_key
from docjobs.temporal.batches import BatchClient, BatchNotFound, BatchPlan, BatchSubmitted, batch_slots

MAX_UPLOAD_FILES = 100  # per multipart batch; larger batches name stored sources
MAX_STORED_SOURCES = 10_000
JSON_BODY_LIMIT = 2 * 1024 * 1024  # room for MAX_STORED_SOURCES digests and a policy
RETRY_AFTER_SECONDS = 5

router = APIRouter()


class BatchAccepted(BaseModel):
    batch_id: str
    status_url: str
    total: int


class StoredBatch(BaseModel):
    """A batch of sources already in the store (`sources/<sha256>`), with one policy."""

    sources: list[Annotated[str, Field(pattern=SHA256_PATTERN)]] = Field(min_length=1, max_length=MAX_STORED_SOURCES)
    policy: PolicyPart = PolicyPart()


class BatchCancelRequested(BaseModel):
    batch_id: str
    cancel_requested: bool


def limited_body(request: Request) -> AsyncIterator[bytes]:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > JSON_BODY_LIMIT:
        raise TooLarge
    return _limited(request.stream(), JSON_BODY_LIMIT)


def batch_path(batch_id: str) -> str:
    return f"/v1/batches/{quote(batch_id, safe='/')}"


class BatchParser(MultiPartParser):
    """Starlette's multipart parser, writing each file part straight into the batch's folder as it streams in
    (spooled once: not into a temporary file first and copied after), each at most `file_limit` bytes."""

    def __init__(self, request: Request, stream: AsyncGenerator[bytes, None], folder: Path, file_limit: int) -> None:
        super().__init__(request.headers, stream, max_files=MAX_UPLOAD_FILES, max_fields=4)
        self.folder = folder
        self.file_limit = file_limit
        self.targets: dict[int, Path] = {}  # id(UploadFile) -> its file in the folder
        self.handles: list[BinaryIO] = []
        self._part_bytes = 0

    def on_part_begin(self) -> None:
        super().on_part_begin()
        self._part_bytes = 0

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._current_part.file is not None:
            self._part_bytes += end - start
            if self._part_bytes > self.file_limit:
                raise TooLarge
        super().on_part_data(data, start, end)

    def on_headers_finished(self) -> None:
        super().on_headers_finished()
        upload = self._current_part.file
        if upload is None:
            return
        target = self.folder / f"{len(self.targets) + 1:05}"
        handle = target.open("x+b")
        self.handles.append(handle)
        upload.file.close()  # the parser's spooled temporary file, before a byte went into it
        upload.file = handle
        self.targets[id(upload)] = target


async def spool_batch(
    request: Request, folder: Path, limit: int, batch_limit: int, over: QuotaExceeded
) -> tuple[list[Path], PolicyPart]:
    """Every `file` part in `folder` (each at most `limit` bytes, together at most `batch_limit`: past it, the body
    is not read further and `over` is raised) and the policy part, if any."""
    cap = batch_limit + MULTIPART_SLACK
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > cap:
        raise over

    async def capped() -> AsyncGenerator[bytes, None]:
        try:
            async for chunk in _limited(request.stream(), cap):
                yield chunk
        except TooLarge:
            raise over from None

    parser = BatchParser(request, capped(), folder, limit)
    try:
        form = await parser.parse()
    except BaseException as error:
        for handle in parser.handles:  # the form's own close closes them once it is returned
            handle.close()
        if isinstance(error, MultiPartException):
            message = f"the multipart body cannot be parsed (at most {MAX_UPLOAD_FILES} files)"
            raise ApiError(422, "request.invalid", message) from None
        raise
    try:
        part = PolicyPart(name=request.query_params.get("policy"))
        raw_policy = form.get("policy")
        if raw_policy is not None:
            text = raw_policy if isinstance(raw_policy, str) else (await raw_policy.read()).decode("utf-8", "replace")
            try:
                part = PolicyPart.model_validate_json(text)
            except ValidationError:
                raise ApiError(422, "policy.invalid", "the 'policy' part is not a valid policy object") from None
        paths = []
        for number, upload in enumerate(form.getlist("file"), start=1):
            if isinstance(upload, str):
                raise ApiError(422, "request.invalid", f"part 'file' number {number} is not a file")
            paths.append(parser.targets[id(upload)])
    finally:
        await form.close()
    if not paths:
        raise ApiError(422, "request.invalid", "the multipart body needs at least one 'file' part")
    if sum(path.stat().st_size for path in paths) > batch_limit:
        raise over
    return paths, part


@router.post(
    "/v1/batches",
    status_code=202,
    response_model=BatchAccepted,
    responses={200: {"model": BatchAccepted, "description": "the batch already existed"}, **ERRORS},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["file"],
                        "properties": {
                            "file": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": MAX_UPLOAD_FILES,
                                "items": {"type": "string", "format": "binary"},
                            },
                            "policy": policy_part_schema(),
                        },
                        "additionalProperties": False,
                    },
                    "encoding": {"policy": {"contentType": "application/json"}},
                },
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["sources"],
                        "properties": {
                            "sources": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": MAX_STORED_SOURCES,
                                "items": {"type": "string", "pattern": SHA256_PATTERN},
                            },
                            "policy": policy_part_schema(),
                        },
                    }
                },
            },
        }
    },
)
async def submit_batch(
    request: Request,
    context: Context,
    name: Tenant,
    idempotency_key: Annotated[str | None, Header()] = None,
    policy: Annotated[str | None, Query(description="policy name (multipart uploads)")] = None,
    concurrency: Annotated[int, Query(ge=1, le=MAX_CONCURRENCY)] = DEFAULT_CONCURRENCY,
) -> Response:
    """Accept a batch (multipart `file` parts, or JSON naming stored sources); answer with its batch ID at once."""
    if idempotency_key is not None and not is_valid_batch_key(idempotency_key):
        raise ApiError(422, "idempotency.invalid", f"Idempotency-Key: {BATCH_KEY_RULE}")
    batches = BatchClient(context.jobs)
    content_type = request.headers.get("content-type", "").lower()
    uploaded = content_type.startswith("multipart/form-data")
    limits = await context.admit(name, takes_bytes=uploaded)  # no byte left today: before the body is read
    if content_type.startswith("application/json"):
        try:
            stored = StoredBatch.model_validate_json(b"".join([chunk async for chunk in limited_body(request)]))
        except TooLarge:
            raise ApiError(413, "input.too_large", f"the body is larger than {JSON_BODY_LIMIT} bytes") from None
        except ValidationError:
            raise ApiError(422, "request.invalid", "the body is not a valid batch of stored sources") from None
        chosen, overrides = tenant_policy(context, name, stored.policy)
        try:
            async with context.admissions.lookups(name):  # one look-up pass per tenant at a time
                sources = await batches.stored_sources(stored.sources, tenant=name)  # each digest once
        except DocJobError as error:
            raise ApiError(422, error.code, error.message) from None
        batch_bytes_check(sum(source.size for source in sources), limits)
        plan = batches.plan(sources, chosen, overrides, tenant=name, key=idempotency_key)
        asked = Asked(chosen, overrides, idempotency_key, concurrency)
        return await _start_batch(context, batches, plan, [], asked, name, limits)
    if not uploaded:
        raise ApiError(415, "request.invalid", "send multipart/form-data (file parts) or application/json (sources)")
    spool_dir = context.settings.spool_dir
    spool_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=spool_dir, prefix="batch-") as folder:
        # Read no further than the batch may hold and the tenant may still send today, whichever is less.
        today = context.limits_left_today(name, limits)
        batch_limit, over = limits.max_batch_bytes, QuotaExceeded(BATCH_BYTES, RUNNING_JOBS_RETRY_AFTER)
        if today < batch_limit:
            batch_limit, over = today, QuotaExceeded(BYTES_PER_DAY, seconds_to_next_day(datetime.now(UTC)))
        try:
            paths, part = await spool_batch(request, Path(folder), context.upload_limit, batch_limit, over)
        except TooLarge:
            message = f"a document is larger than {context.upload_limit} bytes"
            raise ApiError(413, "input.too_large", message) from None
        except ClientDisconnect:
            raise ApiError(400, "request.incomplete", "the client left before the body was complete") from None
        chosen, overrides = tenant_policy(context, name, part)  # checked before anything is stored
        uploads = await checked_uploads(paths)  # kinds and digests: still nothing stored
        plan = batches.plan([source for _, source in uploads], chosen, overrides, tenant=name, key=idempotency_key)
        asked = Asked(chosen, overrides, idempotency_key, concurrency)
        return await _start_batch(context, batches, plan, uploads, asked, name, limits)


async def checked_uploads(paths: list[Path]) -> list[tuple[Path, BlobRef]]:
    """Each spooled document checked by its magic bytes and hashed, with the reference it will have once stored
    (`sources/<sha256>`); a refusal names the document's position. Nothing is stored."""
    uploads = []
    for number, path in enumerate(paths, start=1):
        try:
            with path.open("rb") as document:
                check_kind(document.read(HEAD_BYTES))
        except ApiError as error:
            raise ApiError(error.status, error.code, f"document {number}: {error.message}") from None
        digest = await asyncio.to_thread(sha256_file, path)
        uploads.append((path, BlobRef(key=source_key(digest), sha256=digest, size=path.stat().st_size)))
    return uploads


async def accept_uploads(context: ApiContext, uploads: list[tuple[Path, BlobRef]], tenant: str) -> None:
    """Store each distinct document as a single upload is (its owner recorded); a refusal names its position."""
    stored: set[str] = set()
    for number, (path, source) in enumerate(uploads, start=1):
        if source.sha256 in stored:
            continue
        try:
            await context.jobs.accept(path, tenant=tenant, hashed=source.sha256)
        except DocJobError as error:
            refused = acceptance_error(error)
            raise ApiError(refused.status, refused.code, f"document {number}: {refused.message}") from None
        stored.add(source.sha256)


@dataclass(frozen=True)
class Asked:
    """What the request asks of its batch: the policy's name, the overrides, the key and the concurrency (the batch's
    first step resolves and pins the policy)."""

    policy: str
    overrides: JobOverrides
    key: str | None
    concurrency: int


async def _start_batch(
    context: ApiContext,
    batches: BatchClient,
    plan: BatchPlan,
    uploads: list[tuple[Path, BlobRef]],
    asked: Asked,
    tenant: str,
    limits: TenantLimits,
) -> Response:
    """Start the planned batch, or answer the one its ID names already (the same: `200`; another: `422
    idempotency.conflict`) with nothing stored. A new batch reserves its slots of the tenant's running jobs (its
    concurrency, fewer if fewer are free: 429 if none is), is charged every byte it stores (the uploaded
    documents, the manifest) and only then stores them and starts."""
    existing = await batches.existing(plan)
    if existing is not None:
        return batch_answer(existing)
    slots = batch_slots(asked.concurrency, len(plan.distinct))
    reservation = await context.reserve(tenant, limits, plan.batch_id, slots)
    stored_bytes = plan.manifest.size + sum(source.size for source in plan.distinct if uploads)
    charged = 0
    try:
        await context.charge(tenant, stored_bytes, limits)
        charged = stored_bytes
        await accept_uploads(context, uploads, tenant)
        submitted = await batches.submit(
            plan.distinct,
            asked.policy,
            overrides=asked.overrides,
            tenant=tenant,
            key=asked.key,
            concurrency=reservation.slots,  # at most the slots free at admission
        )
    except BaseException:
        context.admissions.release(reservation)
        await context.refund(tenant, charged)
        raise
    if submitted.created:
        context.admissions.started(reservation)
    else:  # started meanwhile (a race): the bytes stay counted unless they are that batch's own (the same batch)
        context.admissions.release(reservation)
        if not submitted.conflict:
            await context.refund(tenant, charged)
    return batch_answer(submitted)


def batch_answer(submitted: BatchSubmitted) -> Response:
    if submitted.conflict:
        raise ApiError(422, "idempotency.conflict", "this Idempotency-Key was used with other documents or policy")
    url = batch_path(submitted.batch_id)
    body = BatchAccepted(batch_id=submitted.batch_id, status_url=url, total=submitted.total).model_dump()
    if submitted.created:
        return JSONResponse(body, status_code=202, headers={"Location": url})
    return JSONResponse(body, status_code=200, headers={"Content-Location": url})


async def owned_batch(context: ApiContext, batch_id: str, tenant: str, *, outcomes: bool) -> BatchStatus:
    """The batch's status, if the tenant owns it; another tenant's batch answers as if it did not exist."""
    try:
        if not batch_id.startswith(f"{tenant}/"):
            raise BatchNotFound(batch_id)
        return await BatchClient(context.jobs).status(batch_id, outcomes=outcomes)
    except BatchNotFound:
        raise ApiError(404, "batch.not_found", "no such batch") from None


@router.post(
    "/v1/batches/{batch_id:path}/cancel", status_code=202, response_model=BatchCancelRequested, responses=ERRORS
)
async def cancel_batch(batch_id: str, context: Context, name: Tenant) -> BatchCancelRequested:
    """Cancel the batch: its running jobs end `canceled`, no more start (409 if it has already ended)."""
    status = await owned_batch(context, batch_id, name, outcomes=False)
    if status.state is not BatchState.RUNNING:
        raise ApiError(409, "batch.ended", f"the batch has already ended ({status.state.value})")
    await BatchClient(context.jobs).handle(batch_id).cancel()
    return BatchCancelRequested(batch_id=batch_id, cancel_requested=True)


@router.get("/v1/batches/{batch_id:path}", responses=ERRORS)
async def batch_status(batch_id: str, context: Context, name: Tenant) -> JSONResponse:
    """Counts by outcome, running and not started, and every ended job's outcome; `Retry-After` while running."""
    status = await owned_batch(context, batch_id, name, outcomes=True)
    headers = {} if status.state is not BatchState.RUNNING else {"Retry-After": str(RETRY_AFTER_SECONDS)}
    return JSONResponse(status.model_dump(mode="json", exclude={"segments"}), headers=headers)
