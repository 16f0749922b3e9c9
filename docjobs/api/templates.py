"""The template routes: store a version of a template (a zip bundle) and list the tenant's templates.

A template belongs to the tenant of the API key. Storing one checks only its size and magic bytes: its
contents are opened (with limits) by the `generate` stage of the jobs that use it.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.requests import ClientDisconnect

from docjobs.api.deps import Context, Tenant
from docjobs.api.errors import ERRORS, ApiError
from docjobs.api.uploads import TooLarge, spool_body
from docjobs.pdf.inspect import sniff_kind
from docjobs.store.templates import TEMPLATE_NAME_RULE, TemplateVersion, is_valid_template_name

router = APIRouter()


class TemplateInfo(BaseModel):
    name: str
    version: str  # the sha256 of the bundle
    size: int
    added_at: str

    @classmethod
    def of(cls, version: TemplateVersion) -> TemplateInfo:
        return cls(
            name=version.name,
            version=version.bundle.sha256,
            size=version.bundle.size,
            added_at=version.added_at.isoformat(),
        )


class TemplateList(BaseModel):
    templates: list[TemplateInfo]


@router.put(
    "/v1/templates/{name}",
    response_model=TemplateInfo,
    responses=ERRORS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/zip": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def put_template(name: str, request: Request, context: Context, tenant: Tenant) -> TemplateInfo:
    """Store a zip bundle (`index.html`, a Jinja template, with its CSS, images and fonts) as the current version
    of the tenant's template `name`; its version is the bundle's sha256."""
    if not is_valid_template_name(name):
        raise ApiError(422, "request.invalid", f"a template name is {TEMPLATE_NAME_RULE}")
    limit = context.upload_limit
    limits = await context.admit(tenant)
    spool_dir = context.settings.spool_dir
    spool_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=spool_dir, prefix="template-") as folder:
        bundle = Path(folder) / "template.zip"
        try:
            spooled = await spool_body(request, bundle, limit)
        except TooLarge:
            raise ApiError(413, "input.too_large", f"the bundle is larger than {limit} bytes") from None
        except ClientDisconnect:
            raise ApiError(400, "request.incomplete", "the client left before the body was complete") from None
        with bundle.open("rb") as head:
            if sniff_kind(head.read(4)) != "zip":
                raise ApiError(415, "input.unsupported", "the body is not a zip bundle")
        await context.charge(tenant, spooled.size, limits)
        try:
            version = await asyncio.to_thread(context.jobs.templates.add, tenant, name, bundle)
        except BaseException:
            await context.refund(tenant, spooled.size)
            raise
    return TemplateInfo.of(version)


@router.get("/v1/templates", response_model=TemplateList, responses=ERRORS)
async def list_templates(context: Context, tenant: Tenant) -> TemplateList:
    """The tenant's templates, each at its current version."""
    versions = await asyncio.to_thread(context.jobs.templates.list, tenant)
    return TemplateList(templates=[TemplateInfo.of(version) for version in versions])
