"""What a document child serves: an `Entry` per task name; and a document stage's declaration, a `StageEntry`: the
entry its child serves under its spec's name, with what the worker does around the child. Kept apart from the stage
work (stage_work.py, which imports the C/C++ PDF readers) so that a zygote whose entries must not load them
(gate_work.py) can name its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from docjobs.domain.models import BlobRef, StageInput
from docjobs.domain.stage_specs import StageSpec

if TYPE_CHECKING:
    from docjobs.signing.config import TrustAnchors

ProgressFn = Callable[[int, int], None]
WorkT = TypeVar("WorkT", bound=BaseModel)
DoneT = TypeVar("DoneT", bound=BaseModel)
InputT = TypeVar("InputT", bound=StageInput)
OutputT = TypeVar("OutputT", bound=BaseModel)

OUTPUT = "output.pdf"  # in the attempt's folder: what the child writes (`Reads.RELEASE`: the bytes it checks)
TEXT = "text.json"  # in the attempt's folder: the page text, for a stage asked for it


@dataclass(frozen=True)
class Entry(Generic[WorkT, DoneT]):
    """What a document child runs under `name`: the function, the model its work order is validated as (in
    the child), and the model its result is validated as (in the worker)."""

    name: str
    work_type: type[WorkT]
    done_type: type[DoneT]
    run: Callable[[WorkT, ProgressFn], DoneT]


class Reads(StrEnum):
    """What the worker fetches into a stage attempt's folder before its child runs, each blob checked against the
    digest it was recorded with (activities/adapter.py)."""

    # The job's first document (`source`, at `input`): its tenant's input, or what generate made.
    JOB_INPUT = "job_input"
    TEMPLATE = "template"  # JOB_INPUT; of a template job, its bundle (`template.zip`) and data (`data.json`) instead
    STAGED = "staged"  # the earlier stage's output (`staged`, at `input.pdf`); the job's input (`source`) re-checked
    RELEASE = "release"  # the job's document (`source`, at `input`) and the bytes to be released (`staged`, at OUTPUT)


@dataclass(frozen=True)
class Given:
    """What the worker gives a stage's work order: where the attempt's files are (in its folder, the only one its
    child may write), and what only the worker can know."""

    folder: Path
    source: Path  # what the child reads
    output: Path  # what it writes (`Reads.RELEASE`: the bytes to be released, which it reads)
    text: Path  # where it writes the page text, when its stage is asked for it
    data: Path | None  # a template job's data
    # The signer's trust anchors (nothing secret), for a stage that checks a signature.
    trust: Callable[[], TrustAnchors]


def _always(request: object, done: object) -> bool:
    return True


@dataclass(frozen=True)
class Keep(Generic[InputT, DoneT]):
    """A file the child wrote that the worker stages (copied out untrusted, stored under the attempt's own key), and
    the output field whose blob it becomes."""

    into: str  # the field of the stage's output
    file: str  # in the attempt's folder
    key: str  # the staging key's stage (`runs/<run>/staging/<key>-a<attempt>...`): in histories, never change one
    suffix: str = ".pdf"
    when: Callable[[InputT, DoneT], bool] = _always  # (the input, the child's result): kept at all


def counted_pages(request: StageInput) -> int | None:
    """The pages render counted (None: not known yet): a child may not claim more."""
    return request.shape.page_count or None


def believed(request: object, done: DoneT) -> DoneT:
    """The child's result as the worker takes it: as it is (its model validated it)."""
    return done


def nothing_more(request: object) -> Sequence[tuple[str, BlobRef]]:
    return ()


@dataclass(frozen=True, kw_only=True)
class StageEntry(Entry[WorkT, DoneT], Generic[InputT, OutputT, WorkT, DoneT]):
    """A document stage, declared once: its spec (its name, input, output, queue and timeout: what the workflows
    know of it), the entry its child serves under the spec's name (the work model, the function, its result), and
    what the worker does around the child: the files it fetches (`reads`, and `fetches`: more earlier outputs, by
    file name), the work order it builds (`order`), the pages the child may claim (`max_pages`), what it makes of
    the child's claims (`checked`) and the files it stages (`keeps`). The output is the child's result, the kept
    blobs, the attempt and its cost. activities/adapter.py makes the stage's activity of it."""

    name: str = field(init=False)  # the spec's
    spec: StageSpec[InputT, OutputT]
    reads: Reads
    order: Callable[[InputT, Given], WorkT]
    max_pages: Callable[[InputT], int | None] = counted_pages
    checked: Callable[[InputT, DoneT], DoneT] = believed
    keeps: tuple[Keep[InputT, DoneT], ...] = ()
    fetches: Callable[[InputT], Sequence[tuple[str, BlobRef]]] = nothing_more

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.spec.name)
        unknown = {keep.into for keep in self.keeps} - set(self.spec.output.model_fields)
        if unknown:
            raise TypeError(f"{self.name}: its output has no field {', '.join(sorted(unknown))}")


AnyStageEntry = StageEntry[Any, Any, Any, Any]
