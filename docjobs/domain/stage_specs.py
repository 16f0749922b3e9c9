"""Every activity docjobs runs, declared once: its name and what it takes and returns; for a document stage also
what its timeout grows with, the queue it runs on and which of its results the job's status shows.

The workflows call activities through these (workflows/stages.py declares one callable per spec), and the worker
registers its implementations under them. A document stage's spec is what the workflows may know of it; the rest
of its one declaration holds the spec itself, beside what only a worker may import: its `StageEntry`
(docjobs/isolation/stage_work.py) adds the work order, the document child's function, the files it reads and
those it keeps, from which one adapter (activities/adapter.py) makes its activity and the worker registers it on
its spec's queue. The names are in every recorded history, and the input and output models are what
other-language clients and old histories send and read: never rename either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from docjobs.domain.archive import ArchiveStep, OpenArchiveInput, RenewInput
from docjobs.domain.batching import (
    AwaitJobs,
    BatchPin,
    EndedJob,
    PinBatchPolicy,
    RecordOutcomes,
    RunningJob,
    StartDocuments,
)
from docjobs.domain.models import (
    ActivityTiming,
    BlobRef,
    CleanupInput,
    EvidenceInput,
    EvidenceOutput,
    GenerateInput,
    GenerateOutput,
    JobRequest,
    NotifyInput,
    OcrInput,
    OcrOutput,
    PublishInput,
    PublishOutput,
    RedactInput,
    RedactOutput,
    RenderInput,
    RenderOutput,
    ResolveInput,
    SignInput,
    SignOutput,
    StageInput,
    VerifyInput,
    VerifyOutput,
)
from docjobs.domain.ocr_page_ranges import OcrMergeInput, OcrMergeOutput, OcrPageRangeInput, OcrPageRangeOutput
from docjobs.domain.states import Stage

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT")
StageInputT = TypeVar("StageInputT", bound=StageInput)
StageOutputT = TypeVar("StageOutputT", bound=BaseModel)
FunctionT = TypeVar("FunctionT", bound=Callable[..., Any])
SPEC_ATTRIBUTE = "docjobs_activity"  # set on each declaration and implementation: the spec it is registered under


@dataclass(frozen=True)
class ActivitySpec(Generic[InputT, OutputT]):
    name: str  # the activity's name in history: never rename one
    input: type[InputT]  # the type of its one argument (a model, or a generic alias such as `list[str]`)
    output: type[OutputT]  # the type of its result


class StageQueue(StrEnum):
    GENERAL = "general"  # the workflow's own task queue
    OCR = "ocr"  # the job's `ocr_task_queue` (its own workers: OCR is slow and heavy)
    # The job's `ocr_chunk_task_queue` (None: its OCR queue): served by the OCR workers with slots of their own,
    # so that a long document's page ranges never take the slots a short document's `ocr` needs.
    OCR_PAGE_RANGES = "ocr_chunks"


def per_page_seconds(timing: ActivityTiming) -> float:
    return timing.per_page_seconds


def ocr_per_page_seconds(timing: ActivityTiming) -> float:
    return timing.ocr_per_page_seconds


@dataclass(frozen=True, kw_only=True)
class StageSpec(ActivitySpec[StageInputT, StageOutputT]):
    """A stage of the document pipeline: an activity whose timeout and child CPU budget grow with the pages."""

    stage: Stage
    queue: StageQueue = StageQueue.GENERAL
    per_page: Callable[[ActivityTiming], float] = per_page_seconds  # start-to-close = base + per_page * pages


def stage_spec(
    stage: Stage,
    input: type[StageInputT],
    output: type[StageOutputT],
    *,
    queue: StageQueue = StageQueue.GENERAL,
    per_page: Callable[[ActivityTiming], float] = per_page_seconds,
) -> StageSpec[StageInputT, StageOutputT]:
    """A stage's spec, named after the stage."""
    return StageSpec(stage.value, input, output, stage=stage, queue=queue, per_page=per_page)


def mark_spec(spec: ActivitySpec[Any, Any]) -> Callable[[FunctionT], FunctionT]:
    """Marks a function as `spec`'s (`spec_of` reads it back; registering it with Temporal is the caller's)."""

    def mark(function: FunctionT) -> FunctionT:
        setattr(function, SPEC_ATTRIBUTE, spec)
        return function

    return mark


def spec_of(function: Callable[..., Any]) -> ActivitySpec[Any, Any]:
    """The spec a declaration or an implementation (a bound method too) is registered under."""
    spec = getattr(function, SPEC_ATTRIBUTE, None)
    if not isinstance(spec, ActivitySpec):
        raise TypeError(f"{function!r} implements no docjobs activity")
    return spec


GENERATE = stage_spec(Stage.GENERATE, GenerateInput, GenerateOutput)
RESOLVE = ActivitySpec[ResolveInput, JobRequest]("resolve", ResolveInput, JobRequest)  # a public input's request
RENDER = stage_spec(Stage.RENDER, RenderInput, RenderOutput)
OCR = stage_spec(Stage.OCR, OcrInput, OcrOutput, queue=StageQueue.OCR, per_page=ocr_per_page_seconds)
REDACT = stage_spec(Stage.REDACT, RedactInput, RedactOutput)
SIGN = stage_spec(Stage.SIGN, SignInput, SignOutput)
VERIFY = stage_spec(Stage.VERIFY, VerifyInput, VerifyOutput)
# A long document's OCR in page ranges (workflows/ocr_page_ranges.py): parts of the `ocr` stage, on the queue of
# long documents' OCR, timed by the pages of their part.
OCR_PAGE_RANGE = StageSpec[OcrPageRangeInput, OcrPageRangeOutput](
    "ocr_chunk",
    OcrPageRangeInput,
    OcrPageRangeOutput,
    stage=Stage.OCR,
    queue=StageQueue.OCR_PAGE_RANGES,
    per_page=ocr_per_page_seconds,
)
OCR_MERGE = StageSpec[OcrMergeInput, OcrMergeOutput](
    "ocr_merge",
    OcrMergeInput,
    OcrMergeOutput,
    stage=Stage.OCR,
    queue=StageQueue.OCR_PAGE_RANGES,
    per_page=ocr_per_page_seconds,
)
PUBLISH = stage_spec(Stage.PUBLISH, PublishInput, PublishOutput)
EVIDENCE = ActivitySpec[EvidenceInput, EvidenceOutput]("evidence", EvidenceInput, EvidenceOutput)
CLEANUP = ActivitySpec[CleanupInput, int]("cleanup", CleanupInput, int)
NOTIFY = ActivitySpec[NotifyInput, str]("notify", NotifyInput, str)

# An archive's steps (docjobs/domain/archive.py): opened by its B-LTA job, renewed by its own workflow.
OPEN_ARCHIVE = ActivitySpec[OpenArchiveInput, ArchiveStep]("open_archive", OpenArchiveInput, ArchiveStep)
RENEW_ARCHIVE = ActivitySpec[RenewInput, ArchiveStep]("renew_archive", RenewInput, ArchiveStep)

STAGES: tuple[StageSpec[Any, Any], ...] = (GENERATE, RENDER, OCR, REDACT, SIGN, VERIFY, PUBLISH)
STAGE_PARTS: tuple[StageSpec[Any, Any], ...] = (OCR_PAGE_RANGE, OCR_MERGE)  # each runs a part of its stage
JOB_ACTIVITIES: tuple[ActivitySpec[Any, Any], ...] = (
    RESOLVE,
    *STAGES,
    *STAGE_PARTS,
    EVIDENCE,
    CLEANUP,
    NOTIFY,
    OPEN_ARCHIVE,
    RENEW_ARCHIVE,
)

# The batch workflow's steps (docjobs/domain/batching.py): run on the batch queue, never on a document.
PIN_BATCH_POLICY = ActivitySpec[PinBatchPolicy, BatchPin]("pin_batch_policy", PinBatchPolicy, BatchPin)
START_DOCUMENTS = ActivitySpec[StartDocuments, list[RunningJob]](
    "start_batch_documents", StartDocuments, list[RunningJob]
)
AWAIT_JOBS = ActivitySpec[AwaitJobs, list[EndedJob]]("await_batch_jobs", AwaitJobs, list[EndedJob])
CANCEL_JOBS = ActivitySpec[list[str], int]("cancel_batch_jobs", list[str], int)
RECORD_OUTCOMES = ActivitySpec[RecordOutcomes, BlobRef]("record_batch_outcomes", RecordOutcomes, BlobRef)
BATCH_ACTIVITIES: tuple[ActivitySpec[Any, Any], ...] = (
    PIN_BATCH_POLICY,
    START_DOCUMENTS,
    AWAIT_JOBS,
    CANCEL_JOBS,
    RECORD_OUTCOMES,
)
