"""Vet an input before any work is done on it, so bad input fails once with a stable code.

Every rejection is raised `from None`: pikepdf/qpdf messages carry the file path and can quote
object data, and an exception's cause travels with it (into logs and workflow history).

Truncation policy. qpdf silently rebuilds a missing cross-reference table, so a file cut off at
half its length can open with blank pages and no error. We therefore require the end-of-file
marker `%%EOF` in the last KiB (where readers look for it): an interrupted upload never has one. NUL
bytes and whitespace after the file's end (some producers pad a file to a block size) are not counted.

Repair policy. What qpdf recovers from with a warning and without losing data is accepted and
counted (`PdfInfo.repair_warnings`; render then processes qpdf's clean rewrite, docjobs/pdf/normalize.py):
a rebuilt cross-reference table (an off-by-one `startxref`, wrong offsets), a direct page-tree kid,
objects that needed recovery, and content-stream syntax errors (readers skip the same tokens; the
content bytes are kept as they are). What loses data stays `input.malformed`: a stream whose data
does not decode, a page content that cannot be read, a page tree qpdf cannot walk.

Encryption. A file encrypted with an empty user password opens without one and is processed (recorded
as `permissions_only`). AESV2 (V4) without /Length in the encryption dictionary is common and means a
128-bit key, but qpdf derives a 40-bit key from the missing /Length and then decrypts nothing; such a
file is decrypted by qpdf with the 128-bit key computed here (Algorithm 2 of ISO 32000) first.

Budgets (docjobs/pdf/budgets.py). The page tree is counted from the tree itself, on a first opening that
builds no page objects, so a reference repeated 200,000 times fails `input.too_large` before qpdf copies a
page; and before qpdf decodes every stream, each stream's decoded size and each page's operator count are
measured within their budgets (`input.too_complex`).
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import BinaryIO, Literal

import pikepdf
from pikepdf import Name

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import InputKind
from docjobs.pdf.budgets import (
    DEFAULT_BUDGETS,
    Budgets,
    check_nesting,
    check_operators,
    check_stream_sizes,
    page_tree_count,
)
from docjobs.pdf.jbig2 import bound_jbig2_decoder

ProgressFn = Callable[[int, int], None]
"""Called as (pages_done, pages_total) after each page; lets the caller heartbeat."""

Kind = Literal["pdf", "png", "jpeg", "tiff", "office", "zip", "unknown"]
Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in PDF user space, normalised

# What parsing untrusted bytes can raise from qpdf/pikepdf. OSError is deliberately absent: an I/O
# failure is the worker's problem (retried), not a verdict on the input.
_PARSE_ERRORS = (pikepdf.PdfError, RuntimeError, ValueError, TypeError, KeyError, IndexError)

WINDOW = 1024  # readers accept the header within the first, and %%EOF within the last, KiB
# Office documents by their first bytes (docs/office.md, "What acceptance reads"): an OLE2 compound file (.doc,
# .xls, .ppt), RTF, or a zip whose first entry is an OOXML package's or an OpenDocument's. OOXML writers put
# `[Content_Types].xml` first, or (LibreOffice) the package's relationships and parts; an OpenDocument starts
# with its stored `mimetype` entry (ODF 1.2 part 3, 3.3), whose value follows the entry's name.
_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_RTF_MAGIC = b"{\\rtf"
_ZIP_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, then the name's and the extra field's lengths
_OOXML_FIRST_ENTRIES = ("[Content_Types].xml", "_rels/", "docProps/", "word/", "xl/", "ppt/", "customXml/")
_ODF_MIMETYPE = b"application/vnd.oasis.opendocument."
_PADDING = b"\0\t\n\f\r "  # what may follow a file's end (PDF whitespace)
# How qpdf words a stream whose data does not decode: the data is lost, not repaired.
_UNDECODABLE = "error decoding stream data"


class Encryption(StrEnum):
    NONE = "none"
    PERMISSIONS_ONLY = "permissions_only"  # encrypted with an empty user password: opens freely


@dataclass(frozen=True)
class PdfInfo:
    page_count: int
    encryption: Encryption
    repair_warnings: int = 0  # qpdf's warnings about what it recovered (only counted, never their text)


def sniff_kind(head: bytes) -> Kind:
    """Classify by magic bytes (the first KiB), never by file name."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return "tiff"
    if head.startswith((_OLE2_MAGIC, _RTF_MAGIC)):
        return "office"
    if head.startswith(b"PK\x03\x04"):
        return "office" if _office_zip(head) else "zip"
    if b"%PDF-" in head[:WINDOW]:
        return "pdf"
    return "unknown"


def _office_zip(head: bytes) -> bool:
    """Whether a zip's first local file header (within `head`) names an OOXML package's part or an OpenDocument's
    `mimetype`: nothing else of the zip is read here (its directory is at its end, and is the child's to read)."""
    if len(head) < _ZIP_LOCAL_HEADER.size:
        return False
    _, name_length, extra_length = _ZIP_LOCAL_HEADER.unpack_from(head)
    name = head[_ZIP_LOCAL_HEADER.size : _ZIP_LOCAL_HEADER.size + name_length].decode("cp437")
    if name == "mimetype":
        value = _ZIP_LOCAL_HEADER.size + name_length + extra_length
        return head[value : value + len(_ODF_MIMETYPE)] == _ODF_MIMETYPE
    return name.startswith(_OOXML_FIRST_ENTRIES)


def input_kind(head: bytes, *, declared_html: bool) -> InputKind | None:
    """What an input is, by its magic bytes: a document (PDF or image), an office document or a zip bundle. HTML
    has no magic: the caller declares it (`Content-Type: text/html`, a `.html` file). None: not an accepted input."""
    kind = sniff_kind(head)
    if kind == "zip":
        return InputKind.BUNDLE
    if kind == "office":
        return InputKind.OFFICE
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
        head = file.read(WINDOW)
        tail = _tail(file)
    if sniff_kind(head) != "pdf":
        raise DocJobError(FailureCode.INPUT_UNSUPPORTED)
    if b"%%EOF" not in tail:
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the input PDF is truncated (no end-of-file marker)")
    limit = budgets.max_pages if max_pages is None else min(max_pages, budgets.max_pages)
    # qpdf copies every page object while opening (to push inherited attributes down), so the tree is
    # counted first on an opening that does not.
    with _open(path, inherit_page_attributes=False) as bare:
        try:
            if page_tree_count(bare, limit, budgets=budgets) > limit:
                raise DocJobError(FailureCode.INPUT_TOO_LARGE, f"the input has more than {limit} pages")
        except _PARSE_ERRORS:
            raise DocJobError(FailureCode.INPUT_MALFORMED, "the page tree of the input PDF is unreadable") from None
    stack = ExitStack()
    pdf = stack.enter_context(_open(path))
    try:
        encryption = Encryption.PERMISSIONS_ONLY if pdf.is_encrypted else Encryption.NONE
        key = _aes_key_without_length(pdf)
        if key is not None:
            pdf.close()
            pdf = stack.enter_context(_decrypted(path, key, stack))
        page_count = _page_count(pdf)
        if page_count == 0:
            raise DocJobError(FailureCode.INPUT_EMPTY)
        if page_count > limit:
            raise DocJobError(FailureCode.INPUT_TOO_LARGE, f"the input has more than {limit} pages")
        repairs = len(pdf.get_warnings())  # made while opening and building the pages: accepted
        if check_streams:
            repairs += _check_syntax(pdf, budgets)
        _check_geometry(pdf)
        yield pdf, PdfInfo(page_count=page_count, encryption=encryption, repair_warnings=repairs)
    finally:
        stack.close()


def _tail(file: BinaryIO) -> bytes:
    """The last WINDOW bytes of `file` before its trailing padding (NULs, whitespace)."""
    end = os.fstat(file.fileno()).st_size
    while end > 0:  # back over the padding, a window at a time
        start = max(0, end - WINDOW)
        file.seek(start)
        kept = len(file.read(end - start).rstrip(_PADDING))
        end = start + kept
        if kept:
            break
    file.seek(max(0, end - WINDOW))
    return file.read(end - file.tell())


def _open(path: Path, *, inherit_page_attributes: bool = True) -> pikepdf.Pdf:
    try:
        return pikepdf.open(path, inherit_page_attributes=inherit_page_attributes)
    except pikepdf.PasswordError:
        raise DocJobError(FailureCode.INPUT_ENCRYPTED) from None
    except _PARSE_ERRORS:
        raise DocJobError(FailureCode.INPUT_MALFORMED) from None


_PASSWORD_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")


def _aes_key_without_length(pdf: pikepdf.Pdf) -> bytes | None:
    """The 128-bit file key of an AESV2 file (opened with the empty user password) whose encryption dictionary
    lacks /Length; None for every other file. See "Encryption" in the module docstring."""
    try:
        if (
            not pdf.is_encrypted or pdf.encryption.V != 4 or pdf.encryption.stream_method.name != "aes"  # AESV2
        ):
            return None
        encrypt, identifier = pdf.trailer.Encrypt, pdf.trailer.ID[0]
        if Name.Length in encrypt:
            return None
        digest = hashlib.md5(  # the standard's key derivation
            _PASSWORD_PAD + bytes(encrypt.O)[:32] + struct.pack("<i", int(encrypt.P)) + bytes(identifier),
            usedforsecurity=False,
        )
        metadata_in_clear: object = encrypt.get(Name.EncryptMetadata)
        if metadata_in_clear is False:
            digest.update(b"\xff\xff\xff\xff")
        key = digest.digest()
        for _ in range(50):
            key = hashlib.md5(key, usedforsecurity=False).digest()
        return key
    except _PARSE_ERRORS:
        raise DocJobError(
            FailureCode.INPUT_MALFORMED, "the encryption dictionary of the input PDF is unreadable"
        ) from None


def _decrypted(path: Path, key: bytes, stack: ExitStack) -> pikepdf.Pdf:
    """`path` decrypted by qpdf with `key` into a temporary file beside it (kept until `stack` closes), opened."""
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=path.parent)))
    clear = folder / "decrypted.pdf"
    arguments = ["qpdf", "--no-warn", "--password-is-hex-key", f"--password={key.hex()}", "--decrypt", str(path)]
    try:
        job = pikepdf.Job([*arguments, str(clear)])
        job.run()
        failed = job.exit_code not in (0, 3)
    except _PARSE_ERRORS:
        failed = True
    if failed:
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the input PDF cannot be decrypted")
    return _open(clear)


def _page_count(pdf: pikepdf.Pdf) -> int:
    try:
        return len(pdf.pages)
    except _PARSE_ERRORS:
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the page tree of the input PDF is unreadable") from None


def _check_syntax(pdf: pikepdf.Pdf, budgets: Budgets) -> int:
    """Decode every stream and parse every page's content (the checks of `qpdf --check`); returns the
    number of qpdf's warnings about what it recovered, raises `input.malformed` where data is lost."""
    try:
        check_stream_sizes(pdf, budgets=budgets)  # resolves every object: recovered ones warn
        warnings = pdf.get_warnings()
        check_nesting(warnings)
        for page in pdf.pages:
            check_operators(page, budgets)
        bound_jbig2_decoder(budgets.max_stream_bytes)
        warnings += pdf.check_pdf_syntax()  # raises for page content that cannot be decoded
    except _PARSE_ERRORS:
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the input PDF has damaged streams or page content") from None
    if any(_UNDECODABLE in warning for warning in warnings):
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the input PDF has damaged streams or page content")
    return len(warnings)


def _check_geometry(pdf: pikepdf.Pdf) -> None:
    try:
        for page in pdf.pages:
            visible_box(page)
    except ValueError:
        raise DocJobError(FailureCode.INPUT_MALFORMED, "a page of the input PDF has no usable MediaBox") from None


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
