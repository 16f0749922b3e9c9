"""The OCR stage of a long document, in page ranges: orchestration only (docjobs/domain/ocr_page_ranges.py).

Each range is an `ocr_chunk` activity on the queue of long documents' OCR (the OCR workers serve it with slots of
their own, so a short document's `ocr` never waits behind it), up to the policy's `ocr.max_parallel` of them at
once, each retried on its own: a worker lost in the middle of the stage costs the ranges it held, and the ranges
of one scan spread over every OCR worker. Then one `ocr_merge` puts them back into the document, and the
release gates check the whole of it as they check the output of the single `ocr` activity.

Ranges run in the job's own workflow rather than in a child workflow: a cancel, the deadline and a failed
range reach every running range the way they reach any stage (each activity is cancelled and waited for, and
its lease kills its document child), and the status and the Web UI's current details show the pages done
without a second workflow to ask. A range costs its activity's three events and at most one workflow task
(ranges ending together share one): at 16 pages a range, under half an event per page.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from docjobs.domain.job_status import ChunkProgress
    from docjobs.domain.models import OcrInput, OcrOutput, StageInput
    from docjobs.domain.ocr_page_ranges import (
        OcrMergeInput,
        OcrPageRangeInput,
        OcrPageRangeOutput,
        PageRange,
        StoredOcrRange,
        page_range_plan,
    )
    from docjobs.domain.policy import OcrOutputType, OcrPolicy
    from docjobs.domain.stage_cost import Cost
    from workflows import stages

# The activities that make up the OCR stage of a long document: their attempts count as the stage's.
OCR_PARTS = frozenset({stages.activity_name(stages.ocr_chunk), stages.activity_name(stages.ocr_merge)})
# Asked only for a document longer than one range: a run recorded before ranges existed replays its one `ocr`.
OCR_PAGE_RANGES_PATCH = "ocr-in-page-ranges"
# Asked only of a job whose request names the queue of page ranges: a run recorded before that queue existed
# replays its ranges and merge on the OCR queue.
OCR_RANGE_QUEUE_PATCH = "ocr-ranges-own-queue"


class StageOutput(Protocol):
    """What every stage's activity reports besides its result: its attempt and what every attempt cost."""

    attempt: int
    cost: Cost


InputT = TypeVar("InputT", bound=StageInput)
OutputT = TypeVar("OutputT", bound=StageOutput)


class RunPart(Protocol):
    """Runs one activity of the OCR stage (a range or the merge) as the workflow runs a stage's activity, with
    its timeout sized for `pages` pages."""

    async def __call__(
        self, declaration: Callable[[InputT], OutputT], payload: InputT, *, pages: int, summary: str
    ) -> OutputT: ...


def page_ranges(policy: OcrPolicy, page_count: int) -> list[PageRange] | None:
    """The page ranges of the document's OCR, or None when it takes the single `ocr` activity: one range, or PDF/A
    output (OCRmyPDF makes the whole file PDF/A; a merge of its ranges would not be one)."""
    if policy.output_type is not OcrOutputType.PDF:
        return None
    plan = page_range_plan(page_count, policy.chunk_pages)
    return plan if len(plan) > 1 else None


async def ocr_in_page_ranges(
    request: OcrInput, plan: Sequence[PageRange], run: RunPart, progress: ChunkProgress
) -> OcrOutput:
    """OCR every range of `plan` (at most `max_parallel` at once, in page order), then merge them. `progress`
    counts the finished ranges. The first range that fails cancels the others (and waits for them) and is
    raised; a cancel of the stage reaches every running range the same way."""
    limit = asyncio.Semaphore(request.ocr.max_parallel)
    finished: dict[int, OcrPageRangeOutput] = {}

    def report() -> None:  # the Web UI's current details (no history event)
        workflow.set_current_details(f"OCR: {progress.pages_done} of {progress.pages_total} pages")

    async def one(index: int, pages: PageRange) -> None:
        async with limit:
            part = OcrPageRangeInput(
                job_id=request.job_id, source=request.source, staged=request.staged, ocr=request.ocr, pages=pages
            )
            finished[index] = await run(stages.ocr_chunk, part, pages=pages.pages, summary=f"ocr: pages {pages.name}")
        progress.pages_done += pages.pages
        progress.chunks_done += 1
        report()

    report()

    tasks = [asyncio.create_task(one(index, pages)) for index, pages in enumerate(plan)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # each cancelled activity has really stopped
        raise
    done = [finished[index] for index in range(len(plan))]
    merge = OcrMergeInput(
        job_id=request.job_id,
        source=request.source,
        staged=request.staged,
        chunks=[StoredOcrRange(pages=ocrd.pages, chunk=ocrd.chunk) for ocrd in done],
        watermark=request.watermark,
    )
    merged = await run(stages.ocr_merge, merge, pages=progress.pages_total, summary=f"ocr: merge {len(done)} ranges")
    return OcrOutput(
        staged=merged.staged,
        text=merged.text,
        pages_ocred=[number for ocrd in done for number in ocrd.pages_ocred],
        pages_deskewed=[page for ocrd in done for page in ocrd.pages_deskewed],
        pages_unreadable=[number for ocrd in done for number in ocrd.pages_unreadable],
        attempt=max([merged.attempt, *(ocrd.attempt for ocrd in done)]),
    )
