"""The bounded poller: wait for a job with an absolute deadline and a poll budget.

A caller's wait running out is not a job outcome: the result says the budget ran out and the job ID is
still the way to reconcile later. Every status seen is validated against the transition table, and the
transitions a job reports may only ever grow (history is append-only); anything else is a protocol error.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from itertools import pairwise

from docjobs.domain.job_status import JobStatus
from docjobs.domain.states import InvalidTransition, check_transition, is_terminal, parse_state, reachable


class WaitEnd(StrEnum):
    TERMINAL = "terminal"
    TIMEOUT = "timeout"  # the caller's absolute deadline passed
    BUDGET = "budget"  # the caller's poll budget was spent


class ProtocolError(Exception):
    """The job reported something the state machine does not allow: never guess, stop and say so."""


@dataclass(frozen=True)
class WaitResult:
    end: WaitEnd
    status: JobStatus | None  # None only when not a single poll answered before the deadline
    polls: int


def validate_history(status: JobStatus, previous: JobStatus | None) -> None:
    """Check each reported transition against the table, and that it extends what was seen before.

    A status rebuilt from visibility (no worker answered) carries no transitions; then only the move from
    the previously seen state is checked, which must be reachable through the table.
    """
    try:
        parse_state(status.state)
        records = status.transitions
        for before, after in pairwise(records):
            check_transition(before.state, after.state, stage_from=before.stage, stage_to=after.stage)
        if records and (records[-1].state != status.state or records[-1].stage != status.stage):
            raise InvalidTransition("the current state is not the last transition")
    except InvalidTransition as error:
        raise ProtocolError(str(error)) from None
    if previous is None:
        return
    if not reachable(previous.state, status.state):
        raise ProtocolError(f"the job moved from {previous.state} to {status.state}")
    # The steps must match, not their times: a status rebuilt from history while no worker answered (a worker
    # restarting) stamps each step with its event's time, a worker's answer with its workflow task's.
    seen = [(record.state, record.stage) for record in previous.transitions]
    if records and seen and [(record.state, record.stage) for record in records[: len(seen)]] != seen:
        raise ProtocolError("the job's transitions were rewritten between two polls")


def backoff_delays(initial: float, cap: float, rng: random.Random) -> Callable[[int], float]:
    """Capped exponential backoff with full jitter in [delay/2, delay]."""

    def delay(poll: int) -> float:
        ceiling = min(cap, initial * 2**poll)
        return rng.uniform(ceiling / 2, ceiling)

    return delay


async def wait_for_job(
    fetch: Callable[[], Awaitable[JobStatus]],
    *,
    timeout: float,
    max_polls: int,
    initial_delay: float = 0.25,
    max_delay: float = 5.0,
    on_status: Callable[[JobStatus], None] | None = None,
    rng: random.Random | None = None,
) -> WaitResult:
    """Poll until the job is terminal, the deadline passes or the budget is spent (whichever is first)."""
    if max_polls < 1:
        raise ValueError("max_polls must be at least 1")
    deadline = time.monotonic() + timeout
    next_delay = backoff_delays(initial_delay, max_delay, rng or random.Random())
    previous: JobStatus | None = None
    polls = 0
    while True:
        try:  # not asyncio.wait_for: on 3.11 it drops a cancel (Ctrl-C) that lands as the poll completes
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.5)):
                status = await fetch()
        except TimeoutError:
            return WaitResult(WaitEnd.TIMEOUT, previous, polls)
        polls += 1
        validate_history(status, previous)
        previous = status
        if on_status is not None:
            on_status(status)
        if is_terminal(status.state):
            return WaitResult(WaitEnd.TERMINAL, status, polls)
        if polls >= max_polls:
            return WaitResult(WaitEnd.BUDGET, status, polls)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return WaitResult(WaitEnd.TIMEOUT, status, polls)
        await asyncio.sleep(min(next_delay(polls - 1), remaining))
