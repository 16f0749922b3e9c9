"""How a document job ends (workflows/document_job.py): the terminal state it will be reported in, and what a failed
stage's typed failure gives it: its code, safe message and attempt, and what every attempt cost."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

with workflow.unsafe.imports_passed_through():
    from docjobs.domain.errors import FAILURE_CODES, FailureCode, Outcome
    from docjobs.domain.stage_cost import Cost
    from docjobs.domain.states import JobState

# Deterministic failures are never retried; transient ones are, with backoff, until max_attempts.
NON_RETRYABLE_CODES = [code for code, info in FAILURE_CODES.items() if info.outcome is not Outcome.RETRY]

# How a local activity's last failed attempt reaches the workflow: the SDK raises its ApplicationError or
# TimeoutError itself, not wrapped in an ActivityError as an activity's failure is (sdk-rust issue 323).
LOCAL_ACTIVITY_FAILURES = (ActivityError, ApplicationError, ActivityTimeoutError)
# One attempt of a wrap-up step: `evidence`, and `cleanup` in the wrap-up or after the end (staging_cleanup.py).
WRAP_UP_TIMEOUT = timedelta(minutes=2)


def failure_of(error: ActivityError) -> tuple[str, str, int | None]:
    """(code, safe message, attempt) of a failed stage, from the activity's typed failure."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type in FAILURE_CODES:
        attempt = cause.details[0] if cause.details and isinstance(cause.details[0], int) else None
        return cause.type, cause.message, attempt
    if isinstance(cause, ActivityTimeoutError) or error.retry_state is RetryState.TIMEOUT:
        return FailureCode.STAGE_TIMEOUT, FailureCode.STAGE_TIMEOUT.info.message, None
    return FailureCode.STAGE_RETRIES_EXHAUSTED, FailureCode.STAGE_RETRIES_EXHAUSTED.info.message, None


def cost_of_failure(error: ActivityError) -> Cost | None:
    """What every attempt of a failed stage cost: in the typed failure's details (activities/lease.py), or in the
    last heartbeat of an attempt that timed out (activities/cost.py); None when neither says."""
    cause = error.cause
    if isinstance(cause, ApplicationError) and len(cause.details) > 1:
        reported: object = cause.details[1]
    elif isinstance(cause, ActivityTimeoutError) and cause.last_heartbeat_details:
        beat = cause.last_heartbeat_details[0]
        reported = beat.get("cost") if isinstance(beat, dict) else None
    else:
        return None
    try:
        return Cost.model_validate(reported)
    except ValueError:  # pydantic's ValidationError: a failure from something else than a docjobs stage
        return None


@dataclass(frozen=True)
class Ending:
    """The terminal state a job will be reported in, once its clean-up is done."""

    state: JobState
    code: str | None = None
    message: str | None = None
    cancel_reason: str | None = None
