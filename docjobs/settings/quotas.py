"""Fair shares: the limits each tenant has, and the ledger of the bytes each tenant had accepted today (UTC).

A tenant's limits are its own (`starter.py tenant limits NAME ...`, in the tenants file) where it has them, else
the deployment's defaults (`DOCJOBS_TENANT_MAX_*`). Three limits:

- `running_jobs`: how many of its jobs may run at once (counted by the API in Temporal visibility, each running
  batch by its full concurrency, when a job or batch is admitted);
- `bytes_per_day`: how many bytes the API may accept from it per UTC day (uploads, batch files, template
  bundles), counted here;
- `batch_bytes`: how many bytes one batch may hold (the files of a multipart batch, counted while they stream
  in; the stored sources a JSON batch names, by their recorded sizes).

Over a limit the API answers `429 tenant.quota_exceeded`, naming the limit and never the content, with
`Retry-After`. Free of Temporal and HTTP: plain files and numbers.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

RUNNING_JOBS: Final = "running_jobs"
BYTES_PER_DAY: Final = "bytes_per_day"
BATCH_BYTES: Final = "batch_bytes"
LimitName = Literal["running_jobs", "bytes_per_day", "batch_bytes"]

DEFAULT_MAX_RUNNING_JOBS = 20
DEFAULT_MAX_BYTES_PER_DAY = 5 * 1024**3  # 5 GiB
DEFAULT_MAX_BATCH_BYTES = 200 * 1024**2  # 200 MiB
RUNNING_JOBS_RETRY_AFTER = 10  # seconds: about as long as a small job takes
QUOTA_EXCEEDED = "tenant.quota_exceeded"


class TenantLimits(BaseModel):
    """One tenant's limits (or the deployment's defaults)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_running_jobs: int = Field(default=DEFAULT_MAX_RUNNING_JOBS, ge=1)
    max_bytes_per_day: int = Field(default=DEFAULT_MAX_BYTES_PER_DAY, ge=1)
    max_batch_bytes: int = Field(default=DEFAULT_MAX_BATCH_BYTES, ge=1)


class QuotaExceeded(Exception):
    """A tenant is over one of its limits: which one, and when a retry may succeed (seconds)."""

    def __init__(self, limit: LimitName, retry_after: int) -> None:
        super().__init__(f"{QUOTA_EXCEEDED}: {limit}")
        self.limit: LimitName = limit
        self.retry_after = max(1, retry_after)


def seconds_to_next_day(now: datetime) -> int:
    """Seconds until the next UTC midnight, when the day's byte count starts again (at least 1)."""
    tomorrow = datetime.combine(now.astimezone(UTC).date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    return max(1, int((tomorrow - now).total_seconds()) + 1)


def running_slots_check(used: int, limits: TenantLimits) -> int:
    """The running slots the tenant has free (at least 1), its share in use being `used` (running jobs, each
    running batch by its concurrency); refuse when none is free."""
    free = limits.max_running_jobs - used
    if free < 1:
        raise QuotaExceeded(RUNNING_JOBS, RUNNING_JOBS_RETRY_AFTER)
    return free


def batch_bytes_check(size: int, limits: TenantLimits, retry_after: int = RUNNING_JOBS_RETRY_AFTER) -> None:
    """Refuse a batch of more than the tenant's bytes per batch (a retry succeeds only split in smaller ones)."""
    if size > limits.max_batch_bytes:
        raise QuotaExceeded(BATCH_BYTES, retry_after)


class DailyBytes:
    """Bytes accepted per tenant and UTC day: one small counter file per tenant (`FOLDER/TENANT/YYYY-MM-DD`),
    changed under an exclusive lock, so every API process sharing the folder counts together. Days past are
    deleted when the tenant is next charged."""

    def __init__(self, folder: Path, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.folder = folder
        self._clock = clock

    def _file(self, tenant: str, day: date) -> Path:
        return self.folder / tenant / day.isoformat()

    def used(self, tenant: str) -> int:
        """Bytes accepted from the tenant today."""
        try:
            return _parse(self._file(tenant, self._clock().date()).read_bytes())
        except FileNotFoundError:
            return 0

    def ensure_room(self, tenant: str, limits: TenantLimits) -> None:
        """Refuse at once when the tenant has no byte left today (before a body is read)."""
        now = self._clock()
        if self.used(tenant) >= limits.max_bytes_per_day:
            raise QuotaExceeded(BYTES_PER_DAY, seconds_to_next_day(now))

    def charge(self, tenant: str, size: int, limits: TenantLimits) -> None:
        """Count `size` bytes against today's allowance, or refuse them (nothing counted) if they do not fit."""
        now = self._clock()

        def add(used: int) -> int:
            if used + size > limits.max_bytes_per_day:
                raise QuotaExceeded(BYTES_PER_DAY, seconds_to_next_day(now))
            return used + size

        self._change(tenant, now.date(), add)

    def refund(self, tenant: str, size: int) -> None:
        """Give back bytes charged for something that was not accepted after all (a repeat, a refusal)."""
        self._change(tenant, self._clock().date(), lambda used: max(0, used - size))

    def _change(self, tenant: str, day: date, change: Callable[[int], int]) -> None:
        folder = self.folder / tenant
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._file(tenant, day), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            used = _parse(os.read(fd, 64))
            updated = change(used)
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, str(updated).encode())
        finally:
            os.close(fd)
        for old in folder.iterdir():
            if old.name != day.isoformat():
                old.unlink(missing_ok=True)


def _parse(raw: bytes) -> int:
    text = raw.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else 0
