"""A job's history as content-free events (what ran, when, which attempt, which failure code), and what a job
released, read back from its history when no worker can answer for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC
from typing import Any

from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter

from docjobs.models import EvidenceOutput, JobStatus, PublishOutput
from docjobs.states import Stage


def failure_code(failure: Any) -> str:
    """A failure as a code: the application's stable code, or the kind of timeout (the lease is `heartbeat`)."""
    if failure.HasField("timeout_failure_info"):
        kind = TimeoutType.Name(failure.timeout_failure_info.timeout_type).removeprefix("TIMEOUT_TYPE_").lower()
        return f"timeout.{kind}"
    return str(failure.application_failure_info.type or failure.WhichOneof("failure_info") or "unknown")


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


async def add_released(status: JobStatus, events: AsyncIterator[HistoryEvent], converter: DataConverter) -> None:
    """The artifact (and its searchable text) and the evidence of a succeeded job whose status was rebuilt
    without a worker, from the results of its `publish` and `evidence` activities in its history."""
    scheduled: dict[int, str] = {}
    async for event in events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
            continue
        if not event.HasField("activity_task_completed_event_attributes"):
            continue
        completed = event.activity_task_completed_event_attributes
        activity = scheduled.get(completed.scheduled_event_id)
        if activity == Stage.PUBLISH.value:
            (published,) = await converter.decode(completed.result.payloads, [PublishOutput])
            status.artifact_key, status.output_sha256 = published.artifact.key, published.artifact.sha256
            status.ocr_text_sha256 = published.text.sha256 if published.text else None
        elif activity == "evidence":
            (recorded,) = await converter.decode(completed.result.payloads, [EvidenceOutput])
            status.evidence_key, status.evidence_sha256 = recorded.evidence.key, recorded.evidence.sha256
