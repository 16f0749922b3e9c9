"""A long document OCR'd in page ranges: cut a range out for OCR, and put the OCR'd pages back.

The merge works on the rendered document itself and rewrites only what OCR changes on a page (its content,
resources, boxes and rotation), in the page objects that were there: the outline, named destinations and
links of the document, which point at those objects, stay as they were, and so do each page's annotations.
The chunk given to OCR is therefore cut without annotations: they would drag the pages they point at along
into it, and the merge keeps the originals anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pikepdf

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.ocr_chunks import PageRange
from docjobs.pdf.inspect import open_checked

# What OCR may change on a page: these are taken from the OCR'd page (one it lacks is removed). Everything
# else (annotations, structure parents, thumbnails, ...) stays the rendered page's.
OCR_PAGE_KEYS = ("/Contents", "/Resources", "/MediaBox", "/CropBox", "/BleedBox", "/TrimBox", "/ArtBox", "/UserUnit")
LEFT_OUT_OF_A_CHUNK = ("/Annots", "/B", "/Thumb", "/StructParents")


@dataclass(frozen=True)
class OcrdChunk:
    pages: PageRange
    path: Path  # the chunk's pages, OCR'd, in order


def cut_chunk(source: Path, output: Path, pages: PageRange) -> None:
    """Pages `pages` of `source` (validated earlier in the job) as a PDF of their own, without annotations."""
    with open_checked(source, check_streams=False) as (pdf, info), pikepdf.new() as chunk:
        if pages.last > info.page_count:
            raise DocJobError(
                FailureCode.INPUT_MALFORMED, f"the document has {info.page_count} pages, not {pages.last}"
            )
        for number in range(pages.first, pages.last + 1):
            chunk.pages.append(pdf.pages[number - 1])
        for page in chunk.pages:
            for key in LEFT_OUT_OF_A_CHUNK:
                if key in page.obj:
                    del page.obj[key]
        chunk.save(output)


def merge_chunks(source: Path, chunks: Sequence[OcrdChunk], output: Path) -> int:
    """The rendered document `source` with every page of `chunks` in place of its own; returns the page count.

    The chunks must cover every page once, in order: a gap, an overlap or a chunk with another page count
    than its range is `ocr.invalid_output` (nothing is guessed)."""
    with open_checked(source, check_streams=False) as (pdf, info):
        expected = 1
        for chunk in sorted(chunks, key=lambda chunk: chunk.pages.first):
            if chunk.pages.first != expected:
                raise DocJobError(FailureCode.OCR_INVALID_OUTPUT, f"the OCR chunks do not cover page {expected}")
            with pikepdf.open(chunk.path) as ocrd:
                if len(ocrd.pages) != chunk.pages.pages:
                    raise DocJobError(
                        FailureCode.OCR_INVALID_OUTPUT, f"the OCR chunk {chunk.pages.name} has another page count"
                    )
                for index, page in enumerate(ocrd.pages):
                    _take_over(pdf, pdf.pages[chunk.pages.first - 1 + index], ocrd, page)
            expected = chunk.pages.last + 1
        if expected != info.page_count + 1:
            raise DocJobError(FailureCode.OCR_INVALID_OUTPUT, f"the OCR chunks do not cover page {expected}")
        pdf.save(output)
        return info.page_count


def _take_over(pdf: pikepdf.Pdf, page: pikepdf.Page, chunk: pikepdf.Pdf, ocrd: pikepdf.Page) -> None:
    """Rewrite `page` (an object of `pdf`) with what OCR made of it in `ocrd` (a page of `chunk`), keeping the
    object itself."""
    for key in OCR_PAGE_KEYS:
        if key in ocrd.obj:
            page.obj[key] = _copied(pdf, chunk, ocrd.obj[key])
        elif key in page.obj:
            del page.obj[key]
    page.obj.Rotate = int(ocrd.obj.get("/Rotate", 0))  # explicit: never one inherited from the page tree


def _copied(pdf: pikepdf.Pdf, chunk: pikepdf.Pdf, value: pikepdf.Object) -> pikepdf.Object:
    """`value` of the OCR'd page, with every object it refers to, as an object of `pdf` (qpdf copies only
    indirect objects from another file: a direct array or dictionary is made indirect in its own file first)."""
    if not isinstance(value, pikepdf.Array | pikepdf.Dictionary | pikepdf.Stream):
        return value  # a number or a name: a value, nothing to copy
    return pdf.copy_foreign(value if value.is_indirect else chunk.make_indirect(value))
