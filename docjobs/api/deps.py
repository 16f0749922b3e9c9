"""What every route depends on: the app's context (settings, policies, tenants, the job client) and the tenant
of the request, which only its API key gives."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from docjobs.api.errors import ApiError
from docjobs.domain.job_status import JobStatus
from docjobs.settings.policies import PolicyBook
from docjobs.settings.quotas import DailyBytes, TenantLimits, running_slots_check
from docjobs.settings.tenants import TenantBook
from docjobs.temporal.batches import BatchClient
from docjobs.temporal.client import JobClient, JobNotFound
from docjobs.temporal.settings import TemporalSettings

# How long a start this process admitted counts from its own ledger while visibility does not show it yet: far
# longer than visibility's lag (milliseconds on the dev server, about a second with Elasticsearch).
ADMISSION_GRACE_SECONDS = 30.0


@dataclass
class Reservation:
    """Running slots this process admitted for the job or batch `workflow_id`, while it is being started: every
    request for that same ID shares it (`holders`), so concurrent repeats of one upload take one slot."""

    tenant: str
    workflow_id: str
    slots: int
    at: float
    holders: int = 1
    started: bool = False


class Admissions:
    """Per tenant, in this API process: one admission at a time (count, decide, reserve), and the starts admitted
    that visibility may not show yet, so concurrent requests cannot all see the same free share. The share itself
    is counted in Temporal (visibility: running jobs and batches), which is what holds across processes and
    restarts; this ledger only covers visibility's lag, for `ADMISSION_GRACE_SECONDS` at most."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._locks: dict[str, asyncio.Lock] = {}
        self._lookups: dict[str, asyncio.Lock] = {}
        self._pending: dict[str, Reservation] = {}  # by workflow ID

    def lock(self, tenant: str) -> asyncio.Lock:
        return self._locks.setdefault(tenant, asyncio.Lock())

    def lookups(self, tenant: str) -> asyncio.Lock:
        """One pass of source look-ups at a time per tenant (a JSON batch's), so a tenant holds at most one of the
        shared worker threads with them."""
        return self._lookups.setdefault(tenant, asyncio.Lock())

    def unseen(self, tenant: str) -> list[Reservation]:
        """The tenant's admissions here not known to be in visibility yet; forgets the expired."""
        now = self._clock()
        for workflow_id, held in list(self._pending.items()):
            if now - held.at > ADMISSION_GRACE_SECONDS:
                del self._pending[workflow_id]
        return [held for held in self._pending.values() if held.tenant == tenant]

    def shared(self, workflow_id: str) -> Reservation | None:
        """The admission of a start of `workflow_id` under way here: another request for it joins it."""
        held = self._pending.get(workflow_id)
        if held is not None:
            held.holders += 1
        return held

    def reserve(self, tenant: str, workflow_id: str, slots: int) -> Reservation:
        reservation = Reservation(tenant, workflow_id, slots, self._clock())
        self._pending[workflow_id] = reservation
        return reservation

    def started(self, reservation: Reservation) -> None:
        """The workflow started: it counts here until visibility has it (then visibility's counts include it)."""
        reservation.started = True

    def release(self, reservation: Reservation) -> None:
        """This request started nothing (a refusal, a failure, a repeat found in a race): the admission ends when
        no request holds it and nothing was started under it."""
        reservation.holders -= 1
        if reservation.holders <= 0 and not reservation.started:
            self.forget(reservation)

    def forget(self, reservation: Reservation) -> None:
        if self._pending.get(reservation.workflow_id) is reservation:
            del self._pending[reservation.workflow_id]


@dataclass
class ApiContext:
    """The app's state, in `app.state.context`; `client` is connected when the app starts unless it was given."""

    settings: TemporalSettings
    policies: PolicyBook
    tenants: TenantBook
    upload_limit: int
    client: JobClient | None = None
    usage: DailyBytes = field(init=False)
    admissions: Admissions = field(init=False)

    def __post_init__(self) -> None:
        self.usage = DailyBytes(self.settings.usage_dir)
        self.admissions = Admissions()

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

    async def reserve(self, tenant: str, limits: TenantLimits, workflow_id: str, slots: int = 1) -> Reservation:
        """Before the job or batch `workflow_id` starts (and before anything is stored): reserve up to `slots` of
        the tenant's running jobs (a job: one; a batch: its concurrency), fewer if fewer are free, or refuse when
        none is (429 `running_jobs`). The share in use is each running batch's full slots, each other running job
        and what this process admitted that visibility does not show yet; one admission per tenant at a time, and
        a request for a workflow whose start is under way here joins that admission (the same job: no new slot).
        After the request is read and checked, so a bad request gets its own answer and only a request that would
        start something asks Temporal. `started` or `release` the reservation once the start is done."""
        admissions, batches = self.admissions, BatchClient(self.jobs)
        async with admissions.lock(tenant):
            # Far from the limit, one count decides: the share in use plus every admission here not yet known to be
            # visible (some counted twice) is more than the share can be, so if that leaves `slots` free, they are.
            # Only near the limit is each admission asked about (one visibility query each, under this lock).
            unseen = admissions.unseen(tenant)
            used = await batches.running_slots(tenant, limit=limits.max_running_jobs)
            if used + sum(held.slots for held in unseen) + slots <= limits.max_running_jobs:
                return admissions.shared(workflow_id) or admissions.reserve(tenant, workflow_id, slots)
            pending = 0
            for held in unseen:  # first: once visible, a start is in every count after
                if await batches.visible(held.workflow_id):
                    admissions.forget(held)
                else:
                    pending += held.slots
            joined = admissions.shared(workflow_id)
            if joined is not None:
                return joined
            # Counted again: a start that became visible after the first count was just forgotten as pending.
            used = await batches.running_slots(tenant, limit=limits.max_running_jobs)
            free = running_slots_check(used + pending, limits)
            return admissions.reserve(tenant, workflow_id, min(slots, free))

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
