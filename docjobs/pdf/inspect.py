"""Vet an input before any work is done on it, so bad input fails once with a stable code.

Every rejection is raised `from None`: pikepdf/qpdf messages carry the file path and can quote
object data, and an exception's cause travels with it (into logs and workflow history).

Truncation policy. qpdf silently rebuilds a missing cross-reference table, so a file cut off at
half its length can open with blank pages and no error. We therefore require the end-of-file
marker `%%EOF` in the last KiB (where readers look for it): an interrupted upload never has one.
A file that does have it may still need its xref rebuilt (wrong offsets are common and lose
nothing), so repairs made while opening are accepted; but every stream must then decode and every
page's content must parse without a single qpdf warning (the checks of `qpdf --check`).

Budgets (docjobs/pdf/budgets.py). The page tree is counted from the tree itself, on a first opening that
builds no page objects, so a reference repeated 200,000 times fails `input.too_large` before qpdf copies a
page; and before qpdf decodes every stream, each stream's decoded size and each page's operator count are
measured within their budgets (`input.too_complex`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal

import pikepdf
from pikepdf import Name

from docjobs.errors import DocJobError
from docjobs.models import InputKind
from docjobs.pdf.budgets import (
    DEFAULT_BUDGETS,
    Budgets,
    check_nesting,
    check_operators,
    check_stream_sizes,
    page_tree_count,
)

ProgressFn = Callable[[int, int], None]
"""Called as (pages_done, pages_total) after each page; lets the caller heartbeat."""

Kind = Literal["pdf", "png", "jpeg", "tiff", "zip", "unknown"]
Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in PDF user space, normalised

# What parsing untrusted bytes can raise from qpdf/pikepdf. OSError is deliberately absent: an I/O
# failure is the worker's problem (retried), not a verdict on the input.
_PARSE_ERRORS = (pikepdf.PdfError, RuntimeError, ValueError, TypeError, KeyError, IndexError)

_WINDOW = 1024  # readers accept the header within the first, and %%EOF within the last, KiB


class Encryption(StrEnum):
    NONE = "none"
    PERMISSIONS_ONLY = "permissions_only"  # encrypted with an empty user password: opens freely


@dataclass(frozen=True)
class PdfInfo:
    page_count: int
    encryption: Encryption


def sniff_kind(head: bytes) -> Kind:
    """Classify by magic bytes (the first KiB), never by file name."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return "tiff"
    if head.startswith(b"PK\x03\x04"):
        return "zip"
    if b"%PDF-" in head[:_WINDOW]:
        return "pdf"
    return "unknown"


def input_kind(head: bytes, *, declared_html: bool) -> InputKind | None:
    """What an input is, by its magic bytes: a document (PDF or image) or a zip bundle. HTML has no magic: the
    caller declares it (`Content-Type: text/html`, a `.html` file). None: not an accepted input."""
    kind = sniff_kind(head)
    if kind == "zip":
        return InputKind.BUNDLE
    if kind != "unknown":
        return InputKind.DOCUMENT
    return InputKind.HTML if declared_html else None


def inspect_pdf(path: Path, *, max_pages: int | None = None, budgets: Budgets = DEFAULT_BUDGETS) -> PdfInfo:
    """Validate the PDF at `path` (see the module docstring) and describe it.

    Raises DocJobError: input.unsupported, input.malformed, input.encrypted, input.empty,
    input.too_large (more than `max_pages` pages, or `budgets.max_pages`) or input.too_complex.
    """
    with open_checked(path, max_pages=max_pages, budgets=budgets) as (_, info):
        return info


@contextmanager
def open_checked(
    path: Path, *, max_pages: int | None = None, check_streams: bool = True, budgets: Budgets = DEFAULT_BUDGETS
) -> Iterator[tuple[pikepdf.Pdf, PdfInfo]]:
    """Open `path` with pikepdf after the checks of `inspect_pdf`; the Pdf is closed on exit.

    `check_streams=False` skips decoding every stream, for a file that an earlier step of the same job
    already validated this way (the costliest check on large scans; the verify gate re-checks the output).
    """
    with path.open("rb") as file:
        head = file.read(_WINDOW)
        file.seek(max(0, os.fstat(file.fileno()).st_size - _WINDOW))
        tail = file.read()
    if sniff_kind(head) != "pdf":
        raise DocJobError("input.unsupported")
    if b"%%EOF" not in tail:
        raise DocJobError("input.malformed", "the input PDF is truncated (no end-of-file marker)")
    limit = budgets.max_pages if max_pages is None else min(max_pages, budgets.max_pages)
    # qpdf copies every page object while opening (to push inherited attributes down), so the tree is
    # counted first on an opening that does not.
    with _open(path, inherit_page_attributes=False) as bare:
        try:
            if page_tree_count(bare, limit, budgets=budgets) > limit:
                raise DocJobError("input.too_large", f"the input has more than {limit} pages")
        except _PARSE_ERRORS:
            raise DocJobError("input.malformed", "the page tree of the input PDF is unreadable") from None
    pdf = _open(path)
    try:
        info = PdfInfo(
            page_count=_page_count(pdf),
            encryption=Encryption.PERMISSIONS_ONLY if pdf.is_encrypted else Encryption.NONE,
        )
        if info.page_count == 0:
            raise DocJobError("input.empty")
        if info.page_count > limit:
            raise DocJobError("input.too_large", f"the input has more than {limit} pages")
        if check_streams:
            _check_syntax(pdf, budgets)
        _check_geometry(pdf)
        yield pdf, info
    finally:
        pdf.close()


def _open(path: Path, *, inherit_page_attributes: bool = True) -> pikepdf.Pdf:
    try:
        return pikepdf.open(path, inherit_page_attributes=inherit_page_attributes)
    except pikepdf.PasswordError:
        raise DocJobError("input.encrypted") from None
    except _PARSE_ERRORS:
        raise DocJobError("input.malformed") from None


def _page_count(pdf: pikepdf.Pdf) -> int:
    try:
        return len(pdf.pages)
    except _PARSE_ERRORS:
        raise DocJobError("input.malformed", "the page tree of the input PDF is unreadable") from None


def _check_syntax(pdf: pikepdf.Pdf, budgets: Budgets) -> None:
    pdf.get_warnings()  # drains the repairs made while opening; accepted, see the module docstring
    try:
        check_stream_sizes(pdf, budgets=budgets)  # resolves every object: their warnings are problems too
        warnings = pdf.get_warnings()
        check_nesting(warnings)
        for page in pdf.pages:
            check_operators(page, budgets)
        clean = not warnings and not pdf.check_pdf_syntax()
    except _PARSE_ERRORS:
        clean = False
    if not clean:
        raise DocJobError("input.malformed", "the input PDF has damaged streams or page content")


def _check_geometry(pdf: pikepdf.Pdf) -> None:
    try:
        for page in pdf.pages:
            visible_box(page)
    except ValueError:
        raise DocJobError("input.malformed", "a page of the input PDF has no usable MediaBox") from None


def visible_box(page: pikepdf.Page) -> Box:
    """What a viewer shows: the CropBox clipped to the MediaBox (the MediaBox if that is empty).

    Raises ValueError if the page has no usable MediaBox.
    """
    media = _rect(page.obj.get(Name.MediaBox))
    if media is None:
        raise ValueError("no usable MediaBox")
    crop = _rect(page.obj.get(Name.CropBox)) or media
    x0, y0, x1, y1 = max(media[0], crop[0]), max(media[1], crop[1]), min(media[2], crop[2]), min(media[3], crop[3])
    return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else media


def rotation(page: pikepdf.Page) -> int:
    """/Rotate as 0, 90, 180 or 270 (clockwise); invalid values count as 0, as in viewers."""
    try:
        rotate = int(page.obj.get(Name.Rotate, 0)) % 360
    except (TypeError, ValueError):
        return 0
    return rotate if rotate % 90 == 0 else 0


def _rect(value: object) -> Box | None:
    if not isinstance(value, pikepdf.Array) or len(value) != 4:
        return None
    try:
        ax, ay, bx, by = (float(v) for v in value)
    except (TypeError, ValueError):
        return None
    box = (min(ax, bx), min(ay, by), max(ax, bx), max(ay, by))
    return box if box[2] > box[0] and box[3] > box[1] else None
