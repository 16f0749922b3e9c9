"""A worker whose `render` is a test double that records how many jobs are inside it at once.

    DOCJOBS_BATCH_RECORD=FILE [DOCJOBS_BATCH_GATE=N | DOCJOBS_BATCH_HOLD=FILE] python tests/batch_worker.py ...

(the same flags as worker.py). Every render appends `enter JOB_ID` and `exit JOB_ID` lines to FILE, in the
order they happen. With GATE, a render waits until N renders are inside (or GATE_SECONDS passed), so the
batch's concurrency is reached by construction, not left to the speed of the machine. With HOLD, a render
waits until the file HOLD exists, heartbeating, and ends at once when its job is canceled.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import CancelledError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from activities.adapter import StageActivities
from docjobs import worker
from docjobs.domain import stage_specs as specs
from docjobs.domain.models import StageInput
from docjobs.isolation.entries import StageEntry

GATE_SECONDS = 10.0
HOLD_POLL_SECONDS = 0.2
InputT = TypeVar("InputT", bound=StageInput)
OutputT = TypeVar("OutputT", bound=BaseModel)


class RecordingRender(StageActivities):
    inside = 0
    lock = threading.Condition()

    def run_stage(self, entry: StageEntry[InputT, OutputT, Any, Any], request: InputT) -> OutputT:
        if entry.spec is not specs.RENDER:
            return super().run_stage(entry, request)
        record = Path(os.environ["DOCJOBS_BATCH_RECORD"])
        with self.lock:
            RecordingRender.inside += 1
            with record.open("a") as out:
                out.write(f"enter {request.job_id}\n")
            self.lock.notify_all()
        try:
            self._hold()
            return super().run_stage(entry, request)
        finally:
            with self.lock:
                RecordingRender.inside -= 1
                with record.open("a") as out:
                    out.write(f"exit {request.job_id}\n")

    def _hold(self) -> None:
        gate = int(os.environ.get("DOCJOBS_BATCH_GATE") or 0)
        waited = 0.0
        while gate and waited < GATE_SECONDS:  # heartbeating: the wait must not cost the stage its lease
            activity.heartbeat()
            with self.lock:
                if self.lock.wait_for(lambda: RecordingRender.inside >= gate, timeout=HOLD_POLL_SECONDS):
                    break
            waited += HOLD_POLL_SECONDS
        hold = os.environ.get("DOCJOBS_BATCH_HOLD")
        while hold and not Path(hold).exists():
            activity.heartbeat()
            activity.wait_for_cancelled_sync(HOLD_POLL_SECONDS)
            if activity.is_cancelled():
                raise CancelledError("held render canceled")


if __name__ == "__main__":
    setattr(worker, "StageActivities", RecordingRender)  # noqa: B010 - swap the stage in, keep the rest
    raise SystemExit(worker.main())
