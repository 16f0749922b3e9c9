"""What every stage that opens document bytes shares: every part of an attempt (activities/attempt.py), and the
pool of limited child processes that does the document work while the activity's thread keeps the lease."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import CancelledError

from activities.attempt import StoreStages
from activities.cost import AttemptMeter
from activities.lease import Lease, typed_failures
from docjobs.models import CpuBudget, StageInput
from docjobs.sandbox import ChildPool, ChildStopped
from docjobs.storage import BlobStore

DoneT = TypeVar("DoneT", bound=BaseModel)


@dataclass(frozen=True)
class Attempt:
    number: int
    lease: Lease
    folder: Path
    meter: AttemptMeter


class IsolatedStages(StoreStages):
    def __init__(self, store: BlobStore, workdir: Path, pool: ChildPool) -> None:
        super().__init__(store, workdir)
        self._pool = pool

    @contextmanager
    def _attempt(self, stage: str, request: StageInput) -> Iterator[Attempt]:
        """One attempt of `stage`: typed failures, the lease, a private folder and what the attempt costs (its
        output reports `attempt.meter.total()`)."""
        meter = AttemptMeter()
        lease = Lease(stage, meter)
        with (
            typed_failures(stage, request.shape, pages=lease.pages_total, meter=meter) as number,
            lease,
            self._folder(stage) as folder,
        ):
            yield Attempt(number, lease, folder, meter)

    def _isolated(self, attempt: Attempt, work: BaseModel, done: type[DoneT], cpu: CpuBudget) -> DoneT:
        """Run the attempt's stage on `work` in a document child; its page progress renews the lease, and a
        cancel or a lost lease kills it."""
        try:
            return self._pool.run(
                attempt.lease.stage,
                work,
                done,
                cpu=cpu,
                on_progress=attempt.lease.progress,
                should_stop=activity.is_cancelled,
                on_usage=attempt.meter.add_child,
            )
        except ChildStopped:
            raise CancelledError("the stage was canceled or lost its lease: its document child was killed") from None
