"""The output contract, checked before release with readers independent of the ones that wrote it.

The second reader is PDFium (Chrome's PDF engine, in process through pypdfium2): it shares no code with
qpdf/pikepdf, which wrote the output, nor with pyHanko. It replaced poppler's `pdftotext` and `pdfinfo`, three
process spawns per job that cost more than the rest of the verify stage; the checks are the same.

Each check raises `DocJobError(FailureCode.FIDELITY_<CHECK>)`, code `fidelity.<check>` (the job is quarantined:
nothing is released) and the names of the passed checks are returned, so the job records what was verified.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pikepdf
import pypdfium2 as pdfium  # type: ignore[import-untyped]
import pypdfium2.raw as pdfium_c  # type: ignore[import-untyped]

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.pdf.inspect import open_checked
from docjobs.pdf.normalize import repair_input
from docjobs.pdf.parallel_pages import ranges_for, read_in_parallel

TOOL_TIMEOUT = 120
_NON_SPACE = re.compile(r"\S+")  # `\s` is str.isspace(), as is what str.split() splits at
_LINE = re.compile(r"[^\r\n]+")  # PDFium ends a line with "\r\n"


def _geometry(pdf: pikepdf.Pdf, sizes_only: bool) -> list[tuple[object, ...]]:
    """Page boxes and rotation; with `sizes_only`, each page's visible size in either orientation."""
    if sizes_only:
        return [
            tuple(
                sorted(
                    round(float(v), 1) for v in (page.cropbox[2] - page.cropbox[0], page.cropbox[3] - page.cropbox[1])
                )
            )
            for page in pdf.pages
        ]
    return [
        (
            tuple(float(v) for v in page.mediabox),
            tuple(float(v) for v in page.cropbox),
            int(page.obj.get("/Rotate", 0)) % 360,
        )
        for page in pdf.pages
    ]


def _links(pdf: pikepdf.Pdf) -> list[int]:
    return [sum(1 for annot in page.obj.get("/Annots", []) if annot.get("/Subtype") == "/Link") for page in pdf.pages]


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([_tool(tool), *args], capture_output=True, timeout=TOOL_TIMEOUT)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise DocJobError(FailureCode.TOOL_MISSING, f"{name} is not installed")
    return path


@contextmanager
def _qpdf_check(output: Path) -> Iterator[Callable[[], int]]:
    """`qpdf --check` started now, beside the other checks; yields the wait for its exit code."""
    process = subprocess.Popen(
        [_tool("qpdf"), "--check", str(output)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield lambda: process.wait(TOOL_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _page_count(pdf: Path) -> int | None:
    """PDFium's page count of `pdf`; None if it cannot open it."""
    try:
        document = pdfium.PdfDocument(pdf)
    except pdfium.PdfiumError:
        return None
    try:
        return len(document)
    finally:
        document.close()


def _words(document: pdfium.PdfDocument, index: int) -> set[str] | None:
    """The page's words: its characters split at white space and wherever one text object (a `Tj`/`TJ`)
    ends and another begins, so a stamp drawn right after a page's last word never joins it, however
    the page is turned (PDFium's own spacing guesses by position and can miss that). None if PDFium cannot
    load the page.

    The page's text comes in one call, and is split into words without asking PDFium about each character
    where it draws a stretch as one rectangle (`FPDFText_CountRects` starts a new one where the text object
    changes; a glyph without extent is not measured): first each line, else each run of non-space characters
    in it, else the run's characters one by one, as is a page whose text does not map one to one onto its
    characters."""
    page = pdfium_c.FPDF_LoadPage(document.raw, index)
    if not page:
        return None
    text_page = pdfium_c.FPDFText_LoadPage(page)
    try:
        if not text_page:
            return None
        count = pdfium_c.FPDFText_CountChars(text_page)
        text = _text(text_page, count)
        if text is None:
            return _split_by_owner(text_page, range(count))
        words: set[str] = set()
        for line in _LINE.finditer(text):
            if _one_rectangle(text_page, *line.span()):
                words.update(line.group().split())
                continue
            for run in _NON_SPACE.finditer(text, *line.span()):
                start, end = run.span()
                if end - start == 1 or _one_rectangle(text_page, start, end):
                    words.add(run.group())
                else:
                    words |= _split_by_owner(text_page, range(start, end))
        return words
    finally:
        if text_page:
            pdfium_c.FPDFText_ClosePage(text_page)
        pdfium_c.FPDF_ClosePage(page)


def _one_rectangle(text_page: Any, start: int, end: int) -> bool:
    """Whether PDFium draws the characters `start` to `end` as one rectangle: one text object."""
    return bool(pdfium_c.FPDFText_CountRects(text_page, start, end - start) == 1)


def _text(text_page: Any, count: int) -> str | None:
    """The page's characters as one string, or None unless each character is exactly one of it (PDFium leaves
    out control characters; a NUL is what an unfilled buffer holds)."""
    units = 2 * count + 2  # room for a surrogate pair per character and the terminating NUL
    buffer = (ctypes.c_ushort * units)()
    written = pdfium_c.FPDFText_GetText(text_page, 0, count, ctypes.cast(buffer, ctypes.POINTER(ctypes.c_ushort)))
    if not 0 < written <= units:
        return None if count else ""
    text = bytes(buffer)[: 2 * (written - 1)].decode("utf-16-le", "surrogatepass")
    return text if len(text) == count and "\0" not in text else None


def _split_by_owner(text_page: Any, chars: range) -> set[str]:
    """The words of `chars`, one character at a time: split at white space and where the text object changes."""
    words: set[str] = set()
    word: list[str] = []
    owner: int | None = None
    for char in chars:
        glyph = chr(pdfium_c.FPDFText_GetUnicode(text_page, char))
        drawn_by = ctypes.cast(pdfium_c.FPDFText_GetTextObject(text_page, char), ctypes.c_void_p).value
        if glyph.isspace() or drawn_by != owner:
            words.add("".join(word))
            word = []
        if not glyph.isspace():
            word.append(glyph)
        owner = drawn_by
    words.add("".join(word))
    words.discard("")
    return words


class _Comparison:
    """What the second reader finds on a range of pages of the input and the output (0-based page indices)."""

    def __init__(self, source: Path, output: Path, *, text_layer_kept: bool, stamp: set[str] | None) -> None:
        self.source, self.output, self.text_layer_kept, self.stamp = source, output, text_layer_kept, stamp

    def __call__(self, pages: range) -> dict[str, Any]:
        answer: dict[str, Any] = {"unreadable": None, "text_missing": [], "stamp_missing": []}
        with _opened(self.source) as before, _opened(self.output) as after:
            if before is None or after is None:
                answer["unreadable"] = "input" if before is None else "output"
                return answer
            for index in pages:
                words_in = _words(before, index)
                if words_in is None:
                    answer["unreadable"] = "input"
                    return answer
                words_out = _words(after, index)
                if words_out is None:
                    answer["unreadable"] = "output"
                    return answer
                if not words_in <= words_out:
                    answer["text_missing"].append(index)
                if self.stamp is not None and not self.stamp <= words_out:
                    answer["stamp_missing"].append(index)
        return answer


@contextmanager
def _opened(pdf: Path) -> Iterator[pdfium.PdfDocument | None]:
    try:
        document = pdfium.PdfDocument(pdf)
    except pdfium.PdfiumError:
        yield None
        return
    try:
        yield document
    finally:
        document.close()


@contextmanager
def _reading(comparison: _Comparison) -> Iterator[Callable[[int | None], dict[str, Any] | None]]:
    """PDFium's reading of both files, page by page, started now (beside the other checks); yields what waits
    for it: None when PDFium cannot read the input (or, given a page count, counts another in it)."""
    pages_in, pages_out = _page_count(comparison.source), _page_count(comparison.output)
    if pages_in is None or pages_out != pages_in:  # nothing to read: the wait says which failure it is
        yield lambda expected: _found(pages_in, pages_out, expected, lambda: [])
        return
    with read_in_parallel(comparison, ranges_for(pages_in)) as answers:
        yield lambda expected: _found(pages_in, pages_out, expected, answers)


def _found(
    pages_in: int | None, pages_out: int | None, expected: int | None, answers: Callable[[], list[dict[str, Any]]]
) -> dict[str, Any] | None:
    if pages_in is None or (expected is not None and pages_in != expected):
        return None
    if pages_out is None:
        raise DocJobError(FailureCode.FIDELITY_READER, "a second PDF reader could not read the output")
    if pages_out != pages_in:
        raise DocJobError(FailureCode.FIDELITY_READER, "a second PDF reader sees a different page count")
    parts = answers()
    unreadable = {part["unreadable"] for part in parts}
    if "input" in unreadable:
        return None
    if "output" in unreadable:
        raise DocJobError(FailureCode.FIDELITY_READER, "a second PDF reader could not read the output")
    return {
        "text_missing": [index for part in parts for index in part["text_missing"]],
        "stamp_missing": [index for part in parts for index in part["stamp_missing"]],
    }


def check_fidelity(
    source: Path,
    output: Path,
    *,
    text_layer_kept: bool,
    watermark_text: str | None,
    pages_may_turn: bool = False,
    workdir: Path | None = None,
) -> list[str]:
    """Compare `output` with `source`; `text_layer_kept` is true in structure mode, `watermark_text` names
    the stamp that must be searchable on every page (None when it is only pixels), `pages_may_turn` allows
    OCR to set scanned pages upright (then page sizes are compared in either orientation). With `workdir`,
    an input the second reader cannot read is compared as qpdf repaired it (render worked on that: a direct
    page-tree kid, AES without a key length).

    qpdf (its own process) and PDFium (in page ranges read at once on a long document:
    docjobs/pdf/parallel_pages.py) start first and read while pikepdf compares the structure. The failures keep
    their order: the first check that fails names the job's failure."""
    checks: list[str] = []
    stamp = set(watermark_text.split()) if watermark_text is not None else None
    comparison = _Comparison(source, output, text_layer_kept=text_layer_kept, stamp=stamp)
    with _qpdf_check(output) as qpdf_exit, _reading(comparison) as second_reader:
        # The source passed the full check at render (and its digest since); the output gets qpdf's below.
        with open_checked(source, check_streams=False) as (before, _), pikepdf.open(output) as after:
            page_count = len(before.pages)
            checks += _same_structure(before, after, pages_may_turn=pages_may_turn, links=text_layer_kept)
        if qpdf_exit() not in (0, 3):  # 3: warnings only
            raise DocJobError(FailureCode.FIDELITY_QPDF, "qpdf --check rejects the output")
        checks.append("qpdf_check")
        found = second_reader(page_count if workdir is not None else None)
    if found is None and workdir is not None:
        repair_input(source, repaired := workdir / "input-as-rendered.pdf", check_streams=False)
        as_rendered = _Comparison(repaired, output, text_layer_kept=text_layer_kept, stamp=stamp)
        with _reading(as_rendered) as second_reader:
            found = second_reader(None)
    if found is None:
        raise DocJobError(FailureCode.FIDELITY_READER, "a second PDF reader could not read the input")
    checks.append("second_reader")
    if text_layer_kept:
        if found["text_missing"]:
            number = found["text_missing"][0] + 1
            raise DocJobError(FailureCode.FIDELITY_TEXT, f"text of the input is missing from output page {number}")
        checks.append("text_kept")
    if watermark_text is not None:
        if found["stamp_missing"]:
            missing = len(found["stamp_missing"])
            raise DocJobError(FailureCode.FIDELITY_WATERMARK, f"the watermark is missing on {missing} page(s)")
        checks.append("watermark_every_page")
    return checks


def _same_structure(before: pikepdf.Pdf, after: pikepdf.Pdf, *, pages_may_turn: bool, links: bool) -> list[str]:
    """The page count, the page boxes and rotation (only sizes when OCR may set pages upright) and, with `links`,
    the link annotations: the checks passed, in order, or the first failure."""
    if len(after.pages) != len(before.pages):
        raise DocJobError(FailureCode.FIDELITY_PAGE_COUNT, "the output does not have the input's page count")
    if _geometry(after, pages_may_turn) != _geometry(before, pages_may_turn):
        raise DocJobError(FailureCode.FIDELITY_GEOMETRY, "the output's page boxes or rotation differ from the input's")
    checks = ["page_count", "page_sizes" if pages_may_turn else "geometry"]
    if links:
        if _links(after) != _links(before):
            raise DocJobError(FailureCode.FIDELITY_LINKS, "link annotations of the input are missing from the output")
        checks.append("links")
    return checks


def fonts_not_embedded(pdf: Path) -> int:
    """How many fonts `pdffonts` lists as not embedded (Type 3 fonts are glyph procedures: always carried)."""
    result = _run("pdffonts", str(pdf))
    if result.returncode != 0:
        raise DocJobError(FailureCode.FIDELITY_READER, "a second PDF reader could not read the output")
    lines = result.stdout.decode("utf-8", "replace").splitlines()
    if len(lines) < 2:
        return 0
    # Columns by the dashes under the header: a font name may hold spaces, the columns never shift.
    spans, start = [], 0
    for dashes in lines[1].split(" "):
        spans.append((start, start + len(dashes)))
        start += len(dashes) + 1
    (type_from, type_to), (emb_from, emb_to) = spans[1], spans[3]
    return sum(
        1 for line in lines[2:] if line[emb_from:emb_to].strip() == "no" and line[type_from:type_to].strip() != "Type 3"
    )


def check_fonts_embedded(pdf: Path) -> None:
    missing = fonts_not_embedded(pdf)
    if missing:
        raise DocJobError(FailureCode.FIDELITY_FONTS, f"{missing} font(s) of the document are not embedded")
