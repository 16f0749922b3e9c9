"""The real `DocumentJobWorkflow`, branch by branch, on the session's dev server.

Every activity is a test double registered under the real activity's name, in an in-process worker on a task
queue of its own; a double fails, or holds its stage (heartbeating) until the test releases it, so no test
here waits for a document to be slow or a machine to be fast. Each failure path ends in the state and code
the docs document; the status is read through `JobClient.status`, as `starter.py status` reads it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.worker import Worker

from activities.lease import typed_failures
from docjobs.domain.errors import DocJobError, FailureCode, outage_retry_seconds
from docjobs.domain.job_status import JobStatus
from docjobs.domain.models import (
    ActivityTiming,
    BlobRef,
    CleanupInput,
    EvidenceInput,
    EvidenceOutput,
    JobRequest,
    NotifyInput,
    PublishInput,
    PublishOutput,
    RenderInput,
    RenderOutput,
    VerifyInput,
    VerifyOutput,
)
from docjobs.domain.policy import Policy, WatermarkPolicy
from docjobs.domain.stage_cost import Cost
from docjobs.domain.states import JobState, Stage
from docjobs.store.storage import BlobStore, sha256_file
from docjobs.temporal.client import JobClient, connect
from tests.conftest import Env, run_starter
from tests.fixtures.resolve_double import ResolveDouble
from tests.test_replay import replayer
from workflows.document_job import DocumentJobWorkflow

TENANT = "branches"
POLICY = Policy(name="branches", watermark=WatermarkPolicy(text="BRANCHES"), max_pages=1)  # render, verify, publish
SOURCE = BlobRef(key="sources/" + "a" * 64, sha256="a" * 64, size=1)  # the doubles never open it
# Long enough that only a test that means to hit a time limit hits one.
HEARTBEAT_THROTTLE = timedelta(milliseconds=200)
TIMING = ActivityTiming(lease_seconds=10, base_seconds=60, per_page_seconds=1, max_attempts=3)
WRAP_UP = ("evidence", "cleanup", "notify")
RELEASED = [JobState.QUEUED, *[JobState.PROCESSING] * 3, JobState.SUCCEEDED]  # render, verify, publish: released


class Hold:
    """A stage that runs (heartbeating, as a real stage renews its lease) until the test releases it."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.released = asyncio.Event()
        self.saw_cancel = False

    async def __call__(self) -> None:
        self.started.set()
        try:
            while not self.released.is_set():
                if not activity.info().is_local:  # a local activity (the wrap-up's evidence) has no lease
                    activity.heartbeat()
                with suppress(TimeoutError):
                    await asyncio.wait_for(self.released.wait(), timeout=0.2)
        except asyncio.CancelledError:
            self.saw_cancel = True
            raise


def failing(code: str, *, non_retryable: bool = False, cost: Cost | None = None) -> Callable[[], Awaitable[None]]:
    """A stage that fails every attempt as the real ones do: an ApplicationError typed by `code`, the attempt
    riding along (and the cost of every attempt so far, when given)."""

    async def fail() -> None:
        attempt = activity.info().attempt
        spent = (cost.model_dump(mode="json"),) if cost is not None else ()
        raise ApplicationError("a test double's failure", attempt, *spent, type=code, non_retryable=non_retryable)

    return fail


@dataclass
class Doubles:
    """Every activity of the workflow. `behaviour[name]` runs before a double answers (to hold it or fail it);
    `log` records `name:attempt` at each start and `name:canceled` when a held stage saw its cancellation."""

    store: BlobStore
    folder: Path
    behaviour: dict[str, Callable[[], Awaitable[None]]] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    evidence_for: list[JobState] = field(default_factory=list)
    notified: list[NotifyInput] = field(default_factory=list)
    costs: dict[str, Cost] = field(default_factory=dict)  # what a stage's output reports it cost
    resolved: ResolveDouble = field(default_factory=ResolveDouble)  # the policy and timing each job resolves to

    async def _enter(self, name: str) -> int:
        attempt = activity.info().attempt
        self.log.append(f"{name}:{attempt}")
        act = self.behaviour.get(name)
        if act is not None:
            try:
                await act()
            except asyncio.CancelledError:
                self.log.append(f"{name}:canceled")
                raise
        return attempt

    @activity.defn(name="render")
    async def render(self, request: RenderInput) -> RenderOutput:
        attempt = await self._enter("render")
        cost = self.costs.get("render", Cost())
        return RenderOutput(staged=request.source, page_count=1, input_encryption="none", attempt=attempt, cost=cost)

    @activity.defn(name="verify")
    async def verify(self, request: VerifyInput) -> VerifyOutput:
        return VerifyOutput(signature=None, fidelity_checks=["double"], attempt=await self._enter("verify"))

    @activity.defn(name="publish")
    async def publish(self, request: PublishInput) -> PublishOutput:
        """Stores a real artifact, so that `fetch` has bytes to check against the digest the job records."""
        attempt = await self._enter("publish")
        path = self.folder / f"{uuid.uuid4().hex}.pdf"
        path.write_bytes(b"%PDF-1.7 released by " + request.job_id.encode())
        artifact = await asyncio.to_thread(self.store.put_file, f"workflow-branches/{path.name}", path)
        return PublishOutput(artifact=artifact, attempt=attempt, already_published=False)

    @activity.defn(name="evidence")
    async def evidence(self, request: EvidenceInput) -> EvidenceOutput:
        await self._enter("evidence")
        self.evidence_for.append(request.terminal_state)
        return EvidenceOutput(evidence=BlobRef(key=f"workflow-branches/{request.job_id}.json", sha256="b" * 64, size=2))

    @activity.defn(name="cleanup")
    async def cleanup(self, request: CleanupInput) -> int:
        await self._enter("cleanup")
        return 0

    @activity.defn(name="notify")
    async def notify(self, request: NotifyInput) -> str:
        await self._enter("notify")
        self.notified.append(request)
        return "delivered"

    def activities(self) -> list[Callable[..., Awaitable[object]]]:
        return [self.resolved.resolve, self.render, self.verify, self.publish, self.evidence, self.cleanup, self.notify]


@dataclass
class Branches:
    """The doubles' worker on its own task queue, and a job client starting jobs there."""

    client: Client
    jobs: JobClient
    doubles: Doubles
    worker: Worker
    started: list[str] = field(default_factory=list)

    async def start(
        self,
        *,
        deadline_seconds: int = 600,
        timing: ActivityTiming = TIMING,
        execution_timeout: timedelta | None = None,
    ) -> str:
        job_id = f"{TENANT}/{uuid.uuid4().hex[:12]}"
        request = JobRequest(
            job_id=job_id,
            tenant=TENANT,
            source=SOURCE,
            policy=POLICY,
            policy_version=POLICY.version,
            deadline_seconds=deadline_seconds,
            accepted_at=datetime.now(UTC),
            timing=timing,
        )
        assert await self.doubles.resolved.start(self.jobs, request, execution_timeout=execution_timeout)
        self.started.append(job_id)
        return job_id

    async def outcome(self, job_id: str) -> JobStatus:
        """The job's status once its workflow has closed, however it closed."""
        with suppress(WorkflowFailureError):
            await self.jobs.handle(job_id).result()
        return await self.jobs.status(job_id)


@pytest.fixture(scope="module")
async def temporal(env: Env) -> Client:
    return await connect(env.settings())


@pytest.fixture
async def branches(temporal: Client, env: Env, tmp_path: Path) -> AsyncIterator[Branches]:
    queue = f"branches-{uuid.uuid4().hex[:8]}"
    settings = env.settings(DOCJOBS_TASK_QUEUE=queue)
    doubles = Doubles(settings.blob_store(), tmp_path)
    worker = Worker(
        temporal,
        task_queue=queue,
        workflows=[DocumentJobWorkflow],
        activities=doubles.activities(),
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,  # a cancel reaches a held stage within it
        default_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
    )
    running = asyncio.create_task(worker.run())
    harness = Branches(temporal, JobClient(temporal, settings), doubles, worker)
    yield harness
    for act in doubles.behaviour.values():
        if isinstance(act, Hold):
            act.released.set()
    for job_id in harness.started:  # nothing a test left running outlives it
        with suppress(RPCError):
            await harness.jobs.handle(job_id).terminate("test over")
    if worker.is_running:
        await worker.shutdown()
    await running


def stages_run(doubles: Doubles) -> list[str]:
    """The stage attempts started, in order (without the wrap-up and without the cancellations)."""
    return [entry for entry in doubles.log if not entry.startswith(WRAP_UP) and not entry.endswith(":canceled")]


def wrap_up_events(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(event["event"], event["stage"]) for event in events if event.get("stage") in WRAP_UP]


async def test_the_doubles_run_the_whole_pipeline(branches: Branches) -> None:
    job_id = await branches.start()
    status = await branches.outcome(job_id)
    assert (status.state, status.failure_code, status.notification) == (JobState.SUCCEEDED, None, "delivered")
    assert status.attempts == {"render": 1, "verify": 1, "publish": 1}
    assert branches.doubles.log == ["render:1", "verify:1", "publish:1", "evidence:1", "cleanup:1", "notify:1"]
    # Evidence and clean-up are local activities (a marker each), the callback an activity; audit names them all.
    assert wrap_up_events(await branches.jobs.audit(job_id)) == [
        ("marker_recorded", "evidence"),
        ("marker_recorded", "cleanup"),
        ("activity_task_scheduled", "notify"),
        ("activity_task_started", "notify"),
        ("activity_task_completed", "notify"),
    ]
    story = [entry["text"] for entry in await branches.jobs.timeline(job_id)]
    assert [line.split(" at ")[0] for line in story if line.startswith(WRAP_UP)] == [
        "evidence finished",
        "cleanup finished",
        "notify finished",
    ], story


async def test_every_attempt_s_cost_reaches_the_status_failed_ones_too(branches: Branches) -> None:
    """A stage reports what all its attempts cost, in its output or in its failure's details: the status adds
    them up per stage and in total (the peak is the largest)."""
    branches.doubles.costs["render"] = Cost(attempts=2, cpu_seconds=1.5, wall_seconds=4, peak_memory_mb=100)
    failed = Cost(attempts=1, cpu_seconds=0.25, wall_seconds=1, peak_memory_mb=300, bytes_read=10, bytes_written=5)
    branches.doubles.behaviour["verify"] = failing("fidelity.page_count", non_retryable=True, cost=failed)
    status = await branches.outcome(await branches.start())
    assert (status.state, status.failure_code) == (JobState.QUARANTINED, "fidelity.page_count"), status
    assert status.cost.stages == {"render": branches.doubles.costs["render"], "verify": failed}
    assert status.cost.total == Cost(
        attempts=3, cpu_seconds=1.75, wall_seconds=5, peak_memory_mb=300, bytes_read=10, bytes_written=5
    )


async def test_a_stage_that_outlives_its_time_budget_fails_stage_timeout(branches: Branches) -> None:
    branches.doubles.behaviour["render"] = Hold()  # never released: it outlives its start-to-close
    timing = TIMING.model_copy(update={"base_seconds": 1.0, "per_page_seconds": 0.5, "max_attempts": 1})
    status = await branches.outcome(await branches.start(timing=timing))  # start-to-close: 1 s + 0.5 s x 1 page
    assert (status.state, status.failure_code) == (JobState.FAILED, "stage.timeout"), status
    assert stages_run(branches.doubles) == ["render:1"]
    assert branches.doubles.evidence_for == [JobState.FAILED]
    assert [event.failure_code for event in branches.doubles.notified] == ["stage.timeout"]


async def test_a_stage_failing_every_attempt_fails_stage_retries_exhausted(branches: Branches) -> None:
    branches.doubles.behaviour["render"] = failing("double.flaky")  # retryable, and no code the table knows
    status = await branches.outcome(await branches.start(timing=TIMING.model_copy(update={"max_attempts": 2})))
    assert (status.state, status.failure_code) == (JobState.FAILED, "stage.retries_exhausted"), status
    assert stages_run(branches.doubles) == ["render:1", "render:2"]


@pytest.mark.parametrize(
    ("stage", "code", "state"),
    [
        ("render", "input.malformed", JobState.FAILED),
        ("verify", "fidelity.page_count", JobState.QUARANTINED),
        ("render", "source.digest_mismatch", JobState.QUARANTINED),
    ],
)
async def test_a_deterministic_code_ends_the_job_at_once(
    branches: Branches, stage: str, code: str, state: JobState
) -> None:
    """The double does not mark its failure non-retryable: the workflow's retry policy must not retry it."""
    branches.doubles.behaviour[stage] = failing(code)
    status = await branches.outcome(await branches.start())
    assert (status.state, status.failure_code) == (state, code), status
    assert status.attempts[stage] == 1 and stages_run(branches.doubles)[-1] == f"{stage}:1"
    assert status.output_sha256 is None and branches.doubles.evidence_for == [state]


async def test_evidence_unavailable_quarantines_a_succeeded_job(branches: Branches) -> None:
    branches.doubles.behaviour["evidence"] = failing("storage.unavailable", non_retryable=True)
    job_id = await branches.start()
    status = await branches.outcome(job_id)
    assert (status.state, status.failure_code) == (JobState.QUARANTINED, "evidence.unavailable"), status
    assert status.evidence_key is None
    assert [event.state for event in branches.doubles.notified] == [JobState.QUARANTINED]
    assert branches.doubles.log[-2:] == ["cleanup:1", "notify:1"]  # the wrap-up still cleans up and tells
    [marker] = [event for event in await branches.jobs.audit(job_id) if event.get("stage") == "evidence"]
    assert (marker["event"], marker["failure_code"], marker["attempt"]) == ("marker_recorded", "storage.unavailable", 1)
    story = [entry["text"] for entry in await branches.jobs.timeline(job_id)]
    assert any(line.startswith("evidence failed with storage.unavailable at") for line in story), story


async def test_evidence_that_fails_once_is_retried_by_the_worker(branches: Branches) -> None:
    """A local activity's retries happen in the worker, within the workflow task: one marker, its last attempt."""
    flaky = failing("storage.unavailable")  # retryable

    async def fail_once() -> None:
        if activity.info().attempt == 1:
            await flaky()

    branches.doubles.behaviour["evidence"] = fail_once
    job_id = await branches.start()
    status = await branches.outcome(job_id)
    assert (status.state, status.evidence_sha256) == (JobState.SUCCEEDED, "b" * 64), status
    assert [entry for entry in branches.doubles.log if entry.startswith("evidence")] == ["evidence:1", "evidence:2"]
    [marker] = [event for event in await branches.jobs.audit(job_id) if event.get("stage") == "evidence"]
    assert (marker["event"], marker["attempt"], "failure_code" in marker) == ("marker_recorded", 2, False)
    story = [entry["text"] for entry in await branches.jobs.timeline(job_id)]
    assert any(line.startswith("evidence finished after 2 attempts at") for line in story), story


async def test_evidence_unavailable_leaves_a_failed_job_failed(branches: Branches) -> None:
    branches.doubles.behaviour["render"] = failing("input.malformed")
    branches.doubles.behaviour["evidence"] = failing("storage.unavailable", non_retryable=True)
    status = await branches.outcome(await branches.start())
    assert (status.state, status.failure_code) == (JobState.FAILED, "input.malformed"), status


async def test_a_cancel_that_lands_after_success_leaves_it_succeeded(branches: Branches) -> None:
    evidence = branches.doubles.behaviour["evidence"] = Hold()  # the pipeline is done: the wrap-up has begun
    job_id = await branches.start()
    await evidence.started.wait()
    await branches.jobs.cancel(job_id)  # recorded in the history before the evidence completes
    evidence.released.set()
    status = await branches.outcome(job_id)
    assert (status.state, status.cancel_reason, status.evidence_sha256) == (JobState.SUCCEEDED, None, "b" * 64)
    assert not evidence.saw_cancel  # the wrap-up is shielded from the late cancel
    history = [event.event_type async for event in branches.jobs.handle(job_id).fetch_history_events()]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED in history


async def test_the_deadline_during_wrap_up_leaves_the_decided_state(branches: Branches) -> None:
    evidence = branches.doubles.behaviour["evidence"] = Hold()
    job_id = await branches.start(deadline_seconds=5)
    await evidence.started.wait()  # the three doubled stages take well under the 5 s
    status = await branches.jobs.status(job_id)
    while datetime.now(UTC) < status.deadline_at + timedelta(seconds=0.5):
        await asyncio.sleep(0.1)
    evidence.released.set()
    status = await branches.outcome(job_id)
    assert (status.state, status.cancel_reason) == (JobState.SUCCEEDED, None), status
    assert status.transitions[-1].at > status.deadline_at  # it ended after its deadline, and still succeeded


async def test_a_failed_notification_changes_nothing_but_notification(branches: Branches) -> None:
    branches.doubles.behaviour["notify"] = failing("notify.failed", non_retryable=True)
    status = await branches.outcome(await branches.start())
    assert (status.state, status.failure_code, status.notification) == (JobState.SUCCEEDED, None, "failed")


async def test_a_stage_the_store_failed_waits_the_outage_backoff_before_its_next_attempt(branches: Branches) -> None:
    """A stage failing because the store did not answer, raised through the stages' own `typed_failures`, is tried
    again after the outage backoff (5 s), not the retry policy's 1 s, and the job goes on once the store is back."""
    started: list[float] = []

    async def store_down_for_one_attempt() -> None:
        started.append(time.monotonic())
        if activity.info().attempt == 1:
            with typed_failures("render"):
                raise DocJobError(FailureCode.STORAGE_UNAVAILABLE)

    branches.doubles.behaviour["render"] = store_down_for_one_attempt
    status = await branches.outcome(await branches.start())
    assert (status.state, status.attempts["render"]) == (JobState.SUCCEEDED, 2), status
    assert started[1] - started[0] >= outage_retry_seconds(1) == 5


def failing_in_the_wrap_up(code: str) -> Callable[[], Awaitable[None]]:
    """A step that fails while it runs as a local activity (the wrap-up's) and succeeds as an activity."""
    fail = failing(code)

    async def fail_locally() -> None:
        if activity.info().is_local:
            await fail()

    return fail_locally


async def test_a_store_that_fails_the_clean_up_leaves_the_decided_state_and_cleans_up_after(
    branches: Branches,
) -> None:
    """The rehearsal's store outage (bench/rehearsal.py): clean-up's three local attempts fail, the job still
    ends `succeeded` (it read `failed` `workflow.terminated` before: the run itself failed), the tenant is told,
    and the clean-up is retried as an activity after the end."""
    branches.doubles.behaviour["cleanup"] = failing_in_the_wrap_up("storage.unavailable")
    job_id = await branches.start()
    status = await branches.outcome(job_id)
    assert (await branches.jobs.handle(job_id).describe()).status is WorkflowExecutionStatus.COMPLETED
    assert (status.state, status.failure_code, status.notification) == (JobState.SUCCEEDED, None, "delivered")
    assert (status.output_sha256, status.evidence_sha256) != (None, None) and status.cleanup == "done after the end"
    assert [entry for entry in branches.doubles.log if not entry.startswith("evidence")][-5:] == [
        "cleanup:1",
        "cleanup:2",
        "cleanup:3",
        "notify:1",
        "cleanup:1",  # the activity's own first attempt, once the tenant was told
    ]
    assert [event.state for event in branches.doubles.notified] == [JobState.SUCCEEDED]
    assert [step.state for step in status.transitions] == RELEASED


async def test_a_clean_up_with_no_time_left_is_left_to_the_retention_sweep(branches: Branches) -> None:
    """Too close to the run's execution timeout for one more attempt: the job ends in its decided state, and
    says its staged attempts are left to the retention sweep (which deletes the run's folder)."""
    branches.doubles.behaviour["render"] = failing("input.malformed")
    branches.doubles.behaviour["cleanup"] = failing("storage.unavailable")
    job_id = await branches.start(execution_timeout=timedelta(seconds=150))  # 1 minute margin, 2 per attempt
    status = await branches.outcome(job_id)
    assert (await branches.jobs.handle(job_id).describe()).status is WorkflowExecutionStatus.COMPLETED
    assert (status.state, status.failure_code) == (JobState.FAILED, "input.malformed"), status
    assert status.cleanup == "left to the retention sweep"
    assert [entry for entry in branches.doubles.log if entry.startswith("cleanup")] == [
        f"cleanup:{n}" for n in (1, 2, 3)
    ]
    assert [event.failure_code for event in branches.doubles.notified] == ["input.malformed"]


@pytest.mark.parametrize("how", ["temporal-cancel", "cancel-signal"])
async def test_a_cancel_mid_stage_cancels_the_stage_then_cleans_up(branches: Branches, how: str) -> None:
    render = branches.doubles.behaviour["render"] = Hold()
    job_id = await branches.start()
    await render.started.wait()
    if how == "temporal-cancel":
        await branches.jobs.cancel(job_id)
    else:
        await branches.jobs.handle(job_id).signal(DocumentJobWorkflow.cancel)
    status = await branches.outcome(job_id)
    assert (status.state, status.cancel_reason) == (JobState.CANCELED, "requested"), status
    assert render.saw_cancel
    log = branches.doubles.log
    assert log.index("render:canceled") < log.index("cleanup:1")  # the stage stopped before its files went
    assert branches.doubles.evidence_for == [JobState.CANCELED]


async def test_the_deadline_during_a_stage_cancels_it(branches: Branches) -> None:
    render = branches.doubles.behaviour["render"] = Hold()
    status = await branches.outcome(await branches.start(deadline_seconds=1))
    assert (status.state, status.cancel_reason) == (JobState.CANCELED, "deadline_exceeded"), status
    assert render.saw_cancel and status.failure_code is None


@pytest.mark.parametrize(
    ("deadline_seconds", "wrap_up", "expected"),
    [
        (600, "free", (JobState.FAILED, "workflow.timed_out", None)),  # the run's own timeout, the deadline far
        (1, "held", (JobState.CANCELED, None, "deadline_exceeded")),  # the backstop after a deadline passed
    ],
)
async def test_a_run_that_hits_its_execution_timeout(
    branches: Branches, deadline_seconds: int, wrap_up: str, expected: tuple[JobState, str | None, str | None]
) -> None:
    """Read from its history, never by a query: with the evidence step (a local activity) still in flight on the
    worker when Temporal closed the run, a worker asked to replay it for a query could fail (TMPRL1100)."""
    branches.doubles.behaviour["render"] = Hold()
    if wrap_up == "held":
        branches.doubles.behaviour["evidence"] = Hold()  # the deadline fires, but the wrap-up never ends
    job_id = await branches.start(deadline_seconds=deadline_seconds, execution_timeout=timedelta(seconds=3))
    status = await branches.outcome(job_id)
    assert (await branches.jobs.handle(job_id).describe()).status is WorkflowExecutionStatus.TIMED_OUT
    assert (status.state, status.failure_code, status.cancel_reason) == expected, status
    assert [(step.state, step.stage) for step in status.transitions] == [
        (JobState.QUEUED, None),
        (JobState.PROCESSING, Stage.RENDER),
        (expected[0], Stage.RENDER),
    ]
    # History has an attempt once it ended: the canceled one, not one still running when the run closed.
    assert status.attempts == ({"render": 1} if wrap_up == "held" else {})
    await branches.worker.shutdown()  # the same answer with no worker at all: nothing asked one
    assert await branches.jobs.status(job_id) == status
    history = await branches.jobs.handle(job_id).fetch_history()  # and the history replays as it is
    assert (await replayer().replay_workflow(history, raise_on_replay_failure=False)).replay_failure is None


async def test_a_run_closed_while_telling_the_tenant_keeps_its_decided_state(branches: Branches) -> None:
    """Released, its evidence and clean-up done, then Temporal's backstop closed it during the callback: it
    is reported (and listed) succeeded, with what it released, not as a run that timed out."""
    notify = branches.doubles.behaviour["notify"] = Hold()
    job_id = await branches.start(execution_timeout=timedelta(seconds=3))
    await notify.started.wait()
    status = await branches.outcome(job_id)
    assert (await branches.jobs.handle(job_id).describe()).status is WorkflowExecutionStatus.TIMED_OUT
    assert (status.state, status.failure_code, status.cancel_reason) == (JobState.SUCCEEDED, None, None), status
    assert status.output_sha256 and status.evidence_sha256 == "b" * 64 and status.page_count == 1
    assert [step.state for step in status.transitions] == RELEASED
    for _ in range(100):  # visibility is eventually consistent
        if await listed(branches.jobs, job_id, JobState.SUCCEEDED):
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"{job_id} never listed succeeded")
    assert not await listed(branches.jobs, job_id, JobState.CANCELED)


# What the client reads of a job that no worker answers for, or that Temporal closed.


async def test_a_succeeded_job_is_fetchable_while_no_worker_answers(branches: Branches, tmp_path: Path) -> None:
    """Decided `succeeded`, its wrap-up still open, and no worker left to answer the status query: the status
    is rebuilt from visibility, and what the job released is read from its history."""
    notify = branches.doubles.behaviour["notify"] = Hold()
    job_id = await branches.start()
    await notify.started.wait()
    answered = await branches.jobs.status(job_id)  # the workflow's own answer, while its worker runs
    await branches.worker.shutdown()
    assert (await branches.jobs.handle(job_id).describe()).status is WorkflowExecutionStatus.RUNNING
    out = tmp_path / "fetched.pdf"
    status = await branches.jobs.fetch(job_id, out)
    # Rebuilt without a worker: the transitions are the state attribute's upserts in history, each at the time
    # its workflow task started, which is the workflow's own clock (but for a step after a local activity in the
    # same task: the wrap-up's, a few milliseconds later in the workflow's answer).
    assert [step.state for step in status.transitions] == RELEASED
    steps = [(step.state, step.stage) for step in status.transitions]
    assert steps == [(step.state, step.stage) for step in answered.transitions]
    assert status.transitions[:-1] == answered.transitions[:-1]
    assert abs(status.transitions[-1].at - answered.transitions[-1].at) < timedelta(seconds=1)
    assert status.state is JobState.SUCCEEDED and sha256_file(out) == status.output_sha256
    assert status.evidence_sha256 == "b" * 64


async def listed(jobs: JobClient, job_id: str, state: JobState) -> bool:
    return job_id in {job.job_id for job in await jobs.list_jobs(state=state, tenant=TENANT)}


async def test_a_terminated_job_is_listed_failed_not_where_it_stopped(branches: Branches, env: Env) -> None:
    render = branches.doubles.behaviour["render"] = Hold()
    job_id = await branches.start()
    await render.started.wait()
    for state in (JobState.PROCESSING, JobState.FAILED):  # visibility is eventually consistent
        for _ in range(100):
            if await listed(branches.jobs, job_id, state):
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"{job_id} never listed {state.value}")
        if state is JobState.PROCESSING:
            await branches.jobs.handle(job_id).terminate("an operator's terminate")
    code, processing, _ = await asyncio.to_thread(run_starter, env, "jobs", "--tenant", TENANT, "--state", "processing")
    assert code == 0 and job_id not in {job["job_id"] for job in processing["jobs"]}
    code, failed, _ = await asyncio.to_thread(run_starter, env, "jobs", "--tenant", TENANT, "--state", "failed")
    (job,) = [job for job in failed["jobs"] if job["job_id"] == job_id]
    assert (job["state"], job["stage"]) == ("failed", "render")
    status = await branches.jobs.status(job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "workflow.terminated")
