"""What every route depends on: the app's context (settings, policies, tenants, the job client) and the tenant
of the request, which only its API key gives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from docjobs.api.errors import ApiError
from docjobs.models import JobStatus
from docjobs.policies import PolicyBook
from docjobs.temporal.client import JobClient, JobNotFound
from docjobs.temporal.settings import TemporalSettings
from docjobs.tenants import TenantBook


@dataclass
class ApiContext:
    """The app's state, in `app.state.context`; `client` is connected when the app starts unless it was given."""

    settings: TemporalSettings
    policies: PolicyBook
    tenants: TenantBook
    upload_limit: int
    client: JobClient | None = None

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
