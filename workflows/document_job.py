"""The document job: one workflow per job, pure orchestration.

The workflow ID is the idempotency key and its history the audit trail. Stages run as activities whose
heartbeat timeout is the lease. A workflow timer races the pipeline against the job's deadline, so every
job ends in exactly one terminal state, and the result is the business state, not a Temporal failure. The
wrap-up's evidence and clean-up run as local activities on the worker that runs the workflow (short steps in
the worker itself, recorded as markers rather than as scheduled tasks); the tenant's callback, an outside
endpoint with minutes of retries, stays an activity.

Whoever reaches the Temporal frontend can start this workflow, so it trusts nothing it is started with: it takes
its input raw and refuses, before any activity, what it may not run (workflows/admission.py). Every storage key a
stage derives from `job_id` is therefore the workflow ID's, and the tenant a stage acts for is the ID's.

It takes two shapes: the public `DocumentJobInput` (docjobs/domain/contract.py; what every client sends), which its
first activity, `resolve`, turns into a full `JobRequest` recorded in history; and the internal `JobRequest`
itself, which clients that pin a whole policy (tests, jobs that generate their document) start with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.contrib.opentelemetry.workflow import completed_span
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    from docjobs.domain.contract import (
        CALLER_WAIT_ENDED_SIGNAL,
        CANCEL_SIGNAL,
        CANCEL_UPDATE,
        STATUS_QUERY,
        WORKFLOW_TYPE,
    )
    from docjobs.domain.errors import FailureCode, Outcome, outcome_of
    from docjobs.domain.job_status import (
        ChunkProgress,
        CleanupOutcome,
        JobStatus,
        OcrSection,
        RenderSection,
        TransitionRecord,
    )
    from docjobs.domain.metric_names import DOCUMENT_CPU, JOBS_TERMINAL, RELEASED_PAGES, failure_family
    from docjobs.domain.models import (
        BlobRef,
        CancelAnswer,
        DocumentJobInput,
        EvidenceInput,
        JobRequest,
        JobShape,
        NotifyInput,
        OcrInput,
        OcrOutput,
        ReleaseGateSettings,
        ResolveInput,
        SignInput,
        StageInput,
        VerifyInput,
    )
    from docjobs.domain.ocr_page_ranges import PageRange
    from docjobs.domain.policy import OcrMode, WatermarkMode
    from docjobs.domain.stage_cost import CpuBudget
    from docjobs.domain.stage_specs import StageQueue, StageSpec, spec_of
    from docjobs.domain.states import JobState, Stage, check_transition, is_terminal
    from workflows import search_attributes as sa
    from workflows import stages
    from workflows.admission import NO_REQUEST, RequestInput, admit, placeholder_status
    from workflows.archive import open_archive
    from workflows.endings import (
        LOCAL_ACTIVITY_FAILURES,
        NON_RETRYABLE_CODES,
        WRAP_UP_TIMEOUT,
        Ending,
        cost_of_failure,
        failure_of,
    )
    from workflows.job_context import JobContext, generate_input, ocr_input, publish_input, redact_input, render_input
    from workflows.ocr_page_ranges import (
        OCR_PAGE_RANGES_PATCH,
        OCR_RANGE_QUEUE_PATCH,
        StageOutput,
        ocr_in_page_ranges,
        page_ranges,
    )
    from workflows.staging_cleanup import clean_up, clean_up_after_the_end


InputT = TypeVar("InputT", bound=StageInput)
OutputT = TypeVar("OutputT", bound=StageOutput)

RESOLVE_TIMEOUT = timedelta(minutes=5)  # a policy look-up and one copy of the source within the store
CALLER_WAIT_ENDED = CALLER_WAIT_ENDED_SIGNAL  # a caller's poll budget ended (history only, not an outcome)
NOTIFY_TIMEOUT = timedelta(seconds=30)
NOTIFY_ATTEMPTS = 6  # bounded: 31 s of backoff at the default 1 s first wait, then the failure is recorded


def stage_summary(stage: Stage, mode: WatermarkMode, pages: int) -> str:
    """A stage activity's summary in the Web UI, e.g. `render: structure, 19 pages`: never names or content."""
    return f"{stage.value}: {mode.value}" + (f", {pages} pages" if pages else "")


@workflow.defn(name=WORKFLOW_TYPE)
class DocumentJobWorkflow:
    _request: JobRequest  # unset in a refused job (which ends before anything reads it) until `resolve` sets it

    @workflow.init
    def __init__(self, request: RequestInput = NO_REQUEST) -> None:
        self._cancel_reason: str | None = None
        self._decided = False  # the outcome is decided: a cancel comes too late
        self._converted: BlobRef | None = None  # an office input's PDF, as render made it: the evidence binds it
        info = workflow.info()
        admitted = admit(request, info.workflow_id)
        self._refusal = admitted if isinstance(admitted, FailureCode) else None
        self._public = admitted if isinstance(admitted, DocumentJobInput) else None
        if not isinstance(admitted, JobRequest):
            self._status = placeholder_status(info.workflow_id, info.start_time, self._public)
            return
        self._set_request(admitted)

    def _set_request(self, request: JobRequest) -> None:
        self._request = request
        self._status = JobStatus(
            job_id=request.job_id,
            tenant=request.tenant,
            document_class=request.document_class,
            policy_version=request.policy_version,
            watermark_mode=request.policy.watermark.mode,
            state=JobState.QUEUED,
            input_sha256=request.source.sha256,
            page_count=request.page_count,
            accepted_at=request.accepted_at,
            deadline_at=self.deadline_at,
            transitions=[TransitionRecord(state=JobState.QUEUED, at=request.accepted_at)],
        )

    @property
    def deadline_at(self) -> datetime:
        return self._request.accepted_at + timedelta(seconds=self._request.deadline_seconds)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> JobStatus:
        return self._status

    @workflow.signal(name=CANCEL_SIGNAL)
    def cancel(self) -> None:
        """Same as a Temporal cancel request: end the job `canceled` with reason `requested`."""
        self._cancel_reason = self._cancel_reason or "requested"

    @workflow.update(name=CANCEL_UPDATE)
    def cancel_job(self) -> CancelAnswer:
        """The `cancel` signal as an update: answers with the state the job was in."""
        answer = CancelAnswer(job_id=self._status.job_id, state=self._status.state, stage=self._status.stage)
        self.cancel()
        return answer

    @cancel_job.validator
    def _cancel_job_while_undecided(self) -> None:
        """Refused (nothing recorded in history) once the job has ended, or once its outcome is decided (a
        cancellation already accepted, a released result, the deadline): a cancel could change nothing."""
        if is_terminal(self._status.state):
            raise ValueError(f"the job has already ended ({self._status.state.value})")
        if self._decided:
            raise ValueError("the job's outcome is already decided: it is wrapping up")

    @workflow.signal(name=CALLER_WAIT_ENDED)
    def caller_wait_ended(self, end: str) -> None:
        """A caller stopped waiting (its poll budget ran out). Only recorded, for the timeline: the job goes on."""

    @workflow.run
    async def run(self, request: RequestInput = NO_REQUEST) -> JobStatus:
        if self._refusal is not None:
            self._refuse(self._refusal)
            return self._status
        if self._public is not None and not await self._resolve(self._public):
            return self._status
        pipeline = asyncio.create_task(self._pipeline())
        remaining = (self.deadline_at - workflow.now()).total_seconds()
        try:
            await workflow.wait_condition(
                lambda: pipeline.done() or self._cancel_reason is not None, timeout=max(remaining, 0.001)
            )
        except TimeoutError:
            self._cancel_reason = "deadline_exceeded"
            completed_span("DeadlineExceeded", attributes={"docjobs.job_id": self._request.job_id})
        except asyncio.CancelledError:
            self._cancel_reason = "requested"

        self._decided = True
        ending = Ending(JobState.CANCELED, cancel_reason=self._cancel_reason)
        if pipeline.done():  # finished first: a late cancel or deadline does not undo a released result
            ending = pipeline.result()
        else:
            pipeline.cancel()
            with suppress(asyncio.CancelledError, ActivityError):
                await pipeline
        # Once the outcome is decided, a late cancel request must not cut the wrap-up short.
        wrap_up = asyncio.create_task(self._wrap_up(ending))
        try:
            await asyncio.shield(wrap_up)
        except asyncio.CancelledError:
            await wrap_up
        return self._status

    async def _resolve(self, job: DocumentJobInput) -> bool:
        """The full request of a public input, from the `resolve` activity (recorded: a replay never re-decides
        it). A job it cannot resolve (unknown policy, missing or changed source) ends at once with the code,
        before any stage: there is no policy to record evidence by."""
        info = workflow.info()
        # A client that is not docjobs' sets no search attributes: the workflow names its tenant and class itself
        # (docjobs' own clients set them at the start, and an upsert is an event and a visibility write).
        wanted = [
            sa.STATE.value_set(JobState.QUEUED.value),
            sa.TENANT.value_set(job.tenant),
            sa.DOCUMENT_CLASS.value_set(job.policy),
        ]
        present = info.typed_search_attributes
        missing = [update for update in wanted if present.get(update.key) != update.value]
        if missing:
            workflow.upsert_search_attributes(missing)
        try:
            request = await workflow.execute_activity(
                stages.resolve,
                ResolveInput(job_id=info.workflow_id, job=job, accepted_at=info.start_time),
                start_to_close_timeout=RESOLVE_TIMEOUT,
                retry_policy=RetryPolicy(maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE_CODES),
                summary=f"resolve: {job.policy}",
            )
        except asyncio.CancelledError:
            self._finish(Ending(JobState.CANCELED, cancel_reason="requested"))
            return False
        except ActivityError as error:
            code, message, _ = failure_of(error)
            state = JobState.QUARANTINED if outcome_of(code) is Outcome.QUARANTINE else JobState.FAILED
            self._finish(Ending(state, code, message))
            return False
        self._set_request(request)
        # Visibility's copy of the request (docjobs' listings and status without a worker, the retention sweep).
        workflow.upsert_memo({"request": request.model_dump(mode="json")})
        return True

    def _refuse(self, code: FailureCode) -> None:
        """End at once, before any activity: no stage, no evidence, no callback for a request we do not trust.
        The tenant and class it claimed are cleared from visibility, so it lists under no tenant."""
        workflow.upsert_search_attributes([sa.TENANT.value_unset(), sa.DOCUMENT_CLASS.value_unset()])
        self._finish(Ending(JobState.FAILED, code, code.info.message))

    async def _wrap_up(self, ending: Ending) -> None:
        """Record the evidence, drop every staged attempt, then report the terminal state (in that order, so
        that a job reported terminal has nothing left in flight), then tell the tenant.

        Evidence and clean-up are local activities, retried by the worker within one workflow task: each is a
        marker in history instead of an activity's three events and a workflow task of its own. Either may run
        again if the worker is lost before the task completes: the envelope is create-only per run (a second
        attempt finds the first's) and clean-up deletes whatever is left. The callback is not: while a local
        activity runs the workflow task stays open, so no status query is answered and nothing decided is
        recorded (a slow or failing callback would hold it for minutes); as an activity it starts once the
        terminal state is in history."""
        ending = await self._record_evidence(ending)
        cleaned = await clean_up(self._request.job_id)
        if not cleaned:  # the job ends all the same (workflows/staging_cleanup.py)
            self._status.cleanup = CleanupOutcome.RETRYING
        self._finish(ending)
        await self._notify()
        if not cleaned:
            self._status.cleanup = await clean_up_after_the_end(self._request.job_id, self.deadline_at)

    async def _notify(self) -> None:
        """Tell the tenant's callback (if any) about the terminal state; a failed delivery is only recorded."""
        status = self._status
        event = NotifyInput(
            job_id=status.job_id,
            tenant=status.tenant,
            state=status.state,
            failure_code=status.failure_code,
            cancel_reason=status.cancel_reason,
            # a redaction job's input digest would confirm a guessed value to whoever reads the event
            input_sha256=None if self._request.policy.redact.enabled else status.input_sha256,
            output_sha256=status.output_sha256,
            evidence_sha256=status.evidence_sha256,
        )
        try:
            delivered = await workflow.execute_activity(
                stages.notify,
                event,
                task_queue=self._request.notify_task_queue,  # its own queue and threads (None: older jobs)
                start_to_close_timeout=NOTIFY_TIMEOUT,
                retry_policy=RetryPolicy(
                    # fixed at acceptance (1 s in a request recorded before the setting existed)
                    initial_interval=timedelta(seconds=self._request.timing.notify_retry_seconds),
                    backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=60),
                    maximum_attempts=NOTIFY_ATTEMPTS,
                ),
            )
            status.notification = "no callback" if delivered == "no callback" else "delivered"
        except ActivityError:
            status.notification = "failed"

    async def _pipeline(self) -> Ending:
        """The job's stages, one named step a line over its context (workflows/job_context.py), as OCRmyPDF's
        `_run_pipeline` reads: each step runs its stage and hands on the documents it made."""
        context = JobContext.of(self._request)
        try:
            if context.generates:
                context = await self._generate(context)
            context = await self._render(context)
            if context.ocr_on:
                context = await self._ocr(context)
            if context.redact_on:
                context = await self._redact(context)
            context = await self._release_gates(context)
            await self._publish(context)
            return Ending(JobState.SUCCEEDED)
        except ActivityError as error:
            if isinstance(error.cause, CancelledError):
                raise  # the job is being canceled: `run` records that
            return self._failed(error)

    async def _generate(self, context: JobContext) -> JobContext:
        """The PDF an HTML, bundle or template job makes: the document every later stage takes as its source."""
        generated = await self._stage(stages.generate, generate_input(context))
        self._status.generated = generated.summary
        return replace(context, document=generated.staged, staged=generated.staged)

    async def _render(self, context: JobContext) -> JobContext:
        rendered = await self._stage(stages.render, render_input(context))
        # An office input was converted: the PDF it became is what later stages compare with, as a generated one.
        # (No patch: an older history has no converted document, and takes the same path as before.)
        self._converted = rendered.converted
        self._status.page_count = rendered.page_count
        self._status.render = RenderSection.of(rendered)
        return replace(context, document=rendered.converted or context.document, staged=rendered.staged)

    async def _ocr(self, context: JobContext) -> JobContext:
        """OCR in one activity, or a long document's in page ranges (the patch keeps older runs on one)."""
        ocr = ocr_input(context)
        ranges = page_ranges(context.policy.ocr, self._status.page_count)
        if ranges is not None and workflow.patched(OCR_PAGE_RANGES_PATCH):
            ocred = await self._ocr_in_page_ranges(ocr, ranges)
        else:
            ocred = await self._stage(stages.ocr, ocr)
        self._status.ocr = OcrSection.of(ocred)
        self._status.ocr_text_sha256 = ocred.text.sha256
        return replace(context, staged=ocred.staged, text=ocred.text)

    async def _redact(self, context: JobContext) -> JobContext:
        """Redaction rebuilds the OCR text (when there is one) from what it kept: the status binds that text."""
        redacted = await self._stage(stages.redact, redact_input(context))
        self._status.redaction = redacted.summary
        text = redacted.text or context.text
        self._status.ocr_text_sha256 = text.sha256 if text else None
        return replace(context, staged=redacted.staged, text=text)

    async def _publish(self, context: JobContext) -> None:
        published = await self._stage(stages.publish, publish_input(context))
        self._status.output_sha256 = published.artifact.sha256
        self._status.artifact_key = published.artifact.key
        if context.timestamp_token is not None:  # B-LTA: released only once its archive is open
            await open_archive(self._request, context.timestamp_token, published.artifact)

    def _failed(self, error: ActivityError) -> Ending:
        """How a failed stage ends the job: its code decides failed or quarantined; its attempts are recorded."""
        code, message, attempt = failure_of(error)
        if attempt is not None and self._status.stage is not None:
            self._status.attempts[self._status.stage.value] = attempt
        quarantine = outcome_of(code) is Outcome.QUARANTINE
        return Ending(JobState.QUARANTINED if quarantine else JobState.FAILED, code=code, message=message)

    async def _record_evidence(self, ending: Ending) -> Ending:
        """The signed envelope binding the job's digests and terminal state; a job without one is not released."""
        status = self._status
        request = self._request
        evidence = EvidenceInput(
            job_id=request.job_id,
            tenant=request.tenant,
            policy=request.policy,
            policy_version=request.policy_version,
            input_sha256=request.source.sha256,
            output_sha256=status.output_sha256 if ending.state is JobState.SUCCEEDED else None,
            ocr_text_sha256=status.ocr_text_sha256,
            redaction_summary_sha256=status.redaction.sha256 if status.redaction else None,
            converted=self._converted,
            sanitized=status.sanitized,
            signature=status.signature.for_evidence()
            if status.signature and ending.state is JobState.SUCCEEDED
            else None,
            stage_attempts=dict(status.attempts),
            terminal_state=ending.state,
            completed_at=workflow.now(),
            redactions=status.redaction.by_kind() if status.redaction else {},
        )
        try:
            recorded = await workflow.execute_local_activity(
                stages.evidence,
                evidence,
                start_to_close_timeout=WRAP_UP_TIMEOUT,
                retry_policy=RetryPolicy(maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE_CODES),
            )
        except LOCAL_ACTIVITY_FAILURES:
            if ending.state is not JobState.SUCCEEDED:
                return ending
            unavailable = FailureCode.EVIDENCE_UNAVAILABLE
            return Ending(JobState.QUARANTINED, unavailable, unavailable.info.message)
        status.evidence_key = recorded.evidence.key
        status.evidence_sha256 = recorded.evidence.sha256
        status.commitment_salt = recorded.commitment_salt
        return ending

    async def _release_gates(self, context: JobContext) -> JobContext:
        """Sign (when the policy says so) and verify against the context's `source` (the accepted document, or
        the one `generate` or render's conversion made): nothing reaches `publish` that did not pass both."""
        request, source, staged = context.request, context.document, context.staged
        policy = request.policy
        named = None  # the tenant the signature names, as the sign stage reports it (None: older activity code)
        token = None
        structure = policy.watermark.mode is WatermarkMode.STRUCTURE
        if policy.sign.enabled:
            gate = ReleaseGateSettings(
                watermark_text=policy.watermark.text if structure else None,
                redact=policy.redact if policy.redact.enabled else None,
                sanitize=policy.sanitize,
            )
            sign = SignInput(
                job_id=request.job_id, source=source, staged=staged, sign=policy.sign, tenant=request.tenant, gate=gate
            )
            signed = await self._stage(stages.sign, sign)
            staged, named, token = signed.staged, signed.tenant, signed.timestamp_token
        verify = VerifyInput(
            job_id=request.job_id,
            source=source,
            staged=staged,
            signed=policy.sign.enabled,
            # Redaction removes text and links on purpose: its own stage checks what stays (and the gate).
            text_layer_kept=structure and policy.ocr.mode in (OcrMode.OFF, OcrMode.SKIP) and not policy.redact.enabled,
            redact=policy.redact if policy.redact.enabled else None,
            watermark_text=policy.watermark.text if structure else None,
            pages_may_turn=context.ocr_on,
            sanitize=policy.sanitize,
            sign_level=policy.sign.level if policy.sign.enabled else None,
            tenant=named,
        )
        verified = await self._stage(stages.verify, verify)
        self._status.signature, self._status.pdfa = verified.signature, verified.pdfa
        self._status.fidelity_checks = verified.fidelity_checks
        return replace(context, staged=staged, timestamp_token=token)

    async def _ocr_in_page_ranges(self, ocr: OcrInput, ranges: list[PageRange]) -> OcrOutput:
        """The OCR stage of a long document, in page ranges (workflows/ocr_page_ranges.py): the merged result stands for
        the one `ocr` activity's."""
        self._transition(JobState.PROCESSING, Stage.OCR)
        progress = ChunkProgress(pages_total=self._status.page_count, chunks_total=len(ranges))
        self._status.ocr_chunks = progress

        async def run_part(
            declaration: Callable[[InputT], OutputT], payload: InputT, *, pages: int, summary: str
        ) -> OutputT:
            return await self._run_activity(declaration, payload, pages=pages, summary=summary)

        return await ocr_in_page_ranges(ocr, ranges, run_part, progress)

    async def _stage(self, declaration: Callable[[InputT], OutputT], payload: InputT) -> OutputT:
        """Run a stage as its spec says (docjobs/domain/stage_specs.py): its queue, its timeout and CPU budget. The
        step that ran it fills in the status's section from its output."""
        spec = spec_of(declaration)
        assert isinstance(spec, StageSpec), f"{spec.name} is not a stage"
        self._transition(JobState.PROCESSING, spec.stage)
        return await self._run_activity(declaration, payload)

    async def _run_activity(
        self,
        declaration: Callable[[InputT], OutputT],
        payload: InputT,
        *,
        pages: int | None = None,
        summary: str | None = None,
    ) -> OutputT:
        """One activity of a stage as its spec says (the whole stage, or a part of it for `pages` pages): its
        queue and timeout, its attempts and cost recorded under the stage."""
        spec = spec_of(declaration)
        assert isinstance(spec, StageSpec), f"{spec.name} is not a stage"
        stage = spec.stage
        timing = self._request.timing
        # Until render has counted them (nothing parses a document at acceptance), the pages are as many as
        # the policy allows: the job's deadline still bounds the stage, and its child's CPU budget grows
        # with the real count.
        pages = pages or self._status.page_count or self._request.policy.max_pages
        per_page = spec.per_page(timing)
        task_queue = self._task_queue(spec.queue)
        policy = self._request.policy
        shape = JobShape(
            watermark_mode=policy.watermark.mode, page_count=self._status.page_count, signs=policy.sign.enabled
        )
        cpu = CpuBudget(base_seconds=timing.base_seconds, per_page_seconds=per_page)
        try:
            result = await workflow.execute_activity(
                declaration,
                payload.model_copy(update={"shape": shape, "cpu": cpu}),
                summary=summary or stage_summary(stage, self._request.policy.watermark.mode, self._status.page_count),
                task_queue=task_queue,
                start_to_close_timeout=timedelta(seconds=timing.base_seconds + per_page * pages),
                heartbeat_timeout=timedelta(seconds=timing.lease_seconds),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=1),
                    backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=30),
                    maximum_attempts=timing.max_attempts,
                    non_retryable_error_types=NON_RETRYABLE_CODES,
                ),
                # A canceled stage must really stop before its staging area is cleaned up.
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except ActivityError as error:
            spent = cost_of_failure(error)
            if spent is not None:
                self._status.cost = self._status.cost.adding(stage.value, spent)
            raise
        self._status.attempts[stage.value] = max(result.attempt, self._status.attempts.get(stage.value, 0))
        self._status.cost = self._status.cost.adding(stage.value, result.cost)
        return result

    def _task_queue(self, queue: StageQueue) -> str | None:
        """The task queue of a stage's activity (None: the workflow's own). A long document's page ranges and
        their merge run on a queue of their own, with slots of their own on every OCR worker, so that a short
        document's `ocr` never waits behind them (docs/ocr.md, "Fair across jobs")."""
        request = self._request
        if (
            queue is StageQueue.OCR_PAGE_RANGES
            and request.ocr_chunk_task_queue
            and workflow.patched(OCR_RANGE_QUEUE_PATCH)
        ):
            return request.ocr_chunk_task_queue
        return request.ocr_task_queue if queue in (StageQueue.OCR, StageQueue.OCR_PAGE_RANGES) else None

    def _transition(self, state: JobState, stage: Stage | None = None) -> None:
        check_transition(self._status.state, state, stage_from=self._status.stage, stage_to=stage)
        # Visibility gets only what changed (each upsert is an event and a visibility write on the server).
        changed = [sa.STATE.value_set(state.value)] if state is not self._status.state else []
        if stage is not self._status.stage:
            changed.append(sa.STAGE.value_set(stage.value if stage else ""))
        self._status.state = state
        self._status.stage = stage
        self._status.transitions.append(TransitionRecord(state=state, stage=stage, at=workflow.now()))
        if changed:
            workflow.upsert_search_attributes(changed)
        workflow.set_current_details(f"{state.value} ({stage.value})" if stage else state.value)

    def _finish(self, ending: Ending) -> None:
        self._transition(ending.state, self._status.stage)
        self._status.failure_code = ending.code
        self._status.failure_message = ending.message
        self._status.cancel_reason = ending.cancel_reason
        why = ending.code or ending.cancel_reason
        workflow.set_current_details(f"{ending.state.value}: {why}" if why else ending.state.value)
        # Metrics and spans add no commands (replay-safe, no patch) and are not emitted again during replay.
        completed_span(
            "JobEnded",
            attributes={
                "docjobs.job_id": self._status.job_id,
                "docjobs.outcome": ending.state.value,
                "docjobs.failure_code": ending.code or "",
                "docjobs.cancel_reason": ending.cancel_reason or "",
                "docjobs.page_count": self._status.page_count,
            },
        )
        meter = workflow.metric_meter()
        meter.create_counter(JOBS_TERMINAL, "jobs that reached each terminal state").add(
            1,
            {
                "state": ending.state.value,
                "document_class": self._status.document_class,
                "failure_family": failure_family(ending.code),
            },
        )
        labels = {"document_class": self._status.document_class, "watermark_mode": self._status.watermark_mode.value}
        meter.create_histogram_float(DOCUMENT_CPU, "CPU seconds of every stage attempt of a job", "s").record(
            self._status.cost.total.cpu_seconds, {"state": ending.state.value, **labels}
        )
        if ending.state is JobState.SUCCEEDED:
            meter.create_counter(RELEASED_PAGES, "pages of released documents").add(self._status.page_count, labels)
