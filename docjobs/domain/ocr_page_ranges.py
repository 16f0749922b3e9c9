"""OCR of a long document in page ranges: the plan, and what the range and merge activities exchange.

A document longer than the policy's `ocr.chunk_pages` is OCR'd in ranges of that many pages (the last one
shorter), each an `ocr_chunk` activity with its own lease, retried on its own: a worker lost in the middle of
the stage costs the ranges it held, not the document. `ocr_merge` then puts the ranges' pages back into the
rendered document. A document of one range keeps the single `ocr` activity (and its history).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from docjobs.domain.base import Frozen
from docjobs.domain.models import BlobRef, DeskewedPage, StageInput
from docjobs.domain.policy import OcrPolicy, WatermarkPolicy
from docjobs.domain.stage_cost import Cost


class PageRange(Frozen):
    """Pages `first` to `last` of a document, both included, numbered from 1."""

    first: int = Field(ge=1)
    last: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> PageRange:
        if self.last < self.first:
            raise ValueError("a page range ends at or after its first page")
        return self

    @property
    def pages(self) -> int:
        return self.last - self.first + 1

    @property
    def name(self) -> str:
        """`first-last`, as its stored range is named."""
        return f"{self.first}-{self.last}"


def page_range_plan(page_count: int, range_pages: int) -> list[PageRange]:
    """The page ranges of `range_pages` pages that cover `page_count` pages in order (the last may be shorter).
    One range for a document of at most one range (also an empty one: the stage's own checks refuse it)."""
    if range_pages < 1:
        raise ValueError("a page range has at least one page")
    if page_count <= range_pages:
        return [PageRange(first=1, last=max(page_count, 1))]
    return [
        PageRange(first=first, last=min(first + range_pages - 1, page_count))
        for first in range(1, page_count + 1, range_pages)
    ]


class OcrPageRangeInput(StageInput):
    source: BlobRef  # the accepted input, re-checked
    staged: BlobRef  # the rendered document: the range's pages are taken from it
    ocr: OcrPolicy
    pages: PageRange


class OcrPageRangeOutput(Frozen):
    chunk: BlobRef  # the range's pages, searchable (runs/<run>/ocr/<first>-<last>-a<attempt>-<id>.pdf)
    pages: PageRange
    pages_ocred: list[int]  # page numbers of the whole document, as every page list below
    pages_deskewed: list[DeskewedPage] = Field(default_factory=list)
    pages_unreadable: list[int] = Field(default_factory=list)
    pages_resumed: list[int] = Field(default_factory=list)  # read by an earlier, lost attempt (its checkpoints)
    attempt: int
    cost: Cost = Cost()


class StoredOcrRange(Frozen):
    pages: PageRange
    chunk: BlobRef


class OcrMergeInput(StageInput):
    source: BlobRef  # the accepted input, re-checked
    staged: BlobRef  # the rendered document: its structure (outline, links) is kept, its pages take the ranges'
    chunks: list[StoredOcrRange]
    watermark: WatermarkPolicy | None  # stamped after the merge (structure mode), as `ocr` stamps after OCR


class OcrMergeOutput(Frozen):
    staged: BlobRef
    text: BlobRef  # the searchable text of every page (JSON), as `ocr` stores it
    attempt: int
    cost: Cost = Cost()
