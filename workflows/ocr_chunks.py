"""The OCR stage of a long document, in page ranges: orchestration only (docjobs/domain/ocr_chunks.py).

Each range is an `ocr_chunk` activity on the queue of long documents' OCR (the OCR workers serve it with slots of
their own, so a short document's `ocr` never waits behind it), up to the policy's `ocr.max_parallel` of them at
once, each retried on its own: a worker lost in the middle of the stage costs the chunks it held, and the chunks
of one scan spread over every OCR worker. Then one `ocr_merge` puts them back into the document, and the
release gates check the whole of it as they check the output of the single `ocr` activity.

Chunks run in the job's own workflow rather than in a child workflow: a cancel, the deadline and a failed
chunk reach every running chunk the way they reach any stage (each activity is cancelled and waited for, and
its lease kills its document child), and the status and the Web UI's current details show the pages done
without a second workflow to ask. A chunk costs its activity's three events and at most one workflow task
(chunks ending together share one): at 16 pages a chunk, under half an event per page.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from docjobs.domain.job_status import ChunkProgress
    from docjobs.domain.models import OcrInput, OcrOutput, StageInput
    from docjobs.domain.ocr_chunks import OcrChunk, OcrChunkInput, OcrChunkOutput, OcrMergeInput, PageRange, chunk_plan
    from docjobs.domain.policy import OcrOutputType, OcrPolicy
    from docjobs.domain.stage_cost import Cost
    from workflows import stages

# The activities that make up the OCR stage of a long document: their attempts count as the stage's.
OCR_PARTS = frozenset({stages.activity_name(stages.ocr_chunk), stages.activity_name(stages.ocr_merge)})
# Asked only for a document longer than one chunk: a run recorded before chunks existed replays its one `ocr`.
OCR_CHUNKS_PATCH = "ocr-in-page-ranges"
# Asked only of a job whose request names the queue of page ranges: a run recorded before that queue existed
# replays its ranges and merge on the OCR queue.
OCR_CHUNK_QUEUE_PATCH = "ocr-ranges-own-queue"


class StageOutput(Protocol):
    """What every stage's activity reports besides its result: its attempt and what every attempt cost."""

    attempt: int
    cost: Cost


InputT = TypeVar("InputT", bound=StageInput)
OutputT = TypeVar("OutputT", bound=StageOutput)


class RunPart(Protocol):
    """Runs one activity of the OCR stage (a chunk or the merge) as the workflow runs a stage's activity, with
    its timeout sized for `pages` pages."""

    async def __call__(
        self, declaration: Callable[[InputT], OutputT], payload: InputT, *, pages: int, summary: str
    ) -> OutputT: ...


def page_ranges(policy: OcrPolicy, page_count: int) -> list[PageRange] | None:
    """The chunks of the document's OCR, or None when it takes the single `ocr` activity: one chunk, or PDF/A
    output (OCRmyPDF makes the whole file PDF/A; a merge of its chunks would not be one)."""
    if policy.output_type is not OcrOutputType.PDF:
        return None
    plan = chunk_plan(page_count, policy.chunk_pages)
    return plan if len(plan) > 1 else None


async def ocr_in_chunks(
    request: OcrInput, plan: Sequence[PageRange], run: RunPart, progress: ChunkProgress
) -> OcrOutput:
    """OCR every range of `plan` (at most `max_parallel` at once, in page order), then merge them. `progress`
    counts the finished ranges. The first range that fails cancels the others (and waits for them) and is
    raised; a cancel of the stage reaches every running range the same way."""
    limit = asyncio.Semaphore(request.ocr.max_parallel)
    finished: dict[int, OcrChunkOutput] = {}

    def report() -> None:  # the Web UI's current details (no history event)
        workflow.set_current_details(f"OCR: {progress.pages_done} of {progress.pages_total} pages")

    async def one(index: int, pages: PageRange) -> None:
        async with limit:
            chunk = OcrChunkInput(
                job_id=request.job_id, source=request.source, staged=request.staged, ocr=request.ocr, pages=pages
            )
            finished[index] = await run(stages.ocr_chunk, chunk, pages=pages.pages, summary=f"ocr: pages {pages.name}")
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
    chunks = [finished[index] for index in range(len(plan))]
    merge = OcrMergeInput(
        job_id=request.job_id,
        source=request.source,
        staged=request.staged,
        chunks=[OcrChunk(pages=chunk.pages, chunk=chunk.chunk) for chunk in chunks],
        watermark=request.watermark,
    )
    merged = await run(stages.ocr_merge, merge, pages=progress.pages_total, summary=f"ocr: merge {len(chunks)} chunks")
    return OcrOutput(
        staged=merged.staged,
        text=merged.text,
        pages_ocred=[number for chunk in chunks for number in chunk.pages_ocred],
        pages_deskewed=[page for chunk in chunks for page in chunk.pages_deskewed],
        pages_unreadable=[number for chunk in chunks for number in chunk.pages_unreadable],
        attempt=max([merged.attempt, *(chunk.attempt for chunk in chunks)]),
    )
