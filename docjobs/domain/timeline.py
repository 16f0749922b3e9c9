"""A job's story in plain words, from its content-free history events and its pending stages.

For the people on call: "attempt 1 of render stopped renewing its lease; attempt 2 started at 10:42:38 on
worker w-2", "the deadline was reached", "succeeded; artifact released". Each line is also a JSON object.
"""

from __future__ import annotations

from typing import Any

from docjobs.domain.job_status import JobStatus
from docjobs.domain.states import JobState

LEASE_LOST = "timeout.heartbeat"


def _clock(at: str) -> str:
    return at[11:19]  # HH:MM:SS of an ISO time in UTC


def _why(code: str | None) -> str:
    if code == LEASE_LOST:
        return "stopped renewing its lease"
    if code and code.startswith("timeout."):
        return f"ran out of time ({code.removeprefix('timeout.')})"
    return f"failed with {code}"


def _line(event: dict[str, Any]) -> str | None:
    kind, stage, at = event["event"], event.get("stage"), _clock(event["time"])
    if kind == "workflow_execution_started":
        return f"job accepted at {at}"
    if kind == "activity_task_started":
        attempt = event["attempt"]
        started = f"attempt {attempt} of {stage} started at {at} on worker {event['worker']}"
        previous = event.get("previous_attempt_failure")
        if attempt > 1 and previous:
            return f"attempt {attempt - 1} of {stage} {_why(previous)}; {started}"
        return started
    if kind == "activity_task_completed":
        return f"{stage} finished at {at}"
    if kind in ("activity_task_failed", "activity_task_timed_out"):
        return f"{stage} {_why(event.get('failure_code'))} at {at} (no more attempts)"
    if kind == "activity_task_canceled":
        return f"{stage} stopped at {at} (canceled)"
    if kind == "marker_recorded" and stage:  # a wrap-up step (a local activity): recorded once it has ended
        tries = f" after {event['attempt']} attempts" if event.get("attempt", 1) > 1 else ""
        if event.get("failure_code"):
            return f"{stage} {_why(event['failure_code'])}{tries} at {at} (no more attempts)"
        return f"{stage} finished{tries} at {at}"
    if kind == "timer_fired":
        return f"the job's deadline was reached at {at}"
    if kind == "workflow_execution_signaled" and event.get("signal") == "caller_wait_ended":
        return f"the caller's wait ended at {at}; the job went on"
    if kind in ("workflow_execution_cancel_requested", "workflow_execution_signaled"):
        return f"cancel requested at {at}"
    attributes = event.get("attributes", {})
    if kind == "upsert_workflow_search_attributes" and "DocjobsState" in attributes:
        state = attributes["DocjobsState"].strip('"')
        new_stage = attributes.get("DocjobsStage", "").strip('"')
        return f"now {state}" + (f" ({new_stage})" if new_stage and state == "processing" else "") + f" at {at}"
    return None


def narrate(events: list[dict[str, Any]], pending: list[dict[str, Any]], status: JobStatus) -> list[dict[str, Any]]:
    """One entry per thing that happened, then what runs now, then the outcome: `{"at", "text", "event"}`."""
    story = [
        {"at": event["time"], "text": text, "event": event["event"]}
        for event in events
        if (text := _line(event)) is not None
    ]
    for running in pending:
        renewed = f", lease last renewed at {_clock(running['last_heartbeat'])}" if running["last_heartbeat"] else ""
        worker = f" on worker {running['worker']}" if running["worker"] else " (waiting for a worker)"
        story.append(
            {
                "at": running["last_heartbeat"],
                "text": f"attempt {running['attempt']} of {running['stage']} is running{worker}{renewed}",
                "event": "pending_stage",
            }
        )
    if status.state in (JobState.QUEUED, JobState.PROCESSING):
        outcome = f"still {status.state.value}; no artifact released yet"
    elif status.state is JobState.SUCCEEDED:
        outcome = f"succeeded; artifact released (sha256 {status.output_sha256})"
    else:
        reason = status.failure_code or status.cancel_reason or "unknown"
        outcome = f"ended {status.state.value} ({reason}); no artifact released"
    story.append(
        {
            "at": status.transitions[-1].at.isoformat() if status.transitions else None,
            "text": outcome,
            "event": "outcome",
        }
    )
    return story
