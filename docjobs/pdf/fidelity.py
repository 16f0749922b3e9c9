"""The output contract, checked before release with readers independent of the ones that wrote it.

The second reader is PDFium (Chrome's PDF engine, in process through pypdfium2): it shares no code with
qpdf/pikepdf, which wrote the output, nor with pyHanko. It replaced poppler's `pdftotext` and `pdfinfo`, three
process spawns per job that cost more than the rest of the verify stage; the checks are the same.

Each check raises `DocJobError("fidelity.<check>")` (the job is quarantined: nothing is released) and
the names of the passed checks are returned, so the job records what was verified.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pikepdf
import pypdfium2 as pdfium  # type: ignore[import-untyped]
import pypdfium2.raw as pdfium_c  # type: ignore[import-untyped]

from docjobs.domain.errors import DocJobError
from docjobs.pdf.inspect import open_checked
from docjobs.pdf.normalize import repair_input

TOOL_TIMEOUT = 120


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
    path = shutil.which(tool)
    if path is None:
        raise DocJobError("tool.missing", f"{tool} is not installed")
    return subprocess.run([path, *args], capture_output=True, timeout=TOOL_TIMEOUT)


def _page_words(pdf: Path) -> list[set[str]] | None:
    """Words per page as PDFium reads them (an independent reader: not pikepdf, not pyHanko); its page
    count is the number of entries. None if it cannot read the file."""
    try:
        document = pdfium.PdfDocument(pdf)
    except pdfium.PdfiumError:
        return None
    try:
        return [_words(document, index) for index in range(len(document))]
    except pdfium.PdfiumError:
        return None
    finally:
        document.close()


def _words(document: pdfium.PdfDocument, index: int) -> set[str]:
    """The page's words: its characters split at white space and wherever one text object (a `Tj`/`TJ`)
    ends and another begins, so a stamp drawn right after a page's last word never joins it, however
    the page is turned (PDFium's own spacing guesses by position and can miss that)."""
    page = document[index]
    text_page = page.get_textpage()
    try:
        words: set[str] = set()
        word: list[str] = []
        owner: int | None = None
        for char in range(pdfium_c.FPDFText_CountChars(text_page.raw)):
            glyph = chr(pdfium_c.FPDFText_GetUnicode(text_page.raw, char))
            drawn_by = ctypes.cast(pdfium_c.FPDFText_GetTextObject(text_page.raw, char), ctypes.c_void_p).value
            if glyph.isspace() or drawn_by != owner:
                words.add("".join(word))
                word = []
            if not glyph.isspace():
                word.append(glyph)
            owner = drawn_by
        words.add("".join(word))
        words.discard("")
        return words
    finally:
        text_page.close()
        page.close()


def _source_words(source: Path, page_count: int, workdir: Path | None) -> list[set[str]]:
    """The second reader's words of the input; of the file render worked on (qpdf's repair:
    docjobs/pdf/normalize.py) when it cannot read the input itself (a direct page-tree kid, AES without a key
    length)."""
    words = _page_words(source)
    if (words is None or len(words) != page_count) and workdir is not None:
        repair_input(source, repaired := workdir / "input-as-rendered.pdf", check_streams=False)
        words = _page_words(repaired)
    if words is None:
        raise DocJobError("fidelity.reader", "a second PDF reader could not read the input")
    return words


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
    an input the second reader cannot read is compared as qpdf repaired it (render worked on that)."""
    checks: list[str] = []
    # The source passed the full check at render (and its digest since); the output gets qpdf's below.
    with open_checked(source, check_streams=False) as (before, _), pikepdf.open(output) as after:
        page_count = len(before.pages)
        if len(after.pages) != page_count:
            raise DocJobError("fidelity.page_count", "the output does not have the input's page count")
        checks.append("page_count")
        if _geometry(after, pages_may_turn) != _geometry(before, pages_may_turn):
            raise DocJobError("fidelity.geometry", "the output's page boxes or rotation differ from the input's")
        checks.append("page_sizes" if pages_may_turn else "geometry")
        if text_layer_kept:
            if _links(after) != _links(before):
                raise DocJobError("fidelity.links", "link annotations of the input are missing from the output")
            checks.append("links")
    if _run("qpdf", "--check", str(output)).returncode not in (0, 3):  # 3: warnings only
        raise DocJobError("fidelity.qpdf", "qpdf --check rejects the output")
    checks.append("qpdf_check")
    source_words, output_words = _source_words(source, page_count, workdir), _page_words(output)
    if output_words is None:
        raise DocJobError("fidelity.reader", "a second PDF reader could not read the output")
    if len(output_words) != len(source_words):
        raise DocJobError("fidelity.reader", "a second PDF reader sees a different page count")
    checks.append("second_reader")
    if text_layer_kept:
        for number, (words_in, words_out) in enumerate(zip(source_words, output_words, strict=True), 1):
            if not words_in <= words_out:
                raise DocJobError("fidelity.text", f"text of the input is missing from output page {number}")
        checks.append("text_kept")
    if watermark_text is not None:
        stamp = set(watermark_text.split())
        missing = [n for n, words in enumerate(output_words, 1) if not stamp <= words]
        if missing:
            raise DocJobError("fidelity.watermark", f"the watermark is missing on {len(missing)} page(s)")
        checks.append("watermark_every_page")
    return checks


def fonts_not_embedded(pdf: Path) -> int:
    """How many fonts `pdffonts` lists as not embedded (Type 3 fonts are glyph procedures: always carried)."""
    result = _run("pdffonts", str(pdf))
    if result.returncode != 0:
        raise DocJobError("fidelity.reader", "a second PDF reader could not read the output")
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
        raise DocJobError("fidelity.fonts", f"{missing} font(s) of the document are not embedded")
