"""The output contract, checked before release with readers independent of the ones that wrote it.

Each check raises `DocJobError("fidelity.<check>")` (the job is quarantined: nothing is released) and
the names of the passed checks are returned, so the job records what was verified.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pikepdf

from docjobs.errors import DocJobError
from docjobs.pdf.inspect import open_checked

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


def _page_words(pdf: Path) -> list[set[str]]:
    """Words per page as poppler reads them (an independent reader: not pikepdf, not pyHanko)."""
    result = _run("pdftotext", "-raw", "-enc", "UTF-8", "-q", str(pdf), "-")
    if result.returncode != 0:
        raise DocJobError("fidelity.reader", "a second PDF reader could not read the output")
    pages = result.stdout.decode("utf-8", "replace").split("\f")[:-1]
    return [set(page.split()) for page in pages]


def check_fidelity(
    source: Path, output: Path, *, text_layer_kept: bool, watermark_text: str | None, pages_may_turn: bool = False
) -> list[str]:
    """Compare `output` with `source`; `text_layer_kept` is true in structure mode, `watermark_text` names
    the stamp that must be searchable on every page (None when it is only pixels), `pages_may_turn` allows
    OCR to set scanned pages upright (then page sizes are compared in either orientation)."""
    checks: list[str] = []
    # The source passed the full check at render (and its digest since); the output gets qpdf's below.
    with open_checked(source, check_streams=False) as (before, _), pikepdf.open(output) as after:
        if len(after.pages) != len(before.pages):
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
    source_words, output_words = _page_words(source), _page_words(output)
    if not len(output_words) == _reader_page_count(output) == len(source_words):
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


def _reader_page_count(pdf: Path) -> int:
    result = _run("pdfinfo", str(pdf))
    for line in result.stdout.decode("utf-8", "replace").splitlines():
        if result.returncode == 0 and line.startswith("Pages:"):
            return int(line.split()[1])
    raise DocJobError("fidelity.reader", "a second PDF reader could not open the output")


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
