"""What a document job admits: its input, read raw, and whether this workflow may run it (workflows/document_job.py).

Whoever reaches the Temporal frontend can start the workflow, so it takes its input raw (an input the SDK cannot
convert would fail the workflow task forever) and `admit` trusts nothing: it refuses an input it cannot read
(`request.invalid`), one the payload codec did not accept or that was sealed for no workflow (`codec.unsealed`), a
request for another job ID than its own workflow ID, an input (public or internal) whose tenant is not its ID's
prefix, and an internal request whose source is not a source (`sources/<sha256>`) (`request.invalid`), before any
activity runs. A new run refuses the internal request altogether (`request.invalid`): it pins a whole policy that
no `resolve` checked (its tenant's allowed policies, the policy file), so it is only what older runs were started
with, and their histories replay. The patches keep runs started before a refusal existed replaying as they ran.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from docjobs.domain.errors import FailureCode
    from docjobs.domain.idempotency import is_valid_client_key
    from docjobs.domain.job_status import JobStatus, TransitionRecord
    from docjobs.domain.models import BlobRef, DocumentJobInput, JobRequest
    from docjobs.domain.policy import WatermarkMode
    from docjobs.domain.sealing import UNBOUND_FIELD, UNSEALED_ENCODING
    from docjobs.domain.states import JobState

NO_REQUEST = RawValue(Payload())  # a start without arguments: as unreadable as any other bad input

if TYPE_CHECKING:  # clients start a job with a DocumentJobInput; the workflow gets it raw and validates it itself
    RequestInput = DocumentJobInput | JobRequest | RawValue
else:
    RequestInput = RawValue


def owns(workflow_id: str, tenant: str) -> bool:
    """Whether the workflow ID is `{tenant}/{key}`, with a key a client could have chosen."""
    prefix, slash, key = workflow_id.partition("/")
    return bool(slash) and prefix == tenant and is_valid_client_key(key)


REFUSE_UNBOUND_PATCH = "refuse-unbound-input"
REQUEST_TENANT_PATCH = "request-tenant-and-source"
REFUSE_INTERNAL_PATCH = "refuse-internal-request"  # only old histories were started with a JobRequest


def is_source_key(source: BlobRef) -> bool:
    """Whether the blob is a source in the content-addressed layout, under its own digest."""
    return source.key == f"sources/{source.sha256}"


def admit(request: RequestInput, workflow_id: str) -> DocumentJobInput | JobRequest | FailureCode:
    """The input, if this workflow may run it; else the failure code that refuses it."""
    if not isinstance(request, RawValue):
        return admit(RawValue(workflow.payload_converter().to_payload(request)), workflow_id)
    if request.payload.metadata.get("encoding") == UNSEALED_ENCODING:
        return FailureCode.CODEC_UNSEALED
    # Sealed, but for no workflow (only the codec endpoint's former `/encode` sealed inputs so). The patch is
    # asked only on this path: a run started before the refusal existed replays as it ran.
    if UNBOUND_FIELD in request.payload.metadata and workflow.patched(REFUSE_UNBOUND_PATCH):
        return FailureCode.CODEC_UNSEALED
    converter = workflow.payload_converter()
    try:
        public = converter.from_payload(request.payload, DocumentJobInput)
    except Exception:  # noqa: BLE001 - not the public shape: maybe the internal one
        public = None
    if isinstance(public, DocumentJobInput):
        return public if owns(workflow_id, public.tenant) else FailureCode.REQUEST_INVALID
    try:
        admitted = converter.from_payload(request.payload, JobRequest)
    except Exception:  # noqa: BLE001 - any conversion failure (encoding, JSON, model) is an unreadable request
        return FailureCode.REQUEST_INVALID
    if not isinstance(admitted, JobRequest) or admitted.job_id != workflow_id:
        return FailureCode.REQUEST_INVALID
    # Only runs started before the public input was the one shape in took the internal request: a new run is
    # refused (no marker in an old history, so it replays on, through the checks it ran).
    if workflow.patched(REFUSE_INTERNAL_PATCH):
        return FailureCode.REQUEST_INVALID
    # The internal request's tenant owns its job ID as a public input's must, and its source is a source
    # (`sources/<sha256>`), not another job's artifact or a template. Patched as above: asked only on refusal.
    if not (owns(workflow_id, admitted.tenant) and is_source_key(admitted.source)) and workflow.patched(
        REQUEST_TENANT_PATCH
    ):
        return FailureCode.REQUEST_INVALID
    return admitted


def placeholder_status(workflow_id: str, started_at: datetime, job: DocumentJobInput | None = None) -> JobStatus:
    """The status of a job without a resolved request (yet, or ever: a refused one): its own ID and times, what
    its public input says (tenant, class, input digest) if it has one, placeholders for the rest."""
    return JobStatus(
        job_id=workflow_id,
        tenant=job.tenant if job else "",
        document_class=job.policy if job else "",
        policy_version="",
        watermark_mode=WatermarkMode.STRUCTURE,
        state=JobState.QUEUED,
        input_sha256=job.source.sha256 if job else "",
        accepted_at=started_at,
        deadline_at=started_at + timedelta(seconds=job.deadline_seconds or 0) if job else started_at,
        transitions=[TransitionRecord(state=JobState.QUEUED, at=started_at)],
    )
