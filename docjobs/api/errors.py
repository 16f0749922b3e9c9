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
from starlette.routing import Match, Mount
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


PROBED_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
STATIC_METHODS = ("GET", "HEAD")  # a mount (the docs assets) serves static files


def allowed_methods(request: Request) -> list[str]:
    """The methods some route of the app answers at the request's path (all routes that match it, not only the
    first: `/v1/jobs` is two routes, and `{job_id:path}` matches `/v1/jobs/ID/cancel` too)."""
    allowed: list[str] = []
    mounted = False
    for method in PROBED_METHODS:
        for route in request.app.router.routes:
            probe = {
                "type": "http",
                "path": request.scope["path"],
                "root_path": request.scope.get("root_path", ""),
                "method": method,
                "headers": [],
                "query_string": b"",
            }
            match, _ = route.matches(probe)
            if isinstance(route, Mount):
                mounted = mounted or match is not Match.NONE
            elif match is Match.FULL:
                allowed.append(method)
                break
    return allowed or (list(STATIC_METHODS) if mounted else [])


async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    codes = {404: "http.not_found", 405: "http.method_not_allowed"}
    headers = dict(error.headers or {})
    if error.status_code == 405:  # RFC 9110: a 405 lists the methods the resource allows
        allowed = allowed_methods(request)
        if allowed:
            headers["Allow"] = ", ".join(allowed)
    code = codes.get(error.status_code, "http.error")
    return error_response(error.status_code, code, str(error.detail)[:200], headers or None)


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
