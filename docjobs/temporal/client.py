"""The docjobs client: accept a document, start-or-get its job, read its status, cancel, fetch, audit.

Acceptance stores the bytes content-addressed, binds them by sha256 and starts one workflow whose ID is
the idempotency key, with the public input every client uses (`DocumentJobInput`, docjobs/domain/contract.py). The
ID reuse policy rejects duplicates and the conflict policy fails the start, so
the server decides atomically who created a job; everyone else gets the existing job, whether it is
still running or already ended (even failed or canceled), for as long as the namespace retains it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.common import (
    HeaderCodecBehavior,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode

from docjobs.domain.contract import CALLER_WAIT_ENDED_SIGNAL, DEADLINE_GRACE, job_summary
from docjobs.domain.errors import DocJobError, FailureCode, known_code
from docjobs.domain.idempotency import keyed_job_id
from docjobs.domain.job_status import JobStatus, TransitionRecord
from docjobs.domain.models import BlobRef, DocumentJobInput, InputKind, JobOverrides, JobRequest, NotifyInput, SourceRef
from docjobs.domain.states import JobState, Stage
from docjobs.domain.timeline import narrate
from docjobs.settings.policies import PolicyBook
from docjobs.store.storage import blob_uri, record_owner, sha256_file, source_key
from docjobs.store.templates import TemplateStore
from docjobs.temporal import visibility
from docjobs.temporal.converter import data_converter
from docjobs.temporal.devserver import ensure_dev_server
from docjobs.temporal.export import export_blob, verify_stored_evidence
from docjobs.temporal.history import add_from_history, describe_event
from docjobs.temporal.job_plan import JobAsk, JobPlan, asked_of, plan_job
from docjobs.temporal.settings import TemporalSettings
from docjobs.temporal.tracing import TRACE_ID_MEMO, client_interceptors, configure_tracing, current_trace_id
from docjobs.temporal.visibility import closed_outside, status_from_visibility
from workflows import search_attributes as sa
from workflows import stages
from workflows.document_job import DocumentJobWorkflow
from workflows.ocr_page_ranges import OCR_PARTS

if TYPE_CHECKING:
    from docjobs.signing.evidence import EvidenceCheck

QUERY_TIMEOUT = timedelta(seconds=5)
STAGE_NAMES = frozenset(stage.value for stage in Stage)
P = ParamSpec("P")
R = TypeVar("R")


class JobNotFound(Exception):
    pass


class NotReleased(Exception):
    """The job has no releasable artifact (it has not succeeded)."""


@dataclass(frozen=True)
class Submitted:
    job_id: str
    created: bool
    input_sha256: str
    # The key names an existing job accepted with another input digest or ask (nothing of this input was stored).
    conflict: bool = False


async def connect(settings: TemporalSettings, runtime: Runtime | None = None) -> Client:
    """Connect to the configured cluster (TLS, mTLS, API key as the SDK's environment configuration says), or
    to the embedded dev server (started on first use).

    Every docjobs process (worker, CLI, API, tests) connects here, so all of them share one data converter and
    the tracing interceptors (workers built from the client inherit them).
    `runtime`: the Temporal runtime of the client and its workers (e.g. one serving metrics); else the default.
    """
    if settings.embedded:
        await asyncio.to_thread(ensure_dev_server, settings)
    configure_tracing("docjobs")
    return await Client.connect(
        **settings.connect_config(),
        data_converter=data_converter(settings),
        runtime=runtime,
        interceptors=client_interceptors(),
        # Headers (the trace context) go through the payload codec too: with keys, nothing in history is clear.
        header_codec_behavior=HeaderCodecBehavior.CODEC,
    )


def _on_own_client(
    function: Callable[Concatenate[Client, P], Awaitable[R]],
) -> Callable[Concatenate[JobClient, P], Awaitable[R]]:
    """A `JobClient` method that is `function` on the client's own Temporal connection."""

    @functools.wraps(function)
    async def method(jobs: JobClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await function(jobs.client, *args, **kwargs)

    return method


class JobClient:
    def __init__(self, client: Client, settings: TemporalSettings) -> None:
        self.client = client
        self.settings = settings
        self.store = settings.blob_store()
        self.templates = TemplateStore(self.store)

    @functools.cached_property
    def id_key(self) -> bytes:
        """The deployment's job-ID key (`Settings.job_id_key`), read when a keyless ID is first derived."""
        return self.settings.job_id_key()

    def policies(self) -> PolicyBook:
        return PolicyBook.load(self.settings.policy_file)

    async def submit(
        self,
        path: Path,
        policy: str | None,
        *,
        overrides: JobOverrides | None = None,
        input_kind: InputKind = InputKind.DOCUMENT,
        tenant: str = "default",
        key: str | None = None,
        deadline_seconds: int | None = None,
        hashed: str | None = None,
        callback: str | None = None,
    ) -> Submitted:
        """Store the input (see `accept`) and start its job with the public input: its source (a document, or
        `input_kind` HTML, a bundle or a template's manifest, which the job's `generate` step makes a PDF of) and a
        named `policy` (None: the default) with `overrides`. Only the job's `resolve` step resolves the policy:
        here the name must exist and the overrides must apply (ConfigError, pydantic's ValidationError). A policy
        no named one with overrides makes is a policy file's entry first (`DOCJOBS_POLICY_FILE`): no client pins one.

        With a `key` whose job exists already, nothing is stored: the answer is that job (`created` False), with
        `conflict` when it was accepted with another input digest or ask."""
        ask = JobAsk(
            named=self.policies().get(policy),
            overrides=overrides or JobOverrides(),
            input_kind=input_kind,
            tenant=tenant,
            key=key,
            deadline_seconds=deadline_seconds,
            callback=callback,
        )
        return await self.submit_planned(await asyncio.to_thread(plan_job, path, ask, self.id_key, hashed=hashed))

    async def submit_planned(self, plan: JobPlan) -> Submitted:
        """Start-or-get the planned job: what `submit` does, with nothing computed again (the input is read once
        more only to store it, and its copy must have the planned digest)."""
        ask = plan.ask
        existing = await self._existing(ask.tenant, ask.key, plan.input_sha256, plan.asked)
        if existing is not None:
            return existing
        handed_over = plan.input_sha256 if plan.handed_over else None
        stored = await self.accept(plan.path, tenant=ask.tenant, hashed=handed_over, digest=plan.input_sha256)
        job = DocumentJobInput(
            version=1,
            tenant=ask.tenant,
            source=self.source_ref(stored, ask.input_kind),
            policy=ask.named.name,
            overrides=ask.overrides,
            deadline_seconds=ask.deadline_seconds or ask.named.deadline_seconds,
            callback=ask.callback,
        )
        summary = job_summary(ask.named.name, ask.overrides.watermark_mode or ask.named.watermark.mode)
        created = await self.start_input(plan.job_id, job, summary=summary)
        return Submitted(plan.job_id, created=created, input_sha256=stored.sha256)

    async def _existing(self, tenant: str, key: str | None, digest: str, asked: str) -> Submitted | None:
        """The keyed job, if it exists: compared with this input (its digest, what is asked of it) before any byte
        of it is stored. None when there is no key or no such job."""
        if not key:
            return None
        job_id = keyed_job_id(tenant, key)
        if not await self.exists(job_id):
            return None
        conflict = await self.accepted_as(job_id) != (digest, asked)
        return Submitted(job_id, created=False, input_sha256=digest, conflict=conflict)

    async def accept(self, path: Path, *, tenant: str, hashed: str | None = None, digest: str | None = None) -> BlobRef:
        """Check the input's size, hash it and store it as a source (every document a job or batch accepts),
        recorded as `tenant`'s: only the tenants that stored a source may name it by its digest later.

        `hashed`: the caller wrote `path` itself and hashed it while writing (an API upload): the file is
        handed to the store (moved, on the file store) and never read again here. `digest`: the caller hashed
        the file, which stays its own (a planned job): it is copied, and the copy must have that digest. Otherwise
        it is hashed, then copied, and must not have changed in between.
        """
        size = path.stat().st_size
        if size > self.settings.max_input_bytes:
            raise DocJobError(
                FailureCode.INPUT_TOO_LARGE, f"the input is larger than {self.settings.max_input_bytes} bytes"
            )
        if hashed is not None:
            stored = await asyncio.to_thread(self.store.put_hashed, source_key(hashed), path, hashed)
        else:
            expected = digest if digest is not None else await asyncio.to_thread(sha256_file, path)
            stored = await asyncio.to_thread(self.store.put_file, source_key(expected), path)
            if stored.sha256 != expected:
                raise DocJobError(FailureCode.SOURCE_DIGEST_MISMATCH, "the input changed while it was being accepted")
        await asyncio.to_thread(record_owner, self.store, stored.sha256, tenant)
        # Nothing here opens the document: its structure is parsed only in a stage's limited child, which
        # also counts its pages and fails it with the precise code.
        return stored

    def source_ref(self, stored: BlobRef, kind: InputKind = InputKind.DOCUMENT) -> SourceRef:
        """How the public input names a blob this client stored: its URI in the store, its digest and size."""
        uri = blob_uri(self.settings.storage_url, stored.key)
        return SourceRef(uri=uri, sha256=stored.sha256, size=stored.size, kind=kind)

    async def start_input(
        self,
        job_id: str,
        job: DocumentJobInput,
        *,
        summary: str | None = None,
        task_queue: str | None = None,
        execution_timeout: timedelta | None = None,
    ) -> bool:
        """Start the job `job_id` (`{tenant}/{key}`) with the public input (on `task_queue`, default this client's);
        False when the job ID exists already.

        `execution_timeout`: Temporal's backstop for the run (default: the job's deadline plus its grace, if it
        names one; else none, and the job's `resolve` sets the deadline its workflow keeps).
        `summary`: the Web UI's one line for the job (class, mode, pages when known: never names or content)."""
        deadline = timedelta(seconds=job.deadline_seconds) if job.deadline_seconds else None
        try:
            await self.client.start_workflow(
                DocumentJobWorkflow.run,
                job,
                id=job_id,
                task_queue=task_queue or self.settings.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                execution_timeout=execution_timeout or (deadline + DEADLINE_GRACE if deadline else None),
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(sa.STATE, JobState.QUEUED.value),
                        SearchAttributePair(sa.TENANT, job.tenant),
                        SearchAttributePair(sa.DOCUMENT_CLASS, job.policy),
                    ]
                ),
                memo={"input": job.model_dump(mode="json"), TRACE_ID_MEMO: current_trace_id()},
                static_summary=summary,
            )
        except WorkflowAlreadyStartedError:
            return False
        return True

    async def exists(self, job_id: str) -> bool:
        """Whether a workflow of this ID exists (running or closed within retention)."""
        try:
            await self.handle(job_id).describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    async def accepted_as(self, job_id: str) -> tuple[str, str] | None:
        """(input sha256, what was asked of it: `asked_of` a public input, a pinned policy's fingerprint) the job was
        accepted with, from its start memo; None when it has none docjobs can read (a job a foreign client
        started, or refused)."""
        description = await self.handle(job_id).describe()
        public = await description.memo_value("input", default=None)
        if public is not None:
            job = DocumentJobInput.model_validate(public)
            return job.source.sha256, asked_of(job.policy, job.overrides)
        memo = await description.memo_value("request", default=None)
        if memo is None:
            return None
        request = JobRequest.model_validate(memo)
        return request.source.sha256, request.policy.fingerprint  # terms included (what older code recorded as version)

    def handle(self, job_id: str) -> WorkflowHandle[DocumentJobWorkflow, JobStatus]:
        return self.client.get_workflow_handle_for(DocumentJobWorkflow.run, job_id)

    async def status(self, job_id: str) -> JobStatus:
        """The job's status: the live query while it runs, the workflow's result once it has ended."""
        handle = self.handle(job_id)
        try:
            description = await handle.describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                raise JobNotFound(job_id) from None
            raise
        status = await self._status(handle, description)
        status.trace_id = await description.memo_value(TRACE_ID_MEMO, default=None)
        return status

    async def _status(
        self, handle: WorkflowHandle[DocumentJobWorkflow, JobStatus], description: WorkflowExecutionDescription
    ) -> JobStatus:
        """A running job answers the status query (or, with no worker to answer, is read from its history); a
        closed one is read from history only: its result, or, for a run Temporal closed outside the workflow's
        own logic (an operator's terminate, the backstop timeout), its events. A query on a closed run would make
        a worker replay it, and a worker that still holds the run's last workflow task (a local activity in
        flight when the run timed out) can fail that replay."""
        execution = description.status
        if execution is WorkflowExecutionStatus.COMPLETED:
            return await handle.result()
        if execution is WorkflowExecutionStatus.RUNNING:
            try:
                status: JobStatus = await handle.query(DocumentJobWorkflow.status, rpc_timeout=QUERY_TIMEOUT)
            except RPCError:  # no worker to answer: what visibility and history know
                status, _ = await self._from_history(handle, description)
            await self._add_live_attempts(status, description.raw_description)
            return status
        status, decided = await self._from_history(handle, description)
        ended_at = description.close_time or datetime.now(UTC)
        if decided is not None:  # it had decided and was telling the tenant when Temporal closed it
            status.state, code, status.cancel_reason = decided.state, decided.failure_code, decided.cancel_reason
        else:
            ending = closed_outside(execution, deadline_passed=ended_at >= status.deadline_at)
            status.state, code, status.cancel_reason = ending.state, ending.failure_code, ending.cancel_reason
            status.transitions.append(TransitionRecord(state=ending.state, stage=status.stage, at=ended_at))
        status.failure_code = code
        known = known_code(code)
        status.failure_message = known.info.message if known else None
        return status

    async def _from_history(
        self, handle: WorkflowHandle[DocumentJobWorkflow, JobStatus], description: WorkflowExecutionDescription
    ) -> tuple[JobStatus, NotifyInput | None]:
        """The status rebuilt without a worker: the request memo and search attributes, then the run's events."""
        memo = await description.memo_value("request", default=None)  # None: a public input not resolved yet
        status = status_from_visibility(handle.id, memo, description)
        decided = await add_from_history(status, handle.fetch_history_events(), self.client.data_converter)
        return status, decided

    async def ended(self, job_id: str) -> JobStatus:
        """The job's final status, once it has ended (waits for it: a long poll on its history)."""
        with suppress(WorkflowFailureError):  # ended outside its own logic: `status` says how
            return await self.handle(job_id).result()
        return await self.status(job_id)

    async def cancel_running(self, job_id: str) -> None:
        """Request cancellation, without a status read first; a job that has already ended is left as it is."""
        try:
            await self.handle(job_id).cancel()
        except RPCError as error:
            if error.status is not RPCStatusCode.NOT_FOUND:
                raise

    async def _add_live_attempts(self, status: JobStatus, raw: Any) -> None:
        """Attempt numbers and page progress of the stages running right now (from pending activities); for OCR in
        page ranges, the pages of the finished ranges (the workflow counts them) and those of the running ones."""
        running_pages = 0
        for pending in raw.pending_activities:
            name = pending.activity_type.name
            if name not in STAGE_NAMES and name not in OCR_PARTS:
                continue  # wrap-up steps (evidence, clean-up, notify) are not stages
            details = await self._heartbeat(pending)
            if name in OCR_PARTS:
                if name == stages.activity_name(stages.ocr_chunk):
                    running_pages += int(details.get("pages_done") or 0)
                continue
            status.attempts[name] = pending.attempt
            if details:
                status.progress = {
                    key: value for key, value in details.items() if key in ("stage", "pages_done", "pages_total")
                }
        ranges = status.ocr_chunks
        if ranges is not None and status.stage is Stage.OCR and ranges.chunks_done < ranges.chunks_total:
            done = min(ranges.pages_done + running_pages, ranges.pages_total)
            status.progress = {"stage": Stage.OCR.value, "pages_done": done, "pages_total": ranges.pages_total}

    async def _heartbeat(self, pending: Any) -> dict[str, Any]:
        """The last heartbeat's details of a pending activity (empty when it sent none)."""
        if not pending.heartbeat_details.payloads:
            return {}
        details = await self.client.data_converter.decode(pending.heartbeat_details.payloads)
        return details[0] if details and isinstance(details[0], dict) else {}

    list_jobs = _on_own_client(visibility.list_jobs)  # jobs through Temporal visibility, filtered
    count_running = _on_own_client(visibility.count_running)  # a tenant's running jobs, counted by visibility

    async def note_wait_ended(self, job_id: str, end: str) -> None:
        """Record in the job's history that a caller stopped waiting (`end`: budget or timeout), so the timeline
        can tell; best effort: the job may have ended meanwhile, and the caller's answer does not depend on it."""
        with suppress(RPCError):
            await self.handle(job_id).signal(CALLER_WAIT_ENDED_SIGNAL, end)

    async def cancel(self, job_id: str) -> None:
        await self.status(job_id)  # raises JobNotFound for an unknown ID
        await self.handle(job_id).cancel()

    async def fetch(self, job_id: str, out: Path) -> JobStatus:
        """Write the released artifact to `out`, checked against the job's recorded output digest."""
        status = await self.status(job_id)
        if status.state is not JobState.SUCCEEDED:
            raise NotReleased(f"the job is {status.state.value}: only a succeeded job has an artifact")
        if not status.artifact_key or not status.output_sha256:
            raise NotReleased("the job succeeded, but its artifact reference could not be read: try again")
        await asyncio.to_thread(export_blob, self.store, status.artifact_key, status.output_sha256, out)
        return status

    async def evidence(self, job_id: str, out: Path) -> JobStatus:
        """Write the job's signed evidence envelope to `out`, checked against the digest the job recorded."""
        status = await self.status(job_id)
        if not status.evidence_key or not status.evidence_sha256:
            raise NotReleased(f"the job is {status.state.value} and has no evidence yet")
        await asyncio.to_thread(export_blob, self.store, status.evidence_key, status.evidence_sha256, out)
        return status

    async def verify_evidence(self, job_id: str) -> EvidenceCheck:
        """Check the envelope's signature and recompute every digest it binds from the stored blobs."""
        from docjobs.signing.environment import (
            signer_from_env,  # pyHanko is heavy: only the commands that verify load it
        )

        status = await self.status(job_id)
        if not status.evidence_key:
            raise NotReleased(f"the job is {status.state.value} and has no evidence yet")
        run_id = (await self.handle(job_id).describe()).run_id
        signer = signer_from_env(self.settings.data_dir)
        return await verify_stored_evidence(self.store, status, signer, job_id=job_id, run_id=run_id)

    async def audit(self, job_id: str) -> list[dict[str, Any]]:
        """The job's history as content-free events: what ran, when, which attempt, which failure code."""
        await self.status(job_id)
        events: list[dict[str, Any]] = []
        stages: dict[int, str] = {}  # scheduled event ID -> stage, so every activity event names its stage
        async for event in self.handle(job_id).fetch_history_events():
            events.append(describe_event(event, stages))
        return events

    async def timeline(self, job_id: str) -> list[dict[str, Any]]:
        """The job's story in plain words: history, then what is running right now."""
        status = await self.status(job_id)
        events = await self.audit(job_id)
        description = await self.handle(job_id).describe()
        pending = [
            {
                "stage": activity.activity_type.name,
                "attempt": activity.attempt,
                "worker": activity.last_worker_identity,
                "last_heartbeat": activity.last_heartbeat_time.ToDatetime(tzinfo=UTC).isoformat()
                if activity.HasField("last_heartbeat_time")
                else None,
            }
            for activity in description.raw_description.pending_activities
        ]
        return narrate(events, pending, status)
