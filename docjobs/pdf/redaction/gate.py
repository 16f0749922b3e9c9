"""The redaction gate: read the output back as an attacker would and fail on anything that is still there.

Two extractors that share no code with the redaction read every page: poppler's `pdftotext` (with word
boxes) and pypdf. Each page's text is searched for every value that was found before redaction and for
every pattern, also with stray whitespace squeezed out. Any word pdftotext still sees inside a redaction
region is a leak even when it matches nothing: a black box drawn over text that is still there is the
classic failed redaction. Document-level places (metadata, outlines, attachments, scripts, form values,
annotations) are read with pikepdf, through the same list the scrubber cleans.

A leak says which extractor saw what kind of thing on which page, never the text itself. Images are not
read here: text that only exists as pixels is OCR's business before redaction.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pikepdf
from pypdf import PdfReader

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.pdf.parallel_pages import ranges_for, read_in_parallel
from docjobs.pdf.redaction.patterns import NamedPattern, sensitive_kinds
from docjobs.pdf.redaction.regions import PageRegions, Rect
from docjobs.pdf.redaction.sites import document_sites

EXTRACTORS = ("pdftotext", "pypdf", "pikepdf")
PDFTOTEXT_TIMEOUT = 300.0  # seconds, for the whole document
_XHTML = "{http://www.w3.org/1999/xhtml}"
_XML_FORBIDDEN = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


@dataclass(frozen=True)
class Leak:
    extractor: str
    page: int | None  # 1-based; None for document-level places
    kind: str  # "value", "pattern:<name>", "in_region", "unreadable" or a document site kind ("metadata", ...)


@dataclass(frozen=True)
class GateReport:
    leaks: list[Leak]
    extractors: tuple[str, ...]

    @property
    def clean(self) -> bool:
        return not self.leaks


@dataclass(frozen=True)
class Word:
    text: str
    box: Rect  # default user space


def check_redaction(
    pdf_path: Path, values: frozenset[str], patterns: Sequence[NamedPattern], regions: PageRegions
) -> GateReport:
    """Every way the redacted content at `pdf_path` could still be read, one leak per (extractor, page,
    kind); a clean report means both extractors and the document scan found nothing. The two extractors
    read a long document in page ranges at once (docjobs/pdf/parallel_pages.py), each range's leaks sent back."""
    leaks: list[Leak] = []
    with pikepdf.open(pdf_path) as pdf:
        for site in document_sites(pdf):
            if any(sensitive_kinds(text, patterns, values) for text in site.texts):
                leaks.append(Leak("pikepdf", site.page, site.kind))
        boxes = [_page_box(page) for page in pdf.pages]
    if shutil.which("pdftotext") is None:
        raise DocJobError(FailureCode.TOOL_MISSING)
    read = _RangeRead(pdf_path, values, patterns, regions, boxes)
    with read_in_parallel(read, ranges_for(len(boxes))) as answers:
        parts = answers()
    if any(part["pdftotext_unreadable"] for part in parts):
        leaks.append(Leak("pdftotext", None, "unreadable"))
    for extractor in ("pdftotext", "pypdf"):
        leaks += [Leak(extractor, int(number), str(kind)) for part in parts for number, kind in part[extractor]]
    return GateReport(leaks=list(dict.fromkeys(leaks)), extractors=EXTRACTORS)


class _RangeRead:
    """Both extractors' leaks on a range of pages (0-based indices; the leaks name 1-based pages)."""

    def __init__(
        self,
        pdf_path: Path,
        values: frozenset[str],
        patterns: Sequence[NamedPattern],
        regions: PageRegions,
        boxes: list[tuple[Rect, int]],
    ) -> None:
        self.pdf_path, self.values, self.patterns, self.regions, self.boxes = pdf_path, values, patterns, regions, boxes

    def __call__(self, pages: range) -> dict[str, Any]:
        pdftotext: list[tuple[int, str]] = []
        read = _pdftotext_pages(self.pdf_path, self.boxes, pages)
        for number, page, box in read or ():
            page_text = " ".join(word.text or "" for word in page.iter(f"{_XHTML}word"))
            pdftotext += [(number, kind) for kind in sorted(sensitive_kinds(page_text, self.patterns, self.values))]
            regions = self.regions.get(number, ())
            if regions and any(word.box.mostly_inside(region) for word in _words(page, *box) for region in regions):
                pdftotext.append((number, "in_region"))
        pypdf: list[tuple[int, str]] = []
        for number, text in _pypdf_pages(self.pdf_path, pages, to_the_end=pages.stop == len(self.boxes)):
            if text is None:
                pypdf.append((number, "unreadable"))
            else:
                pypdf += [(number, kind) for kind in sorted(sensitive_kinds(text, self.patterns, self.values))]
        return {"pdftotext_unreadable": read is None, "pdftotext": pdftotext, "pypdf": pypdf}


def _page_box(page: pikepdf.Page) -> tuple[Rect, int]:
    """The page's MediaBox and /Rotate: what maps poppler's word boxes back to default user space."""
    x0, y0, x1, y1 = (float(value) for value in page.mediabox)
    return Rect.spanning(x0, y0, x1, y1), int(page.obj.get("/Rotate", 0)) % 360


def poppler_words(pdf_path: Path) -> list[tuple[int, list[Word]]] | None:
    """Words and their boxes per page, as pdftotext sees them, boxes mapped back to default user space;
    None when pdftotext cannot read the file."""
    with pikepdf.open(pdf_path) as pdf:
        boxes = [_page_box(page) for page in pdf.pages]
    if shutil.which("pdftotext") is None:
        raise DocJobError(FailureCode.TOOL_MISSING)
    read = _pdftotext_pages(pdf_path, boxes, range(len(boxes)))
    return None if read is None else [(number, _words(page, *box)) for number, page, box in read]


def _pdftotext_pages(
    pdf_path: Path, boxes: list[tuple[Rect, int]], pages: range
) -> list[tuple[int, ElementTree.Element, tuple[Rect, int]]] | None:
    """pdftotext's reading of the pages in `pages` (0-based indices into `boxes`, the pages' MediaBox and
    /Rotate): each page's number, its XHTML element and its box; None when pdftotext cannot read the file. The
    words' boxes are mapped (`_words`) only where they are looked at."""
    if not pages:
        return []
    first, last = pages.start + 1, pages.stop
    try:
        result = subprocess.run(
            ["pdftotext", "-q", "-bbox", "-f", str(first), "-l", str(last), "-enc", "UTF-8", str(pdf_path), "-"],
            capture_output=True,
            timeout=PDFTOTEXT_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DocJobError(FailureCode.REDACTION_FAILED, "the redaction check timed out") from None
    if result.returncode != 0:
        return None
    # pdftotext copies control characters a font maps glyphs to into its XHTML, which XML 1.0 forbids.
    root = ElementTree.fromstring(_XML_FORBIDDEN.sub("\ufffd".encode(), result.stdout))
    elements = zip(root.iter(f"{_XHTML}page"), boxes[first - 1 : last], strict=False)
    return [(number, page, box) for number, (page, box) in enumerate(elements, first)]


def _words(page: ElementTree.Element, box: Rect, rotation: int) -> list[Word]:
    return [
        Word(word.text or "", _to_user_space(_word_box(word), box, rotation)) for word in page.iter(f"{_XHTML}word")
    ]


def _word_box(word: ElementTree.Element) -> Rect:
    return Rect(*(float(word.get(key, "0")) for key in ("xMin", "yMin", "xMax", "yMax")))


def _to_user_space(word: Rect, mediabox: Rect, rotation: int) -> Rect:
    """Undo poppler's page transform for a word box: the MediaBox origin, /Rotate, and y pointing down
    from the top of the (rotated) page."""
    points = [(x, y) for x in (word.x0, word.x1) for y in (word.y0, word.y1)]
    left, bottom, right, top = mediabox.x0, mediabox.y0, mediabox.x1, mediabox.y1
    if rotation == 90:
        mapped = [(y + left, x + bottom) for x, y in points]
    elif rotation == 180:
        mapped = [(right - x, y + bottom) for x, y in points]
    elif rotation == 270:
        mapped = [(right - y, top - x) for x, y in points]
    else:
        mapped = [(x + left, top - y) for x, y in points]
    xs, ys = [x for x, _ in mapped], [y for _, y in mapped]
    return Rect(min(xs), min(ys), max(xs), max(ys))


def _pypdf_pages(pdf_path: Path, pages: range, *, to_the_end: bool) -> list[tuple[int, str | None]]:
    """The text of each page in `pages` (0-based) that pypdf counts, and with `to_the_end` of every page it
    counts after them; None for a page it cannot read (which then counts as a leak: what cannot be checked is
    not known to be clean)."""
    reader = PdfReader(pdf_path)
    stop = len(reader.pages) if to_the_end else min(pages.stop, len(reader.pages))
    read: list[tuple[int, str | None]] = []
    for index in range(pages.start, stop):
        page = reader.pages[index]
        try:
            read.append((index + 1, page.extract_text()))
        except Exception:  # noqa: BLE001 - any extractor failure is reported as an unreadable page
            read.append((index + 1, None))
    return read
