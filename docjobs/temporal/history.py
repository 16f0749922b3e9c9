"""A job's history as content-free events: what ran, when, which attempt, which failure code."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from temporalio.api.enums.v1 import EventType, TimeoutType


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
