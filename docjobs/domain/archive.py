"""Archives: a released PAdES B-LTA document kept verifiable by renewing its timestamps (workflows/archive.py).

An archive is opened by the job that released it (`open_archive`: its first version, copied out of the job's run,
which retention will delete) and then lives in a workflow of its own (`Archive`, ID `archive/{job ID}/{run}`), which
sleeps on a durable timer until its renewal is due, renews (`renew_archive`) and continues as new. Its versions and
their evidence are kept in the blob store under `archives/` (never swept by the retention of jobs). These are its
wire shapes: the workflow's input (which continue-as-new carries), its activities' and its `status` query's.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from docjobs.domain.base import Frozen
from docjobs.domain.models import ActivityTiming, BlobRef, StageInput
from docjobs.domain.stage_cost import Cost

ARCHIVE_WORKFLOW = "Archive"  # the workflow type
STATUS_QUERY = "status"  # -> ArchiveStatus
RENEW_SIGNAL = "renew"  # no argument: renew now, whatever is due


class ArchiveVersion(Frozen):
    """One version of an archive: the PDF, the newest timestamp token in it (DER, the worker's own record of what
    it wrote, so that no worker parses the PDF to learn it) and, from the second on, evidence naming the one before."""

    number: int = Field(ge=1)
    document: BlobRef
    token: BlobRef
    evidence: BlobRef | None = None  # None: the first version, whose evidence is its job's
    made_at: datetime


class ArchiveState(Frozen):
    """The `Archive` workflow's input, and what it continues as new with after each renewal."""

    archive_id: str
    job_id: str
    tenant: str
    versions: list[ArchiveVersion] = Field(min_length=1)
    renew_by: datetime  # when the next renewal is due (spread within its day: `renewal_time`)
    renew_before_days: int = Field(ge=1)
    task_queue: str | None = None  # where `renew_archive` runs (None: the workflow's own queue)
    # The job's lease (a renewal's heartbeat timeout: a lost worker's renewal is taken over after it) and attempts.
    timing: ActivityTiming = ActivityTiming()


class OpenArchiveInput(StageInput):
    """The job's released artifact and the staged token of its document timestamp, to copy into the archive."""

    archive_id: str
    tenant: str
    artifact: BlobRef
    token: BlobRef
    renew_before_days: int = Field(ge=1)


class RenewInput(StageInput):
    archive_id: str
    tenant: str
    current: ArchiveVersion
    renew_before_days: int = Field(ge=1)


class ArchiveStep(Frozen):
    """What `open_archive` and `renew_archive` return: the version made and when the next renewal is due."""

    version: ArchiveVersion
    renew_by: datetime
    attempt: int = 1
    cost: Cost = Cost()


class ArchiveStatus(Frozen):
    """The `status` query's answer (`starter.py archive status`)."""

    archive_id: str
    job_id: str
    tenant: str
    versions: list[ArchiveVersion]
    renew_by: datetime
    renewing: bool = False  # a renewal is running now
    last_problem: str | None = None  # the failure code of the last renewal that failed (it is tried again)
