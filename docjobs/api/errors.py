"""Every error the API answers is JSON `{"code", "message"}`: a stable code and a message without content (a 429
`tenant.quota_exceeded` also names the `limit`)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.service import RPCError

from docjobs.settings.quotas import QUOTA_EXCEEDED, QuotaExceeded
from docjobs.temporal.codec import PayloadDecryptionError

log = logging.getLogger("docjobs.api")


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
    limit: str | None = None  # tenant.quota_exceeded only: running_jobs, bytes_per_day or batch_bytes


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (401, 403, 404, 408, 409, 413, 415, 422, 429, 503)
}


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status_code=status, headers=headers)


async def api_error(_: Request, error: ApiError) -> JSONResponse:
    return error_response(error.status, error.code, error.message, error.headers)


QUOTA_MESSAGES = {
    "running_jobs": "the tenant has as many jobs running as it may; retry after some have ended",
    "bytes_per_day": "the tenant has sent as many bytes today (UTC) as it may; retry tomorrow",
    "batch_bytes": "the batch holds more bytes than one batch may; send it as smaller batches",
}


async def quota_exceeded(_: Request, error: QuotaExceeded) -> JSONResponse:
    body = {"code": QUOTA_EXCEEDED, "message": QUOTA_MESSAGES[error.limit], "limit": error.limit}
    return JSONResponse(body, status_code=429, headers={"Retry-After": str(error.retry_after)})


async def invalid_request(_: Request, error: RequestValidationError) -> JSONResponse:
    where = ", ".join(".".join(str(part) for part in item.get("loc", ())) for item in error.errors())
    return error_response(422, "request.invalid", f"invalid request parameters: {where}"[:300])


async def http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
    codes = {404: "http.not_found", 405: "http.method_not_allowed"}
    return error_response(error.status_code, codes.get(error.status_code, "http.error"), str(error.detail)[:200])


async def unavailable(_: Request, error: RPCError) -> JSONResponse:
    return error_response(503, "unavailable", "the job service is unavailable; retry later", {"Retry-After": "5"})


async def undecryptable(_: Request, error: PayloadDecryptionError) -> JSONResponse:
    log.error("codec.undecryptable: %s", error)  # names the key ID only
    return error_response(500, "codec.undecryptable", "this server lacks the key that sealed the job's data")


async def internal(_: Request, error: Exception) -> JSONResponse:
    return error_response(500, "internal.error", "an unexpected error; the server log has the details")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, api_error)  # type: ignore[arg-type]
    app.add_exception_handler(QuotaExceeded, quota_exceeded)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, invalid_request)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RPCError, unavailable)  # type: ignore[arg-type]
    app.add_exception_handler(PayloadDecryptionError, undecryptable)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, internal)
