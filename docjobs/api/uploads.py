"""An upload spooled to a file, never more than the limit read: a raw body, or multipart `file` (or `template` +
`data`) + JSON `policy`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, BinaryIO

from pydantic import BaseModel, ValidationError, WithJsonSchema
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from docjobs.api.deps import ApiContext
from docjobs.api.errors import ApiError
from docjobs.domain.base import POLICY_NAME_PATTERN
from docjobs.domain.errors import DocJobError
from docjobs.domain.linear_regex import UNSUPPORTED_FEATURES, UnsupportedRegex
from docjobs.domain.models import JobOverrides
from docjobs.domain.policy import BUILTIN_PATTERN_NAMES, OcrMode, WatermarkMode
from docjobs.settings.config import ConfigError
from docjobs.settings.policies import PolicyBook, job_overrides

MULTIPART_SLACK = 64 * 1024  # boundaries, part headers and the policy part on top of the file itself
CHUNK = 64 * 1024
UNSUPPORTED_REGEX_MESSAGE = (  # never the regex itself: the answer names the kind of problem only
    f"a redaction regex uses features the linear-time regex engine (RE2) does not support ({UNSUPPORTED_FEATURES})"
)


HEAD_BYTES = 1024  # what the type sniffer looks at


class TooLarge(Exception):
    pass


@dataclass(frozen=True)
class Spooled:
    """The spooled document (for a template job: its JSON data), hashed and sniffed as it was written: nothing
    reads it again before it is stored."""

    path: Path
    sha256: str
    size: int
    head: bytes  # its first bytes, for the type sniffer


@dataclass(frozen=True)
class Upload:
    """What was uploaded: the spooled document, the policy part, and what the caller said the document is (HTML
    has no magic bytes: only `Content-Type: text/html` makes a body HTML)."""

    document: Spooled
    part: PolicyPart
    template: str | None = None  # multipart `template`: the document is that template's JSON data
    declared_html: bool = False


class HashingWriter:
    """Writes chunks to a file, hashing them and keeping the head, and refuses to go past `limit` bytes."""

    def __init__(self, out: BinaryIO, limit: int) -> None:
        self._out = out
        self._limit = limit
        self._digest = hashlib.sha256()
        self._head = b""
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self._limit:
            raise TooLarge
        if len(self._head) < HEAD_BYTES:
            self._head += chunk[: HEAD_BYTES - len(self._head)]
        self._digest.update(chunk)
        self._out.write(chunk)

    def spooled(self, path: Path) -> Spooled:
        return Spooled(path=path, sha256=self._digest.hexdigest(), size=self.size, head=self._head)


# What the OpenAPI document declares of each field (`WithJsonSchema`: the schema only; parsing stays as loose as
# it was, so a value out of these rules keeps its error code, `policy.invalid` or `policy.unknown`).
NUMBER = r"-?[0-9]+(\.[0-9]+)?"
REGION_PATTERN = rf"^[1-9][0-9]*:({NUMBER},){{3}}{NUMBER}$"


def _nullable(schema: dict[str, Any]) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [schema, {"type": "null"}]})


class PolicyPart(BaseModel):
    """The JSON `policy` part of a multipart upload: a named policy and optional overrides."""

    name: Annotated[
        str | None,
        _nullable({"type": "string", "pattern": POLICY_NAME_PATTERN, "description": "a configured policy's name"}),
    ] = None
    watermark: Annotated[
        str | None,
        _nullable({"type": "string", "minLength": 1, "maxLength": 200, "description": "printable in the stamp's font"}),
    ] = None
    mode: Annotated[str | None, _nullable({"type": "string", "enum": [mode.value for mode in WatermarkMode]})] = None
    ocr: Annotated[str | None, _nullable({"type": "string", "enum": [mode.value for mode in OcrMode]})] = None
    redact: Annotated[  # built-in pattern names or regexes, as `--redact`
        list[str],
        WithJsonSchema(
            {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "description": f"built-in pattern names ({', '.join(BUILTIN_PATTERN_NAMES)}) or RE2 regexes",
            }
        ),
    ] = []
    redact_regions: Annotated[  # `PAGE:X0,Y0,X1,Y1`, as `--redact-region`
        list[str],
        WithJsonSchema(
            {
                "type": "array",
                "items": {"type": "string", "pattern": REGION_PATTERN},
                "description": "`PAGE:X0,Y0,X1,Y1`: a page from 1 and a box of PDF points with an area",
            }
        ),
    ] = []


def policy_part_schema() -> dict[str, Any]:
    """The `policy` part's JSON schema, as the OpenAPI document declares it."""
    return PolicyPart.model_json_schema()


def requested_policy(book: PolicyBook, part: PolicyPart) -> tuple[str, JobOverrides]:
    """The policy the request names (the default if none; `422 policy.unknown`) and its overrides, checked before
    anything is stored (`422 policy.invalid`): the job's `resolve` step applies them."""
    if part.name is not None and part.name not in book.policies:
        raise ApiError(422, "policy.unknown", "no policy of that name is configured")
    with invalid_overrides():
        overrides = job_overrides(
            watermark=part.watermark,
            mode=part.mode,
            ocr=part.ocr,
            redact=part.redact,
            redact_regions=part.redact_regions,
        )
    return book.get(part.name).name, overrides


@contextmanager
def invalid_overrides() -> Iterator[None]:
    """Overrides that cannot apply as `422 policy.invalid` (naming the regex features the engine lacks, if so)."""
    try:
        yield
    except ValidationError as error:
        if any(isinstance(detail.get("ctx", {}).get("error"), UnsupportedRegex) for detail in error.errors()):
            raise ApiError(422, "policy.invalid", UNSUPPORTED_REGEX_MESSAGE) from None
        raise ApiError(422, "policy.invalid", "the policy overrides are not valid") from None
    except ConfigError:
        raise ApiError(422, "policy.invalid", "the policy overrides are not valid") from None


FORBIDDEN_MESSAGE = "this tenant may not use that policy"


def tenant_policy(context: ApiContext, tenant: str, part: PolicyPart) -> tuple[str, JobOverrides]:
    """`requested_policy`, if the tenant may name it (`403 policy.forbidden` otherwise: a trusted-only policy it
    was not given, or one its list leaves out)."""
    name, overrides = requested_policy(context.policies, part)
    try:
        context.policies.check_allowed(name, context.tenants.policies(tenant))
    except DocJobError:
        raise ApiError(403, "policy.forbidden", FORBIDDEN_MESSAGE) from None
    return name, overrides


async def _limited(stream: AsyncIterator[bytes], limit: int) -> AsyncGenerator[bytes, None]:
    total = 0
    async for chunk in stream:
        total += len(chunk)
        if total > limit:
            raise TooLarge
        yield chunk


async def spool_body(request: Request, target: Path, limit: int) -> Spooled:
    """The raw body into `target`, never more than `limit` bytes read, hashed as it streams in."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise TooLarge
    with target.open("wb") as out:
        writer = HashingWriter(out, limit)
        async for chunk in _limited(request.stream(), limit):
            writer.write(chunk)
    return writer.spooled(target)


async def _write_part(value: UploadFile | str, target: Path, limit: int) -> Spooled:
    with target.open("wb") as out:
        writer = HashingWriter(out, limit)
        if isinstance(value, str):  # a plain form field (e.g. JSON data sent without a file name)
            writer.write(value.encode())
        else:
            while chunk := await value.read(CHUNK):
                writer.write(chunk)
    return writer.spooled(target)


async def spool(request: Request, tmp: Path, limit: int) -> Upload:
    """The document in `tmp` (never more than `limit` bytes read), hashed as it streams in, the policy part, and
    what the document is."""
    content_type = request.headers.get("content-type", "")
    media_type = content_type.split(";")[0].strip().lower()
    target = tmp / "document"
    part = PolicyPart(name=request.query_params.get("policy"))
    if media_type != "multipart/form-data":
        return Upload(await spool_body(request, target, limit), part, declared_html=media_type == "text/html")
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
        spooled = await _write_part(document, target, limit)
        declared_html = isinstance(upload, UploadFile) and (upload.content_type or "").lower() == "text/html"
    finally:
        await form.close()
    return Upload(spooled, part, template=template if isinstance(template, str) else None, declared_html=declared_html)
