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
from docjobs.domain.models import ActivityTiming, BlobRef, DocumentJobInput, JobOverrides, SourceRef
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
    """Everything fixed when the batch is accepted; the documents' jobs are started from it and the batch's pin.

    The batch asks for the policy `policy_name` (None: the default) with `overrides`, as a single job does: no client
    resolves it. The batch's first step resolves it on a worker and pins it (`BatchPin`); each document then asks
    for the name and overrides, held to the pinned fingerprint."""

    batch_id: str
    tenant: str
    key: str  # the batch's key: its documents' job keys derive from it (docjobs/domain/idempotency.py)
    # Keys the documents' digests in their job keys (`batch_document_key`), so that no ID tells a document's digest.
    # None: a batch accepted before (an old history): its documents keep the keys they were given.
    document_salt: str | None = Field(default=None, pattern="^[0-9a-f]{64}$")
    policy_name: str | None = None  # what the batch asks for (None: the default policy)
    # The policy a client resolved, in a batch accepted before batches pinned their own (an old history): its pin
    # is taken from it; None: pinned by the batch's first step.
    policy: Policy | None = None
    # None: a batch accepted before its documents started with the public input (an old history): they ask for
    # the overrides that remake `policy` of its named one (activities/batch.py), held to its fingerprint.
    overrides: JobOverrides | None = None
    manifest: BlobRef
    total: int = Field(ge=1)
    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1, le=MAX_CONCURRENCY)
    documents_per_run: int = Field(default=DOCUMENTS_PER_RUN, ge=1)
    deadline_seconds: int | None = Field(default=None, ge=1)  # each document's own deadline (None: the policy's)
    timing: ActivityTiming = ActivityTiming()
    job_task_queue: str  # where the documents' jobs run
    ocr_task_queue: str | None = None
    notify_task_queue: str | None = None
    accepted_at: datetime


class BatchPin(Frozen):
    """The policy a batch pinned: resolved once, by its first step on a worker (or, in an old history, by the client
    that accepted it), and what every document is held to."""

    name: str
    version: str  # what the batch's status shows (Policy.version: terms left out)
    fingerprint: str  # what each document must resolve to (Policy.fingerprint: terms included)
    watermark_mode: str  # named in each document's one-line summary
    deadline_seconds: int = Field(ge=1)  # each document's own deadline: the batch's, else the policy's

    @classmethod
    def of(cls, policy: Policy, deadline_seconds: int | None) -> BatchPin:
        return cls(
            name=policy.name,
            version=policy.version,
            fingerprint=policy.fingerprint,
            watermark_mode=policy.watermark.mode.value,
            deadline_seconds=deadline_seconds or policy.deadline_seconds,
        )


class PinBatchPolicy(Frozen):
    """The batch's first step: resolve what it asks for, as its tenant may (the `resolve` step's rules)."""

    tenant: str
    policy_name: str | None
    overrides: JobOverrides
    deadline_seconds: int | None = None


def document_input(pin: BatchPin, tenant: str, overrides: JobOverrides, source: SourceRef) -> DocumentJobInput:
    """A document's public input: the batch's policy name and `overrides` (what the batch was asked), held to
    the policy the batch pinned (its fingerprint, terms included: `Policy.fingerprint`), so a policy file changed
    while the batch runs fails `policy.changed`."""
    return DocumentJobInput(
        version=1,
        tenant=tenant,
        source=source,
        policy=pin.name,
        overrides=overrides,
        deadline_seconds=pin.deadline_seconds,
        policy_version=pin.fingerprint,
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
    pin: BatchPin | None = None  # None: not pinned yet (its first run), or an old history's (from `request.policy`)


class BatchState(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"  # every document's job ended (each with its own outcome)
    CANCELED = "canceled"  # canceled: running jobs were canceled, the rest never started
    FAILED = "failed"  # its policy could not be pinned (`failure_code`: policy.unknown, .forbidden, .invalid): no job
    TERMINATED = "terminated"  # ended outside its own logic (an operator's terminate): its jobs were left as they were


class BatchStatus(BaseModel):
    """The batch's progress (its query) and result; the client adds the outcomes of earlier runs."""

    batch_id: str
    tenant: str
    policy_version: str | None  # the pinned policy's version (None: not pinned yet, or it could not be)
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
    failure_code: str | None = None  # a `failed` batch's: why its policy could not be pinned
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
    pin: BatchPin | None = None  # None: scheduled by older code (its request's policy is the pin)
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
