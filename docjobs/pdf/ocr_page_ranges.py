"""A long document OCR'd in page ranges: cut a range out for OCR, and put the OCR'd pages back.

The merge works on the rendered document itself and rewrites only what OCR changes on a page (its content,
resources, boxes and rotation), in the page objects that were there: the outline, named destinations and
links of the document, which point at those objects, stay as they were, and so do each page's annotations.
The range given to OCR is therefore cut without annotations: they would drag the pages they point at along
into it, and the merge keeps the originals anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pikepdf

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.ocr_page_ranges import PageRange
from docjobs.pdf.inspect import open_checked

# What OCR may change on a page: these are taken from the OCR'd page (one it lacks is removed). Everything
# else (annotations, structure parents, thumbnails, ...) stays the rendered page's.
OCR_PAGE_KEYS = ("/Contents", "/Resources", "/MediaBox", "/CropBox", "/BleedBox", "/TrimBox", "/ArtBox", "/UserUnit")
LEFT_OUT_OF_A_RANGE = ("/Annots", "/B", "/Thumb", "/StructParents")


@dataclass(frozen=True)
class OcrdRange:
    pages: PageRange
    path: Path  # the range's pages, OCR'd, in order


def cut_page_range(source: Path, output: Path, pages: PageRange) -> None:
    """Pages `pages` of `source` (validated earlier in the job) as a PDF of their own, without annotations."""
    with open_checked(source, check_streams=False) as (pdf, info), pikepdf.new() as cut:
        if pages.last > info.page_count:
            raise DocJobError(
                FailureCode.INPUT_MALFORMED, f"the document has {info.page_count} pages, not {pages.last}"
            )
        for number in range(pages.first, pages.last + 1):
            cut.pages.append(pdf.pages[number - 1])
        for page in cut.pages:
            for key in LEFT_OUT_OF_A_RANGE:
                if key in page.obj:
                    del page.obj[key]
        cut.save(output)


def merge_page_ranges(source: Path, ranges: Sequence[OcrdRange], output: Path) -> int:
    """The rendered document `source` with every page of `ranges` in place of its own; returns the page count.

    The ranges must cover every page once, in order: a gap, an overlap or a range with another page count
    than its range is `ocr.invalid_output` (nothing is guessed)."""
    with open_checked(source, check_streams=False) as (pdf, info):
        expected = 1
        for ocrd_range in sorted(ranges, key=lambda ocrd_range: ocrd_range.pages.first):
            if ocrd_range.pages.first != expected:
                raise DocJobError(FailureCode.OCR_INVALID_OUTPUT, f"the OCR'd page ranges do not cover page {expected}")
            with pikepdf.open(ocrd_range.path) as ocrd:
                if len(ocrd.pages) != ocrd_range.pages.pages:
                    raise DocJobError(
                        FailureCode.OCR_INVALID_OUTPUT,
                        f"the OCR'd page range {ocrd_range.pages.name} has another page count",
                    )
                for index, page in enumerate(ocrd.pages):
                    _take_over(pdf, pdf.pages[ocrd_range.pages.first - 1 + index], ocrd, page)
            expected = ocrd_range.pages.last + 1
        if expected != info.page_count + 1:
            raise DocJobError(FailureCode.OCR_INVALID_OUTPUT, f"the OCR'd page ranges do not cover page {expected}")
        pdf.save(output)
        return info.page_count


def _take_over(pdf: pikepdf.Pdf, page: pikepdf.Page, cut: pikepdf.Pdf, ocrd: pikepdf.Page) -> None:
    """Rewrite `page` (an object of `pdf`) with what OCR made of it in `ocrd` (a page of `cut`), keeping the
    object itself."""
    for key in OCR_PAGE_KEYS:
        if key in ocrd.obj:
            page.obj[key] = _copied(pdf, cut, ocrd.obj[key])
        elif key in page.obj:
            del page.obj[key]
    page.obj.Rotate = int(ocrd.obj.get("/Rotate", 0))  # explicit: never one inherited from the page tree


def _copied(pdf: pikepdf.Pdf, cut: pikepdf.Pdf, value: pikepdf.Object) -> pikepdf.Object:
    """`value` of the OCR'd page, with every object it refers to, as an object of `pdf` (qpdf copies only
    indirect objects from another file: a direct array or dictionary is made indirect in its own file first)."""
    if not isinstance(value, pikepdf.Array | pikepdf.Dictionary | pikepdf.Stream):
        return value  # a number or a name: a value, nothing to copy
    return pdf.copy_foreign(value if value.is_indirect else cut.make_indirect(value))
