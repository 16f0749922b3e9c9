"""What every route depends on: the app's context (settings, policies, tenants, the job client) and the tenant
of the request, which only its API key gives."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from docjobs.api.errors import ApiError
from docjobs.domain.models import JobStatus
from docjobs.settings.policies import PolicyBook
from docjobs.settings.quotas import DailyBytes, TenantLimits, running_jobs_check
from docjobs.settings.tenants import TenantBook
from docjobs.temporal.client import JobClient, JobNotFound
from docjobs.temporal.settings import TemporalSettings


@dataclass
class ApiContext:
    """The app's state, in `app.state.context`; `client` is connected when the app starts unless it was given."""

    settings: TemporalSettings
    policies: PolicyBook
    tenants: TenantBook
    upload_limit: int
    client: JobClient | None = None
    usage: DailyBytes = field(init=False)

    def __post_init__(self) -> None:
        self.usage = DailyBytes(self.settings.usage_dir)

    def limits(self, tenant: str) -> TenantLimits:
        """The tenant's limits: its own (tenants file), else the deployment's defaults."""
        return self.tenants.limits(tenant, self.settings.tenant_limits)

    async def admit(self, tenant: str, *, takes_bytes: bool = True) -> TenantLimits:
        """Before a body is read: refuse an upload (`takes_bytes`) from a tenant with no byte left today (429
        `tenant.quota_exceeded`); returns the tenant's limits."""
        limits = self.limits(tenant)
        if takes_bytes:
            await asyncio.to_thread(self.usage.ensure_room, tenant, limits)
        return limits

    async def check_running(self, tenant: str, limits: TenantLimits) -> None:
        """Before a job or batch starts (and before anything is stored): refuse a tenant that has its maximum of
        jobs running already (429). After the request is read and checked, so a bad request gets its own answer
        and the check needs Temporal only for a request that would start something."""
        running_jobs_check(await self.jobs.count_running(tenant), limits)

    def limits_left_today(self, tenant: str, limits: TenantLimits) -> int:
        """How many more bytes the tenant may send today."""
        return max(0, limits.max_bytes_per_day - self.usage.used(tenant))

    async def charge(self, tenant: str, size: int, limits: TenantLimits) -> None:
        """Count `size` accepted bytes against the tenant's day, or refuse them (429) if they do not fit."""
        await asyncio.to_thread(self.usage.charge, tenant, size, limits)

    async def refund(self, tenant: str, size: int) -> None:
        """Give back bytes charged for what was not accepted after all (a refusal, or a repeat of a job)."""
        if size:
            await asyncio.to_thread(self.usage.refund, tenant, size)

    @property
    def jobs(self) -> JobClient:
        if self.client is None:
            raise RuntimeError("the job client is connected when the app starts")
        return self.client


def api_context(request: Request) -> ApiContext:
    context: ApiContext = request.app.state.context
    return context


Context = Annotated[ApiContext, Depends(api_context)]

BEARER = HTTPBearer(auto_error=False, description="a tenant API key (`python starter.py tenant add NAME`)")


def authenticated_tenant(
    request: Request, context: Context, _: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)] = None
) -> str:
    """The tenant of the `Authorization: Bearer KEY` header; the only source of a request's tenant."""
    authorization = request.headers.get("authorization")
    if not authorization:
        raise ApiError(401, "auth.required", "send 'Authorization: Bearer KEY'", {"WWW-Authenticate": "Bearer"})
    scheme, _sep, key = authorization.partition(" ")
    tenant = context.tenants.authenticate(key.strip()) if scheme.lower() == "bearer" and key.strip() else None
    if tenant is None:
        raise ApiError(401, "auth.invalid", "the API key is not valid", {"WWW-Authenticate": "Bearer"})
    return tenant


Tenant = Annotated[str, Depends(authenticated_tenant)]


def owned_job(job_id: str, tenant: str) -> str:
    """The job ID, if the tenant owns it; another tenant's job answers as if it did not exist."""
    if not job_id.startswith(f"{tenant}/"):
        raise ApiError(404, "job.not_found", "no such job")
    return job_id


async def owned_status(context: ApiContext, job_id: str, tenant: str) -> JobStatus:
    try:
        return await context.jobs.status(owned_job(job_id, tenant))
    except JobNotFound:
        raise ApiError(404, "job.not_found", "no such job") from None
