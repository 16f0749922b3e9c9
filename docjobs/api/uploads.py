"""An upload spooled to a file, never more than the limit read: a raw body, or multipart `file` (or `template` +
`data`) + JSON `policy`."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from docjobs.api.errors import ApiError
from docjobs.config import ConfigError
from docjobs.linear_regex import UNSUPPORTED_FEATURES, UnsupportedRegex
from docjobs.models import Policy
from docjobs.policies import PolicyBook

MULTIPART_SLACK = 64 * 1024  # boundaries, part headers and the policy part on top of the file itself
CHUNK = 64 * 1024
UNSUPPORTED_REGEX_MESSAGE = (  # never the regex itself: the answer names the kind of problem only
    f"a redaction regex uses features the linear-time regex engine (RE2) does not support ({UNSUPPORTED_FEATURES})"
)


class TooLarge(Exception):
    pass


@dataclass(frozen=True)
class Spooled:
    """What was uploaded: the document (for a template job: its data), the policy part, and what the caller
    said the document is (HTML has no magic bytes: only `Content-Type: text/html` makes a body HTML)."""

    document: Path
    part: PolicyPart
    template: str | None = None  # multipart `template`: the document is that template's JSON data
    declared_html: bool = False


class PolicyPart(BaseModel):
    """The JSON `policy` part of a multipart upload: a named policy and optional overrides."""

    name: str | None = None
    watermark: str | None = None
    mode: str | None = None
    ocr: str | None = None
    redact: list[str] = []  # built-in pattern names or regexes, as `--redact`
    redact_regions: list[str] = []  # `PAGE:X0,Y0,X1,Y1`, as `--redact-region`


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


async def _limited(stream: AsyncIterator[bytes], limit: int) -> AsyncGenerator[bytes, None]:
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > limit:
            raise TooLarge
        yield chunk


async def spool_body(request: Request, target: Path, limit: int) -> None:
    """The raw body into `target`, never more than `limit` bytes read."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise TooLarge
    with target.open("wb") as out:
        async for chunk in _limited(request.stream(), limit):
            out.write(chunk)


async def _write_part(value: UploadFile | str, target: Path, limit: int) -> None:
    if isinstance(value, str):  # a plain form field (e.g. JSON data sent without a file name)
        data = value.encode()
        if len(data) > limit:
            raise TooLarge
        target.write_bytes(data)
        return
    size = 0
    with target.open("wb") as out:
        while chunk := await value.read(CHUNK):
            size += len(chunk)
            if size > limit:
                raise TooLarge
            out.write(chunk)


async def spool(request: Request, tmp: Path, limit: int) -> Spooled:
    """The document in `tmp` (never more than `limit` bytes read), the policy part, and what the document is."""
    content_type = request.headers.get("content-type", "")
    media_type = content_type.split(";")[0].strip().lower()
    target = tmp / "document"
    part = PolicyPart(name=request.query_params.get("policy"))
    if media_type != "multipart/form-data":
        await spool_body(request, target, limit)
        return Spooled(target, part, declared_html=media_type == "text/html")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + MULTIPART_SLACK:
        raise TooLarge
    stream = _limited(request.stream(), limit + MULTIPART_SLACK)
    parser = MultiPartParser(request.headers, stream, max_files=1, max_fields=4)
    try:
        form = await parser.parse()
    except MultiPartException:
        raise ApiError(422, "request.invalid", "the multipart body cannot be parsed") from None
    try:
        upload, template, data = form.get("file"), form.get("template"), form.get("data")
        if template is not None:
            if upload is not None or data is None or not isinstance(template, str):
                raise ApiError(422, "request.invalid", "a template job is a 'template' name and a 'data' part")
        elif upload is None or isinstance(upload, str):
            raise ApiError(422, "request.invalid", "the multipart body needs a 'file' part (or 'template' and 'data')")
        raw_policy = form.get("policy")
        if raw_policy is not None:
            text = raw_policy if isinstance(raw_policy, str) else (await raw_policy.read()).decode("utf-8", "replace")
            try:
                loaded = json.loads(text)
                part = PolicyPart.model_validate(loaded)
            except (ValueError, ValidationError):
                raise ApiError(422, "policy.invalid", "the 'policy' part is not a valid policy object") from None
        document = data if template is not None else upload
        assert document is not None
        await _write_part(document, target, limit)
        declared_html = isinstance(upload, UploadFile) and (upload.content_type or "").lower() == "text/html"
    finally:
        await form.close()
    return Spooled(target, part, template=template if isinstance(template, str) else None, declared_html=declared_html)
