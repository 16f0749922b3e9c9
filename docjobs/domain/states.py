"""The job state machine: one closed transition table, used by the workflow and by the client poller.

Active states are `queued` and `processing` (with a `stage`); `succeeded`, `failed`, `canceled` and
`quarantined` are terminal and final. Any transition not in the table raises `InvalidTransition`.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"
    PROCESSING = "processing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"
    QUARANTINED = "quarantined"


class Stage(StrEnum):  # in pipeline order: stages only advance
    GENERATE = "generate"
    RENDER = "render"
    OCR = "ocr"
    REDACT = "redact"
    SIGN = "sign"
    VERIFY = "verify"
    PUBLISH = "publish"


TERMINAL_STATES: frozenset[JobState] = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED, JobState.QUARANTINED}
)

_ENDINGS = TERMINAL_STATES - {JobState.SUCCEEDED}

# state -> states it may move to. `processing -> processing` is a stage change.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.PROCESSING} | _ENDINGS),
    JobState.PROCESSING: frozenset({JobState.PROCESSING} | TERMINAL_STATES),
    **{state: frozenset() for state in TERMINAL_STATES},
}


class InvalidTransition(Exception):
    """A transition the table does not allow (including any move out of a terminal state)."""


def parse_state(value: str) -> JobState:
    """A state name as seen on the wire; an unknown name is a protocol error, not a new state."""
    try:
        return JobState(value)
    except ValueError:
        raise InvalidTransition(f"unknown job state {value!r}") from None


def check_transition(
    current: JobState, new: JobState, *, stage_from: Stage | None = None, stage_to: Stage | None = None
) -> None:
    """Raise unless `current -> new` is allowed; `processing` always carries a stage and stages only advance.

    A terminal state keeps the stage it ended in (for the record); only `processing` moves are stage-checked.
    """
    if new not in TRANSITIONS[current]:
        raise InvalidTransition(f"{current} -> {new} is not allowed")
    if new is JobState.PROCESSING:
        if stage_to is None:
            raise InvalidTransition("processing needs a stage")
        if current is JobState.PROCESSING and stage_from is not None:
            order = list(Stage)
            if order.index(stage_to) <= order.index(stage_from):
                raise InvalidTransition(f"stage {stage_from} -> {stage_to} goes backwards")


def reachable(current: JobState, new: JobState) -> bool:
    """Whether `new` can follow `current` through zero or more allowed transitions (a poller may miss some)."""
    seen: set[JobState] = set()
    frontier = {current}
    while frontier:
        if new in frontier:
            return True
        seen |= frontier
        frontier = {after for state in frontier for after in TRANSITIONS[state]} - seen
    return False


def is_terminal(state: JobState) -> bool:
    return state in TERMINAL_STATES
