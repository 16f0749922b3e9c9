"""A job's history as content-free events (what ran, when, which attempt, which failure code), and a job's
status read back from its history when no worker can answer for it, or when Temporal closed its run.

A stage is an activity: scheduled, started, then completed, failed, timed out or canceled. The wrap-up's
`evidence` and `cleanup` are local activities: one `marker_recorded` event each, once the step has ended, whose
`data` detail (the SDK's own bookkeeping, never sealed: type, attempt, times) names the step, whose `result`
detail holds its result (sealed like any payload), and whose `failure` is set when its last attempt failed. The
callback, `notify`, is an activity: its input is the job's terminal event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent, MarkerRecordedEventAttributes
from temporalio.converter import DataConverter

from docjobs.domain.job_status import JobStatus, RenderSection, TransitionRecord
from docjobs.domain.models import EvidenceOutput, NotifyInput, PublishOutput, RenderOutput
from docjobs.domain.states import JobState, Stage, parse_state
from workflows import search_attributes as sa
from workflows.ocr_page_ranges import OCR_PARTS

STAGE_NAMES = frozenset(stage.value for stage in Stage)
STATE_ATTRIBUTE, STAGE_ATTRIBUTE = sa.STATE.name, sa.STAGE.name

LOCAL_ACTIVITY_MARKER = "core_local_activity"  # the marker name the SDK records a local activity's outcome under


def failure_code(failure: Any) -> str:
    """A failure as a code: the application's stable code, or the kind of timeout (the lease is `heartbeat`)."""
    if failure.HasField("timeout_failure_info"):
        kind = TimeoutType.Name(failure.timeout_failure_info.timeout_type).removeprefix("TIMEOUT_TYPE_").lower()
        return f"timeout.{kind}"
    return str(failure.application_failure_info.type or failure.WhichOneof("failure_info") or "unknown")


def local_activity(marker: MarkerRecordedEventAttributes) -> tuple[str, int] | None:
    """(activity type, last attempt) of a local activity's marker; None for any other marker (or an unreadable one)."""
    detail = marker.details.get("data")
    if marker.marker_name != LOCAL_ACTIVITY_MARKER or detail is None or not detail.payloads:
        return None
    try:
        fields = json.loads(detail.payloads[0].data)
        return str(fields["activity_type"]), int(fields["attempt"])
    except (ValueError, KeyError, TypeError):
        return None


def describe_event(event: Any, stages: dict[int, str]) -> dict[str, Any]:
    kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()
    entry: dict[str, Any] = {
        "event_id": event.event_id,
        "time": event.event_time.ToDatetime(tzinfo=UTC).isoformat(),
        "event": kind,
    }
    attributes_field = event.WhichOneof("attributes")
    attributes = getattr(event, attributes_field) if attributes_field else None
    if attributes is None:
        return entry
    if kind == "activity_task_scheduled":
        stages[event.event_id] = entry["stage"] = attributes.activity_type.name
    elif kind.startswith("activity_task_"):
        entry["stage"] = stages.get(attributes.scheduled_event_id)
    if kind == "marker_recorded" and (ran := local_activity(attributes)) is not None:
        entry["stage"], entry["attempt"] = ran
    if kind == "activity_task_started":
        entry["attempt"] = attributes.attempt
        entry["worker"] = attributes.identity
        if attributes.HasField("last_failure"):
            entry["previous_attempt_failure"] = failure_code(attributes.last_failure)
    if hasattr(attributes, "failure") and attributes.HasField("failure"):
        entry["failure_code"] = failure_code(attributes.failure)
        entry["message"] = attributes.failure.message
    if kind == "workflow_execution_signaled":
        entry["signal"] = attributes.signal_name
    if kind == "upsert_workflow_search_attributes":
        fields = attributes.search_attributes.indexed_fields
        entry["attributes"] = {name: payload.data.decode() for name, payload in fields.items()}
    return entry


async def add_from_history(
    status: JobStatus, events: AsyncIterator[HistoryEvent], converter: DataConverter
) -> NotifyInput | None:
    """What a job's history says of it, added to a status rebuilt without a worker (from the request memo and
    visibility): the transitions the workflow recorded (each a search-attribute upsert, at the time its workflow
    task started: the workflow's own `now`, except after a local activity in the same task, where the workflow's
    clock has moved on by the activity's run), each stage's last attempt that ended (history writes an attempt's
    start when it closes), the page count `render` found, the artifact (and its searchable text) `publish`
    released and the evidence envelope.
    Returns the terminal event the workflow sent to `notify`, if it got that far: once that is scheduled, the
    job's ending (state, code, reason) is decided and in history.

    Nothing here replays the workflow: a closed run's status must not depend on a worker re-running its code
    (a replay can fail where reading events cannot)."""
    transitions = status.transitions or [TransitionRecord(state=JobState.QUEUED, at=status.accepted_at)]
    scheduled: dict[int, str] = {}
    decided: NotifyInput | None = None
    task_started: dict[int, datetime] = {}  # workflow task started event -> its time
    task_time: datetime | None = None  # when the workflow task whose commands follow started
    async for event in events:
        if event.HasField("workflow_task_started_event_attributes"):
            task_started[event.event_id] = workflow_clock(event.event_time)
            continue
        if event.HasField("workflow_task_completed_event_attributes"):
            task_time = task_started.get(event.workflow_task_completed_event_attributes.started_event_id)
            continue
        if event.HasField("upsert_workflow_search_attributes_event_attributes"):
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            at = task_time or event.event_time.ToDatetime(tzinfo=UTC)
            _add_transition(fields, at, transitions)
            continue
        if event.HasField("marker_recorded_event_attributes"):
            marker = event.marker_recorded_event_attributes
            ran = local_activity(marker)
            if ran is not None and ran[0] == "evidence" and not marker.HasField("failure"):
                await _add_evidence(status, marker.details["result"], converter)
            continue
        if event.HasField("activity_task_scheduled_event_attributes"):
            attributes = event.activity_task_scheduled_event_attributes
            name = scheduled[event.event_id] = attributes.activity_type.name
            if name == "notify" and attributes.input.payloads:
                (decided,) = await converter.decode(attributes.input.payloads, [NotifyInput])
            continue
        if event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            name = scheduled.get(started.scheduled_event_id, "")
            if name in OCR_PARTS:  # a long document's OCR in page ranges: the stage's attempts are its parts' most
                status.attempts[Stage.OCR.value] = max(started.attempt, status.attempts.get(Stage.OCR.value, 0))
            elif name in STAGE_NAMES:
                status.attempts[name] = started.attempt
            continue
        if not event.HasField("activity_task_completed_event_attributes"):
            continue
        completed = event.activity_task_completed_event_attributes
        await _add_result(status, scheduled.get(completed.scheduled_event_id), completed.result, converter)
    status.transitions = transitions
    # Where the job is, as history says: visibility's copy of the attributes may lag behind its own events.
    status.state, status.stage = transitions[-1].state, transitions[-1].stage
    return decided


async def _add_result(status: JobStatus, activity: str | None, result: Payloads, converter: DataConverter) -> None:
    """What an activity's result adds: render's section and page count, the artifact (and its searchable text)
    `publish` released, and the evidence of a job whose evidence step was an activity (an older build)."""
    if activity == Stage.RENDER.value:
        (rendered,) = await converter.decode(result.payloads, [RenderOutput])
        status.page_count, status.render = rendered.page_count, RenderSection.of(rendered)
    elif activity == Stage.PUBLISH.value:
        (published,) = await converter.decode(result.payloads, [PublishOutput])
        status.artifact_key, status.output_sha256 = published.artifact.key, published.artifact.sha256
        status.ocr_text_sha256 = published.text.sha256 if published.text else None
    elif activity == "evidence":
        await _add_evidence(status, result, converter)


def workflow_clock(stamp: Timestamp) -> datetime:
    """An event's time as a workflow task that started then reads its own `workflow.now()` (the SDK's rounding)."""
    return datetime.fromtimestamp(stamp.ToNanoseconds() / 1e9, UTC)


def _add_transition(fields: Mapping[str, Payload], at: datetime, transitions: list[TransitionRecord]) -> None:
    """The transition an upsert of the state or stage attribute records after the `transitions` so far (the
    workflow upserts only what changed; a plain client's job upserts `queued` once resolved: no transition)."""
    state, stage = transitions[-1].state, transitions[-1].stage
    if STATE_ATTRIBUTE in fields:
        state = parse_state(json.loads(fields[STATE_ATTRIBUTE].data))
    if STAGE_ATTRIBUTE in fields:
        named = json.loads(fields[STAGE_ATTRIBUTE].data)
        stage = Stage(named) if named else None
    if (state, stage) == (transitions[-1].state, transitions[-1].stage):
        return
    transitions.append(TransitionRecord(state=state, stage=stage, at=at))


async def _add_evidence(status: JobStatus, result: Payloads, converter: DataConverter) -> None:
    (recorded,) = await converter.decode(result.payloads, [EvidenceOutput])
    status.evidence_key, status.evidence_sha256 = recorded.evidence.key, recorded.evidence.sha256
