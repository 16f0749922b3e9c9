"""What every stage that opens document bytes shares: every part of an attempt (activities/attempt.py), and the
pool of limited child processes that does the document work while the activity's thread keeps the lease. The
stages declared by a `StageEntry` are run by activities/adapter.py; `sign` and `ocr_chunk` compose these parts
themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import CancelledError

from activities.attempt import OUTPUT_CAP, WORK_ROOT, StoreStages
from activities.cost import AttemptMeter
from activities.lease import Lease, typed_failures
from docjobs.domain.models import BlobRef, JobShape, StageInput
from docjobs.domain.stage_cost import CpuBudget
from docjobs.domain.stage_specs import StageSpec
from docjobs.isolation.child_pool import ChildPool, ProgressFn
from docjobs.isolation.child_process import ChildStopped
from docjobs.isolation.stage_work import Entry
from docjobs.isolation.tenant_pools import TenantPools, hand_over
from docjobs.store.storage import BlobStore, left_file_cap

WorkT = TypeVar("WorkT", bound=BaseModel)
DoneT = TypeVar("DoneT", bound=BaseModel)
OutputT = TypeVar("OutputT", bound=BaseModel)


@dataclass(frozen=True)
class Attempt:
    number: int
    lease: Lease
    folder: Path
    meter: AttemptMeter
    pool: ChildPool  # the job's tenant's: no child serves two tenants


class RestageInput(Protocol):
    """A stage that rewrites an earlier stage's output: that output, the job's input (re-checked) and the budget."""

    @property
    def source(self) -> BlobRef: ...

    @property
    def staged(self) -> BlobRef: ...

    @property
    def cpu(self) -> CpuBudget: ...

    @property
    def shape(self) -> JobShape: ...


@dataclass(frozen=True)
class RestagePaths:
    """Where, in the attempt's folder, the document child reads the earlier output and writes the new one."""

    source: Path
    output: Path
    text_output: Path  # written only by a stage asked for the page text


class IsolatedStages(StoreStages):
    def __init__(self, store: BlobStore, workdir: Path, pool: ChildPool | TenantPools) -> None:
        super().__init__(store, workdir)
        self._pool = pool

    @contextmanager
    def _attempt(self, stage: str, request: StageInput) -> Iterator[Attempt]:
        """One attempt of `stage`: typed failures, the lease, the job's tenant's pool of document children, a
        private folder (in the root of the tenant's sandbox, the only folder it may write: `WORK_ROOT`), what the
        attempt costs (its output reports `attempt.meter.total()`) and the cap on what it copies out of each file its
        child leaves (`OUTPUT_CAP`: from the sizes of the blobs it was given, recorded with their digests, and the
        pages render counted; never from anything the child could change)."""
        meter = AttemptMeter()
        lease = Lease(stage, meter)
        with (
            typed_failures(stage, request.shape, pages=lease.pages_total, meter=meter, resume=lease.details) as number,
            lease,
            _output_capped(request),
            self._pool.lease(request.job_id, with_followers=request.shape.signs) as (pool, root),
            _work_root(root),
            self._folder(stage, root) as folder,
        ):
            yield Attempt(number, lease, folder, meter, pool)

    def _isolated(
        self,
        attempt: Attempt,
        entry: Entry[WorkT, DoneT],
        work: WorkT,
        cpu: CpuBudget,
        max_pages: int | None = None,
        on_progress: ProgressFn | None = None,
    ) -> DoneT:
        """Run `entry` on `work` in a document child; its page progress renews the lease (a page count above
        `max_pages` is not believed) and goes to `on_progress` too, and a cancel or a lost lease kills it."""

        def progress(done: int, total: int) -> None:
            attempt.lease.progress(done, total)
            if on_progress is not None:
                on_progress(done, total)

        hand_over(attempt.folder, attempt.pool.confinement)
        try:
            return attempt.pool.run(
                entry.name,
                work,
                entry.done_type,
                cpu=cpu,
                on_progress=progress,
                should_stop=activity.is_cancelled,
                on_usage=attempt.meter.add_child,
                max_pages=max_pages,
                folder=attempt.folder,
            )
        except ChildStopped:
            raise CancelledError("the stage was canceled or lost its lease: its document child was killed") from None

    def _restage(
        self,
        attempt: Attempt,
        request: RestageInput,
        entry: Entry[WorkT, DoneT],
        work: Callable[[RestagePaths], WorkT],
        on_progress: ProgressFn | None = None,
    ) -> tuple[DoneT, RestagePaths]:
        """An earlier stage's output rewritten in a document child: the job's input must still have its digest, and
        that output is fetched checked. The caller stages what the child wrote, at the paths returned."""
        folder = attempt.folder
        paths = RestagePaths(folder / "input.pdf", folder / "output.pdf", text_output=folder / "text.json")
        self._verify_source(request.source)
        self._fetch_staged(request.staged, paths.source)
        pages = request.shape.page_count or None  # counted by render: a child may not claim more
        return self._isolated(attempt, entry, work(paths), request.cpu, max_pages=pages, on_progress=on_progress), paths

    @staticmethod
    def _output(spec: StageSpec[Any, OutputT], done: BaseModel, attempt: Attempt, **stored: object) -> OutputT:
        """The stage's activity output: what its child reported (`done`, whose fields the output inherits), what
        the worker stored, and the attempt's number and cost."""
        output: OutputT = spec.output.model_validate(
            {**dict(done), **stored, "attempt": attempt.number, "cost": attempt.meter.total()}
        )
        return output


@contextmanager
def _work_root(root: Path | None) -> Iterator[None]:
    """`WORK_ROOT` set to the attempt's root (where its folder is) while the block runs."""
    token = WORK_ROOT.set(root)
    try:
        yield
    finally:
        WORK_ROOT.reset(token)


@contextmanager
def _output_capped(request: StageInput) -> Iterator[None]:
    """`OUTPUT_CAP` set for the attempt of `request`'s stage while the block runs."""
    token = OUTPUT_CAP.set(left_file_cap(blob_bytes(request), request.shape.page_count))
    try:
        yield
    finally:
        OUTPUT_CAP.reset(token)


def blob_bytes(value: object) -> int:
    """The sizes of every blob `value` (a stage's input, with what it holds) names: what its stage was given."""
    if isinstance(value, BlobRef):
        return value.size
    if isinstance(value, BaseModel):
        return sum(blob_bytes(getattr(value, name)) for name in type(value).model_fields)
    if isinstance(value, list | tuple):
        return sum(blob_bytes(item) for item in value)
    return 0
