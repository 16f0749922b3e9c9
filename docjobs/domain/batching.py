"""Batches: many documents, one policy, one batch workflow that starts each document as its own job.

Pure models and rules (the batch workflow imports this module). What may enter a batch's history: the request
(policy, counts, a reference to the manifest), job IDs, outcome codes and blob references. The list of sources
itself lives in a manifest blob in the store, referenced by its digest, and so do the outcomes of every run
after the first continue-as-new: a batch of ten thousand documents never carries either list in its history.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field, computed_field

from docjobs.domain.base import Frozen
from docjobs.domain.models import ActivityTiming, BlobRef, DocumentJobInput, JobOverrides, JobRequest, SourceRef
from docjobs.domain.policy import Policy
from docjobs.domain.states import JobState

DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 100
# Documents a batch run starts before it continues as new. Each costs about a dozen history events at most
# (its share of a start and a wait activity and their workflow tasks), so a run stays near 6,000 events,
# well under Temporal's warning at 10,240 and its limit at 51,200.
DOCUMENTS_PER_RUN = 500


def batch_prefix(batch_id: str) -> str:
    """The batch's folder in the store (manifest, outcomes): derived from its ID, never from a client key."""
    return f"batches/{hashlib.sha256(batch_id.encode()).hexdigest()[:32]}"


class BatchManifest(Frozen):
    """The batch's documents in order, each a stored source (`sources/<sha256>`), distinct by digest."""

    sources: list[BlobRef]


class BatchRequest(Frozen):
    """Everything fixed when the batch is accepted; the documents' jobs are started from it alone.

    `policy` is the named policy `policy.name` resolved with `overrides` when the batch was accepted: the batch
    shows its version, and each document asks for the name and overrides with that version."""

    batch_id: str
    tenant: str
    key: str  # the batch's key: its documents' job keys derive from it (docjobs/domain/idempotency.py)
    # Keys the documents' digests in their job keys (`batch_document_key`), so that no ID tells a document's digest.
    # None: a batch accepted before (an old history): its documents keep the keys they were given.
    document_salt: str | None = Field(default=None, pattern="^[0-9a-f]{64}$")
    policy: Policy
    # None: a batch accepted before its documents started with the public input (an old history): they keep
    # starting with the internal request that pins `policy` (`document_request`).
    overrides: JobOverrides | None = None
    manifest: BlobRef
    total: int = Field(ge=1)
    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1, le=MAX_CONCURRENCY)
    documents_per_run: int = Field(default=DOCUMENTS_PER_RUN, ge=1)
    deadline_seconds: int = Field(ge=1)  # each document's own deadline
    timing: ActivityTiming = ActivityTiming()
    job_task_queue: str  # where the documents' jobs run
    ocr_task_queue: str | None = None
    notify_task_queue: str | None = None
    accepted_at: datetime


def document_input(batch: BatchRequest, overrides: JobOverrides, source: SourceRef) -> DocumentJobInput:
    """A document's public input: the batch's policy name and `overrides` (what the batch was asked), held to
    the policy the batch pinned (its fingerprint, terms included: `Policy.fingerprint`), so a policy file changed
    while the batch runs fails `policy.changed`."""
    return DocumentJobInput(
        version=1,
        tenant=batch.tenant,
        source=source,
        policy=batch.policy.name,
        overrides=overrides,
        deadline_seconds=batch.deadline_seconds,
        policy_version=batch.policy.fingerprint,
    )


def document_request(batch: BatchRequest, job_id: str, source: BlobRef, accepted_at: datetime) -> JobRequest:
    """A document's internal job request, pinning the batch's whole policy: only for a batch accepted before its
    documents started with the public input (`BatchRequest.overrides` None)."""
    return JobRequest(
        job_id=job_id,
        tenant=batch.tenant,
        source=source,
        page_count=0,
        policy=batch.policy,
        policy_version=batch.policy.version,
        deadline_seconds=batch.deadline_seconds,
        accepted_at=accepted_at,
        timing=batch.timing,
        ocr_task_queue=batch.ocr_task_queue,
        notify_task_queue=batch.notify_task_queue,
    )


class RunningJob(Frozen):
    index: int  # position in the manifest
    job_id: str


class JobOutcome(Frozen):
    """How one document's job ended: its state and failure code, never content."""

    index: int
    job_id: str
    state: JobState
    failure_code: str | None = None


class BatchProgress(BaseModel):
    """What a batch run hands to the next one when it continues as new: counts, the running jobs (at most
    `concurrency`), the next manifest index and the outcome blobs of the runs before."""

    next_index: int = 0
    runs: int = 1
    succeeded: int = 0
    failed: int = 0
    quarantined: int = 0
    canceled: int = 0
    running: list[RunningJob] = Field(default_factory=list)
    segments: list[BlobRef] = Field(default_factory=list)


class BatchInput(Frozen):
    request: BatchRequest
    progress: BatchProgress | None = None  # None: the batch's first run


class BatchState(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"  # every document's job ended (each with its own outcome)
    CANCELED = "canceled"  # canceled: running jobs were canceled, the rest never started
    TERMINATED = "terminated"  # ended outside its own logic (an operator's terminate): its jobs were left as they were


class BatchStatus(BaseModel):
    """The batch's progress (its query) and result; the client adds the outcomes of earlier runs."""

    batch_id: str
    tenant: str
    policy_version: str
    state: BatchState
    total: int
    succeeded: int = 0
    failed: int = 0
    quarantined: int = 0
    canceled: int = 0
    running: int = 0
    concurrency: int
    runs: int = 1  # workflow runs so far: continue-as-new starts a new one
    accepted_at: datetime
    finished_at: datetime | None = None
    outcomes: list[JobOutcome] = Field(default_factory=list)  # by manifest index
    segments: list[BlobRef] = Field(default_factory=list)  # outcomes stored by earlier runs (internal)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ended(self) -> int:
        return self.succeeded + self.failed + self.quarantined + self.canceled

    @computed_field  # type: ignore[prop-decorator]
    @property
    def not_started(self) -> int:
        return self.total - self.ended - self.running


class StartDocuments(Frozen):
    """Start the jobs of manifest entries `first` .. `first + count - 1`."""

    batch: BatchRequest
    first: int = Field(ge=0)
    count: int = Field(ge=1)


class AwaitJobs(Frozen):
    """Wait until at least one of these jobs has ended, or `wait_seconds` passed."""

    job_ids: list[str]
    wait_seconds: float = Field(gt=0)


class EndedJob(Frozen):
    job_id: str
    state: JobState
    failure_code: str | None = None


class RecordOutcomes(Frozen):
    batch_id: str
    run: int
    outcomes: list[JobOutcome]
