"""The lease an activity holds while it works: heartbeats with progress details, typed failures, metrics.

A side thread renews the lease while the worker process lives, so one long page cannot lose it; a killed
worker stops renewing and the server hands the stage to another worker after the heartbeat timeout. With an
`AttemptMeter` (activities/cost.py) the heartbeats and a failure's details also carry the cost of every
attempt so far.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError, CancelledError

from activities.cost import AttemptMeter, cost_detail
from activities.metrics import outcome_after_failure, record_attempt
from docjobs.domain.errors import PROVIDER_OUTAGES, DocJobError, Outcome, outage_retry_seconds
from docjobs.domain.models import JobShape

log = logging.getLogger("docjobs.activities")


RENEW_SECONDS = 2.0  # the worker's heartbeat throttle: a running stage hears a cancel within about this long


class Lease:
    """Renews the activity's heartbeat while the stage runs, carrying the latest progress.

    Nothing is sent during the stage's first tick (at most a second): the start of the task holds the lease
    that long, and most stages of a small document are over by then. After that a heartbeat goes out at a
    tick when the progress changed, or when the last one is `RENEW_SECONDS` (or a third of the heartbeat
    timeout, if shorter) old; a cancel request or a lost lease comes back on these heartbeats.
    """

    def __init__(self, stage: str, meter: AttemptMeter | None = None) -> None:
        info = activity.info()
        self._meter = meter
        timeout = info.heartbeat_timeout.total_seconds() if info.heartbeat_timeout else 30.0
        self._tick = min(max(timeout / 3, 0.2), 1.0)
        self._renew_every = min(timeout / 3, RENEW_SECONDS)
        self.stage = stage
        self._details: dict[str, Any] = {"stage": stage, "pages_done": 0, "pages_total": None}
        self._sent: dict[str, Any] | None = None
        self._stop = threading.Event()
        context = contextvars.copy_context()  # the activity context lives in a contextvar
        self._thread = threading.Thread(target=context.run, args=(self._renew,), daemon=True, name=f"lease-{stage}")
        previous = info.heartbeat_details[0] if info.heartbeat_details else None
        self._previous: dict[str, Any] = previous if isinstance(previous, dict) else {}
        if self._previous:
            log.info("stage %s resumes after an attempt that reached page %s", stage, self._previous.get("pages_done"))

    def __enter__(self) -> Lease:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def progress(self, pages_done: int, pages_total: int) -> None:
        """Record the progress; the next tick sends it."""
        self._details = {**self._details, "pages_done": pages_done, "pages_total": pages_total}

    def note(self, **details: Any) -> None:
        """Add `details` (JSON values) to what the heartbeats carry: what the next attempt needs to resume."""
        self._details = {**self._details, **details}

    def details(self) -> dict[str, Any]:
        """What the heartbeats carry now."""
        return self._details

    def resumed_from(self) -> dict[str, Any]:
        """What the last heartbeat of the previous attempt carried (empty for a first attempt)."""
        return self._previous

    def pages_total(self) -> int:
        """The page count the stage reported (0 until it did)."""
        total = self._details.get("pages_total")
        return total if isinstance(total, int) else 0

    def _renew(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self._tick):
            details = self._details
            if details != self._sent or time.monotonic() - last >= self._renew_every:
                self._beat(details)
                self._sent, last = details, time.monotonic()

    def _beat(self, details: dict[str, Any]) -> None:
        """One heartbeat: the progress, and the running cost of every attempt so far (with a meter)."""
        extra = cost_detail(self._meter.running()) if self._meter is not None else {}
        activity.heartbeat({**details, **extra})


@contextmanager
def typed_failures(
    stage: str,
    shape: JobShape | None = None,
    pages: Callable[[], int] | None = None,
    meter: AttemptMeter | None = None,
    resume: Callable[[], dict[str, Any]] | None = None,
) -> Iterator[int]:
    """Turn failures into `ApplicationError`s typed by their stable code; yields the attempt number.

    Deterministic codes are non-retryable; the attempt rides along so the job can record it, and with a
    `meter` so does the cost of every attempt so far (also left in a last heartbeat, for the next attempt, beside
    what `resume` gives: the lease's last details, so a retry after a failure resumes as one after a lost worker).
    Unexpected exceptions are logged by type only (their messages may quote document content) and retried.
    Every attempt's outcome, duration and CPU go to the metrics, labelled with the job's `shape`, whose page
    count is `pages()` when the job did not know it yet (render counts the pages).
    """
    attempt = activity.info().attempt
    started = time.monotonic()
    outcome, code = "succeeded", None
    try:
        yield attempt
    except DocJobError as error:
        log.warning("stage %s attempt %d failed: %s", stage, attempt, error.code)
        retryable = error.outcome is Outcome.RETRY
        outcome, code = outcome_after_failure(retryable=retryable), error.code
        spent = _spent(stage, meter, resume)
        raise ApplicationError(
            error.message,
            attempt,
            *spent,
            type=error.code,
            non_retryable=not retryable,
            next_retry_delay=_outage_delay(error, attempt),
        ) from None
    except CancelledError:
        outcome = "canceled"
        raise
    except ApplicationError as error:
        outcome = outcome_after_failure(retryable=not error.non_retryable)
        _spent(stage, meter, resume)
        raise
    except Exception as error:  # noqa: BLE001 - any other failure is transient until proven otherwise
        log.error("stage %s attempt %d raised %s", stage, attempt, type(error).__name__)
        outcome = outcome_after_failure(retryable=True)
        raise ApplicationError(
            "an unexpected worker error", attempt, *_spent(stage, meter, resume), type="internal.error"
        ) from None
    finally:
        if shape is not None and not shape.page_count and pages is not None:
            shape = shape.model_copy(update={"page_count": pages()})
        cpu = meter.finished().cpu_seconds if meter is not None else None
        record_attempt(stage, shape, outcome, time.monotonic() - started, code, cpu)


def _outage_delay(error: DocJobError, attempt: int) -> timedelta | None:
    """The wait before the next attempt of one that failed because a provider did not answer (None: the retry
    policy's backoff). Temporal keeps the attempt count and the schedule-to-close: a retry never outlives them."""
    if error.code not in PROVIDER_OUTAGES:
        return None
    return timedelta(seconds=outage_retry_seconds(attempt))


def _spent(
    stage: str, meter: AttemptMeter | None, resume: Callable[[], dict[str, Any]] | None
) -> tuple[dict[str, Any], ...]:
    """The cost of every attempt so far, as a failure's detail; left in a last heartbeat too, where the next
    attempt finds it (the SDK sends an activity's last heartbeat before its failure), beside `resume`'s details."""
    if meter is None:
        return ()
    total = meter.total()
    activity.heartbeat({**(resume() if resume is not None else {}), "stage": stage, **cost_detail(total)})
    return (total.model_dump(mode="json"),)
