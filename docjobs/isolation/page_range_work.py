"""The document work of OCR in page ranges (docjobs/domain/ocr_page_ranges.py), run in a document child like every
stage's (`stage_work.ENTRIES` serves them as `ocr_chunk` and `ocr_merge`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from docjobs.domain.base import Frozen
from docjobs.domain.errors import FailureCode
from docjobs.domain.models import DeskewedPage
from docjobs.domain.ocr_page_ranges import PageRange
from docjobs.domain.policy import OcrPolicy, WatermarkPolicy
from docjobs.pdf.ocr import page_texts, run_ocr, text_json, tool
from docjobs.pdf.ocr_page_ranges import OcrdRange, cut_page_range, merge_page_ranges
from docjobs.pdf.stamp import stamp

ProgressFn = Callable[[int, int], None]
# Added to the document child's own niceness for a page range: beside the ranges of a long scan, a short document's
# `ocr` (which has an OCR slot of its own, see docs/ocr.md "Fair across jobs") also gets most of the CPU when both
# run in one tenant's pool. Between tenants, each pool is a session of its own, and where the kernel groups
# sessions (autogroup), they share the CPU equally whatever their niceness.
RANGE_NICENESS = 5


class OcrPageRangeWork(Frozen):
    source: Path  # the rendered document (validated by render, its digest checked)
    output: Path  # the range's pages, OCR'd
    workdir: Path
    ocr: OcrPolicy
    pages: PageRange
    tag: str  # put in the OCR processes' environment, so they can be found
    cpu_share: Path | None = None  # how many pages Tesseract may read at once (rewritten by the worker: run_ocr)
    checkpoints: Path | None = None  # where each page's words are left once read (run_ocr)
    resume: Path | None = None  # an earlier attempt's checkpoints: those pages are not read again


class OcrPageRangeDone(Frozen):
    pages_ocred: list[int]  # numbered in the whole document, as the lists below
    pages_deskewed: list[DeskewedPage]
    pages_unreadable: list[int]
    pages_resumed: list[int] = Field(default_factory=list)


def ocr_chunk(work: OcrPageRangeWork, progress: ProgressFn) -> OcrPageRangeDone:
    """OCR one page range of the document (in OCRmyPDF's own child, killed with this one), at a lower priority."""
    os.nice(RANGE_NICENESS)  # a fresh child per task: it never serves another one
    cut = work.workdir / "range.pdf"
    cut_page_range(work.source, cut, work.pages)
    offset = work.pages.first - 1
    result = run_ocr(
        cut,
        work.output,
        work.ocr,
        workdir=work.workdir,
        on_page=progress,
        tag=work.tag,
        input_validated=True,  # render validated the document it was cut from
        page_offset=offset,
        cpu_share=work.cpu_share,
        checkpoints=work.checkpoints,
        resume=work.resume,
    )
    return OcrPageRangeDone(
        pages_ocred=[number + offset for number in result.pages_ocred],
        pages_deskewed=[page.model_copy(update={"page": page.page + offset}) for page in result.pages_deskewed],
        pages_unreadable=[number + offset for number in result.pages_unreadable],
        pages_resumed=[number + offset for number in result.pages_resumed],
    )


class OcrdRangeFile(Frozen):
    pages: PageRange
    path: Path


class OcrMergeWork(Frozen):
    source: Path  # the rendered document: its outline, links and page objects are kept
    ranges: list[OcrdRangeFile]
    output: Path
    text_output: Path  # the searchable text of every page, as JSON
    workdir: Path
    watermark: WatermarkPolicy | None


class OcrMergeDone(Frozen):
    page_count: int


def ocr_merge(work: OcrMergeWork, progress: ProgressFn) -> OcrMergeDone:
    """The ranges' pages put back into the document, its text extracted, then the watermark stamp (as `ocr`)."""
    merged = work.workdir / "merged.pdf"
    count = merge_page_ranges(work.source, [OcrdRange(part.pages, part.path) for part in work.ranges], merged)
    progress(0, count)
    work.text_output.write_text(text_json(page_texts(tool("pdftotext"), merged, count, FailureCode.OCR_INVALID_OUTPUT)))
    if work.watermark is None:
        shutil.move(merged, work.output)
    else:
        stamp(merged, work.output, work.watermark, workdir=work.workdir, on_page=progress)
    return OcrMergeDone(page_count=count)
