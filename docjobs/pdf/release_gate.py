"""The release gate: what must hold in a document before the worker signs it, read by memory-safe parsers only.

Every document child that made or prepared the bytes to be signed (render, OCR, redact, sign) ran C and C++
parsers on them (qpdf, Ghostscript, poppler, PDFium, LibreOffice): one exploit there, and the child writes what
it likes. `verify` reads the signed bytes with those same parsers, so the document that took over render can take
over verify too and have it answer "valid". The gate is the check such a document cannot subvert:

* it runs in a sandbox of its own (docjobs/isolation/gate_work.py: a fresh child of a zygote that imported only
  this module), never in a child that made the bytes;
* it reads them with pure-Python code only: pypdf (the page tree, the objects, the text), pdfminer (the text of a
  page pypdf cannot read) and pyHanko's reader (the signature fields). This module imports neither pikepdf/qpdf,
  nor PDFium, nor poppler or Ghostscript (import-linter forbids it, and the child reports the modules it loaded:
  `LOADED_FORBIDDEN`);
* it reports facts (`GateReport`), and the worker judges them (`judge`): a report cannot make the worker sign what
  it did not expect, and the signature dictionary is compared with the one the worker itself would write
  (`expected_signature`), field by field.

What the gate checks, on the latest revision of the file prepared for signing (what a viewer shows):

* the signature dictionary: exactly one empty signature (its `/Contents` all zeros), whose `/ByteRange` is the one
  the worker checked, whose `/Type`, `/Filter`, `/SubFilter`, `/Reason` ("docjobs release for tenant NAME", the
  job's own tenant) and `/Reference` (DocMDP P1, with the catalog's `/Perms /DocMDP` pointing at it; or, after
  earlier signatures, a FieldMDP lock of every field with `/P 1`, and the field's `/Lock`) are the worker's, and
  nothing else — else `signature.dictionary`;
* the signature's widget, on the first page: invisible (an empty rectangle, no appearance) unless the policy asks
  for a visible signature, and then at the signer's stamp box with exactly the appearance pyHanko draws for the
  worker's certificate and the signature's signing time (its bytes and its dictionary, fonts included) — else
  `signature.dictionary`: a child cannot put a stamp that names anyone else, or covers the page, under the
  organization's signature;
* the page count render reported — else `fidelity.page_count`;
* no active content, as docjobs/pdf/sanitize.py counts it (the same tables: docjobs/pdf/active_kinds.py), walked
  with a visited set and a budget (docjobs/pdf/active_walk.py) — else `sanitize.residue`;
* in structure mode, the watermark's text (whitespace aside) in the extracted text of every page — else
  `fidelity.watermark` (in raster mode the watermark is pixels: the gate checks the page count and the active
  content, not the stamp);
* the job's redaction patterns match nothing in the extracted text — else `redaction.leak`.

A file the pure-Python readers cannot read is not known to be clean: `fidelity.reader`. The C/C++ readers of `verify`
still run after signing: they can add a refusal, never a pass.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, cast

from pdfminer.high_level import extract_text as pdfminer_text
from pydantic import Field
from pyhanko.pdf_utils import generic as hanko
from pyhanko.pdf_utils.layout import BoxConstraints
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.pdf_utils.writer import PdfFileWriter
from pyhanko.sign import fields, signers
from pyhanko.sign.general import load_certs_from_pemder_data
from pyhanko.sign.signers.constants import DEFAULT_SIGNING_STAMP_STYLE
from pypdf import PdfReader

from docjobs.domain.base import Frozen
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import ReleaseGateSettings
from docjobs.domain.policy import SanitizeMode, SanitizePolicy
from docjobs.pdf.active_walk import find_active_content
from docjobs.pdf.redaction.patterns import compile_patterns, sensitive_kinds

# C/C++ PDF readers (and what loads them) that must never be in the gate's process: reported if they are.
FORBIDDEN_MODULES = ("pikepdf", "pypdfium2", "fitz", "pymupdf", "ocrmypdf", "pdf2image", "ghostscript")
CATALOG = "<catalog>"  # how a reference to the document catalog is reported (the FieldMDP's /Data)
SIGNING_TIME_SLACK = timedelta(hours=1)  # the /M the child wrote, against the worker's clock
_VARIABLE_KEYS = ("/Contents", "/ByteRange", "/M")  # reported apart: the hole, the range, the time
_MAX_DEPTH, _MAX_ITEMS = 6, 64  # how much of a signature dictionary is reported: more than pyHanko ever writes
_MAX_APPEARANCE_BYTES = 1 << 16  # a stamp pyHanko draws is about 1 KiB
_APPEARANCE_VARIABLE = ("/Length", "/Filter", "/DecodeParms")  # how the stream is stored, not what it draws
_MAX_PAGE_TREE_DEPTH = 64


class Widget(Frozen):
    """The placeholder signature field's widget, as the gate read it (the field and its widget are one object)."""

    on_first_page: bool  # the first page's /Annots lists it
    rect: list[float] | None  # None: not four numbers
    appearance_sha256: str | None  # of the decoded /AP /N stream; None: no appearance
    appearance_entries: dict[str, Any] | None = None  # the stream's dictionary, /Length and /Filter aside


class SignatureDictionary(Frozen):
    """An empty signature of the prepared file, as the gate read it (names as "/Name", strings as
    {"string": ...}, the catalog as "<catalog>")."""

    field_name: str
    entries: dict[str, Any]  # every entry but /Contents, /ByteRange and /M
    byte_range: list[int] | None  # None: not four integers
    signing_time: str | None  # /M
    certifies: bool  # the catalog's /Perms /DocMDP is this dictionary
    lock: Any = None  # the field's /Lock
    widget: Widget | None = None  # None: the field has widgets of its own (/Kids), which pyHanko never writes


class GateReport(Frozen):
    """What the gate found (facts only: the worker decides, `judge`)."""

    page_count: int
    active: dict[str, int] = Field(default_factory=dict)  # kind -> count (docjobs/pdf/sanitize.py's kinds)
    watermark_missing: list[int] | None = None  # 1-based pages without the watermark's text (None: not asked)
    redaction_leaks: list[str] = Field(default_factory=list)  # "page N: kind" (never the text)
    placeholders: list[SignatureDictionary] = Field(default_factory=list)  # signatures whose /Contents is empty
    earlier_signatures: int = 0  # signature fields with a /Contents of their own (the input's signatures)
    loaded_forbidden: list[str] = Field(default_factory=list)  # FORBIDDEN_MODULES present in the gate's process
    readers: list[str] = Field(default_factory=list)  # the readers that read the file


def read_gate(path: Path, settings: ReleaseGateSettings, on_pages: Callable[[int], None] | None = None) -> GateReport:
    """Everything the gate checks in the prepared file at `path`, as facts (see the module docstring). `on_pages`
    hears the page count as soon as it is known (a child's CPU budget grows with it).

    Raises DocJobError fidelity.reader when pypdf or pyHanko cannot read it, input.too_complex beyond the budget
    (a structure nested too deeply, RecursionError, is the document child's input.too_complex too)."""
    with path.open("rb") as file:
        placeholders, earlier = signature_fields(file)
        try:
            reader = PdfReader(file, strict=False)
            page_count = len(reader.pages)
            if on_pages is not None:
                on_pages(page_count)
            active = find_active_content(reader, keep_attachments=settings.sanitize.keep_attachments)
            texts = (
                page_texts(reader, path) if settings.watermark_text is not None or settings.redact is not None else []
            )
        except (DocJobError, RecursionError, MemoryError):
            raise
        except Exception:  # noqa: BLE001 - any reader failure: the file is not known to be clean
            raise DocJobError(
                FailureCode.FIDELITY_READER, "the release gate's reader could not read the document"
            ) from None
    return GateReport(
        page_count=page_count,
        active=active,
        watermark_missing=None
        if settings.watermark_text is None
        else watermark_missing(texts, settings.watermark_text),
        redaction_leaks=[] if settings.redact is None else redaction_leaks(texts, settings),
        placeholders=placeholders,
        earlier_signatures=earlier,
        loaded_forbidden=loaded_forbidden(),
        readers=["pypdf", "pyhanko"],
    )


def loaded_forbidden() -> list[str]:
    """The C/C++ PDF readers this process has loaded: none, in the gate's child (its zygote imports this module)."""
    return sorted({name.split(".")[0] for name in sys.modules} & set(FORBIDDEN_MODULES))


# --- The signature fields, by pyHanko's reader -----------------------------------------------------------------


def signature_fields(file: IO[bytes]) -> tuple[list[SignatureDictionary], int]:
    """The empty signatures of the file (their dictionaries), and how many signature fields are filled."""
    try:
        reader = PdfFileReader(file, strict=False)
        root_ref = reader.trailer.raw_get("/Root")
        perms = reader.root.get("/Perms")
        docmdp = perms.raw_get("/DocMDP") if isinstance(perms, hanko.DictionaryObject) and "/DocMDP" in perms else None
        placeholders: list[SignatureDictionary] = []
        earlier = 0
        for name, value, field_ref in fields.enumerate_sig_fields(reader, filled_status=None):
            if value is None:
                continue
            signature = value.get_object()
            if not isinstance(signature, hanko.DictionaryObject):
                continue
            contents = _entry(signature, "/Contents")
            if not isinstance(contents, bytes) or any(contents):
                earlier += 1
                continue
            field = field_ref.get_object()
            placeholder = _placeholder(str(name), signature, value, field, docmdp, root_ref)
            widget = _widget(reader, field_ref, field, root_ref)
            placeholders.append(placeholder.model_copy(update={"widget": widget}))
    except (DocJobError, RecursionError, MemoryError):
        raise
    except Exception:  # noqa: BLE001 - any reader failure: the file is not known to be clean
        raise DocJobError(FailureCode.FIDELITY_READER, "the release gate could not read the signature fields") from None
    return placeholders, earlier


def _placeholder(
    name: str, signature: hanko.DictionaryObject, value: Any, field: Any, docmdp: Any, root: Any
) -> SignatureDictionary:
    byte_range = _entry(signature, "/ByteRange")
    numbers = list(byte_range) if isinstance(byte_range, list) else []  # iterated: items as written
    signing_time = _entry(signature, "/M")
    lock = field.raw_get("/Lock") if isinstance(field, hanko.DictionaryObject) and "/Lock" in field else None
    return SignatureDictionary(
        field_name=name,
        entries={
            str(key): _plain(signature.raw_get(key), root, 0)
            for key in list(signature)[:_MAX_ITEMS]
            if str(key) not in _VARIABLE_KEYS
        },
        byte_range=[int(n) for n in numbers] if len(numbers) == 4 and all(_is_int(n) for n in numbers) else None,
        signing_time=str(signing_time) if isinstance(signing_time, str) else None,
        certifies=docmdp is not None and _same_object(docmdp, value),
        lock=None if lock is None else _plain(lock, root, 0),
    )


def _widget(reader: PdfFileReader, field_ref: Any, field: Any, root: Any) -> Widget | None:
    """Where the field's widget is and what it draws (None: widgets of its own, /Kids)."""
    if not isinstance(field, hanko.DictionaryObject) or "/Kids" in field:
        return None
    rect = _entry(field, "/Rect")
    numbers = list(rect) if isinstance(rect, list) else []
    appearances = _entry(field, "/AP")
    normal = _entry(appearances, "/N") if isinstance(appearances, hanko.DictionaryObject) else None
    sha256 = entries = None
    if isinstance(normal, hanko.StreamObject):
        encoded = normal.encoded_data
        if encoded is not None and len(encoded) > _MAX_APPEARANCE_BYTES:
            raise DocJobError(FailureCode.SIGNATURE_DICTIONARY, "the signature's appearance is too large")
        sha256, entries = appearance_facts(normal, root)
    elif normal is not None:
        entries = {"not_a_stream": True}
    return Widget(
        on_first_page=_on_first_page(reader, field_ref),
        rect=[float(n) for n in numbers] if len(numbers) == 4 and all(_is_number(n) for n in numbers) else None,
        appearance_sha256=sha256,
        appearance_entries=entries,
    )


def appearance_facts(stream: hanko.StreamObject, root: Any) -> tuple[str, dict[str, Any]]:
    """What an appearance stream draws: the digest of its decoded content and its dictionary (plain)."""
    entries = {str(key): _plain(stream.raw_get(key), root, 0) for key in list(stream)[:_MAX_ITEMS]}
    for key in _APPEARANCE_VARIABLE:
        entries.pop(key, None)
    return hashlib.sha256(stream.data).hexdigest(), _as_floats(entries)


def _as_floats(value: Any) -> Any:
    """Every number as a float (a stamp drawn in memory has `0.0` where the same one written reads `0`)."""
    if isinstance(value, dict):
        if value.keys() == {"number"}:
            return float(value["number"])
        return {key: _as_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_floats(item) for item in value]
    return float(value) if _is_int(value) else value


def _on_first_page(reader: PdfFileReader, field_ref: Any) -> bool:
    """Whether the first page (the page tree's first leaf) lists `field_ref` in its /Annots."""
    node = _entry(reader.root, "/Pages")
    for _ in range(_MAX_PAGE_TREE_DEPTH):
        if not isinstance(node, hanko.DictionaryObject):
            return False
        kids = _entry(node, "/Kids")
        if not isinstance(kids, list):
            break
        node = kids[0].get_object() if kids else None
    annots = _entry(node, "/Annots") if isinstance(node, hanko.DictionaryObject) else None
    if not isinstance(annots, list):
        return False
    return any(_same_object(ref, field_ref) for ref in list(annots)[:_MAX_ITEMS])


def _is_number(value: object) -> bool:
    return _is_int(value) or isinstance(value, hanko.FloatObject)


def _entry(holder: hanko.DictionaryObject, key: str) -> Any:
    """The entry `key` of `holder`, followed if it is a reference; None when absent (or null)."""
    try:
        return holder[key]
    except KeyError:
        return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same_object(one: Any, other: Any) -> bool:
    return (
        isinstance(one, hanko.IndirectObject)
        and isinstance(other, hanko.IndirectObject)
        and (one.idnum, one.generation) == (other.idnum, other.generation)
    )


def _plain(value: Any, root: Any, depth: int) -> Any:
    """A pyHanko object as JSON the worker compares: names "/Name", strings {"string": ...} (so that no string
    passes for a name), bytes {"bytes": hex}, the catalog "<catalog>", a depth and a size bounded."""
    if depth > _MAX_DEPTH:
        return {"too_deep": True}
    if isinstance(value, hanko.IndirectObject):
        if _same_object(value, root):
            return CATALOG
        value = cast(Any, value).get_object()
    if isinstance(value, hanko.NameObject):
        return str(value)
    if isinstance(value, hanko.TextStringObject):
        return {"string": str(value)}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, hanko.BooleanObject):
        return bool(value.value)
    if _is_int(value):
        return int(value)
    if isinstance(value, hanko.FloatObject):
        return {"number": str(value)}
    if isinstance(value, list):
        return [_plain(item, root, depth + 1) for item in list(value)[:_MAX_ITEMS]]  # as written: unresolved
    if isinstance(value, hanko.DictionaryObject):
        return {str(key): _plain(value.raw_get(key), root, depth + 1) for key in list(value)[:_MAX_ITEMS]}
    return None if isinstance(value, hanko.NullObject) or value is None else {"other": type(value).__name__}


# --- Text, by pypdf --------------------------------------------------------------------------------------------


def page_texts(reader: PdfReader, path: Path) -> list[str | None]:
    """The extracted text of every page: pypdf's, else pdfminer's (None for a page neither can read: not known to be
    clean). pypdf gives up on a page whose content has a token it cannot parse, which producers leave and viewers
    skip, and with it on the stamp docjobs drew after it (the stream that draws the stamp first closes what the
    page left open: read on its own, it does not parse); pdfminer, pure Python too, reads past it as viewers do."""
    texts: list[str | None] = []
    for number, page in enumerate(reader.pages):
        try:
            texts.append(page.extract_text())
        except Exception:  # noqa: BLE001 - any extractor failure: the other reader's turn
            texts.append(_pdfminer_text(path, number))
    return texts


def _pdfminer_text(path: Path, number: int) -> str | None:
    """The text pdfminer reads on the page `number` (0-based), or None when it cannot read it either."""
    try:
        return str(pdfminer_text(str(path), page_numbers=[number]))
    except Exception:  # noqa: BLE001 - an unreadable page is reported as such
        return None


def watermark_missing(texts: list[str | None], watermark_text: str) -> list[int]:
    """The pages (1-based) whose text does not hold the watermark's text, whitespace aside (extractors differ on
    the spaces around and inside a stamp drawn over other text; its characters, in their order, they agree on)."""
    stamp = "".join(watermark_text.split())
    return [number for number, text in enumerate(texts, 1) if text is None or stamp not in "".join(text.split())]


def redaction_leaks(texts: list[str | None], settings: ReleaseGateSettings) -> list[str]:
    """ "page N: kind" for each page where a redaction pattern still matches (or that cannot be read)."""
    if settings.redact is None:
        return []
    patterns = compile_patterns(settings.redact)
    leaks: list[str] = []
    for number, text in enumerate(texts, 1):
        if text is None:
            leaks.append(f"page {number}: unreadable")
            continue
        leaks += [f"page {number}: {kind}" for kind in sorted(sensitive_kinds(text, patterns, frozenset()))]
    return leaks


# --- The worker's side: what it expects, and its verdict -----------------------------------------------------------


def expected_signature(reason: str, *, certify: bool) -> tuple[dict[str, Any], Any]:
    """The signature dictionary the worker would write (as docjobs/signing/sign.py has pyHanko write it), without
    /Contents, /ByteRange and /M, and the field's /Lock: DocMDP P1 on an unsigned input (a certification), or, after
    earlier signatures, a FieldMDP lock of every field that allows no change either (`/P 1`)."""
    params: dict[str, Any] = {"/Type": "/TransformParams", "/V": "/1.2", "/P": 1}
    if certify:
        reference = {"/Type": "/SigRef", "/TransformMethod": "/DocMDP", "/TransformParams": params}
        lock = None
    else:
        reference = {
            "/Type": "/SigRef",
            "/TransformMethod": "/FieldMDP",
            "/Data": CATALOG,
            "/TransformParams": {**params, "/Action": "/All"},
        }
        lock = {"/Type": "/SigFieldLock", "/Action": "/All", "/P": 1}
    entries = {
        "/Type": "/Sig",
        "/Filter": "/Adobe.PPKLite",
        "/SubFilter": "/ETSI.CAdES.detached",
        "/Reason": {"string": reason},
        "/Reference": [reference],
    }
    return entries, lock


@dataclass(frozen=True)
class ExpectedStamp:
    """A visible signature: the signer's certificate (whose name the stamp shows) and the stamp's box."""

    certificate_pem: bytes
    box: tuple[int, int, int, int]


def stamp_appearance(stamp: ExpectedStamp, signed_at: datetime) -> tuple[str, dict[str, Any]]:
    """The appearance pyHanko draws for `stamp` signed at `signed_at` (as docjobs/signing/sign.py has it draw it:
    the default signing stamp, the certificate's name, the time in UTC), as `appearance_facts` reports one. Drawn
    here, in a document of the worker's own: no tenant's byte is read."""
    [certificate] = list(load_certs_from_pemder_data(stamp.certificate_pem))[:1]
    name = signers.ExternalSigner(signing_cert=certificate, cert_registry=None, signature_value=b"").subject_name
    x0, y0, x1, y1 = stamp.box
    style = DEFAULT_SIGNING_STAMP_STYLE
    text = {"signer": name, "ts": signed_at.astimezone(UTC).strftime(style.timestamp_format)}
    writer = PdfFileWriter()  # type: ignore[no-untyped-call]  # pyHanko leaves __init__ untyped
    drawn = style.create_stamp(writer, BoxConstraints(width=x1 - x0, height=y1 - y0), text)
    return appearance_facts(drawn.as_form_xobject(), None)


@dataclass(frozen=True)
class Expected:
    """What the worker knows of the job, independently of every child: its tenant's /Reason, the byte range it
    checked, whether the policy lets an input be signed already, render's page count, the sanitize policy."""

    reason: str
    byte_range: tuple[int, int, int, int]
    allow_signed_input: bool
    page_count: int  # 0: not known (scheduled without the job's shape)
    sanitize: SanitizePolicy
    stamp: ExpectedStamp | None = None  # None: an invisible signature
    now: Callable[[], datetime] = lambda: datetime.now(UTC)


def judge(report: GateReport, expected: Expected) -> list[str]:
    """The worker's verdict on the gate's report: the checks passed, or DocJobError with the first failing one's
    code (signature.dictionary, fidelity.page_count, sanitize.residue, fidelity.watermark, redaction.leak)."""
    if report.loaded_forbidden:  # the gate's own process is not what it must be: never a pass
        raise DocJobError(FailureCode.INTERNAL_ERROR, "the release gate's child loaded a C/C++ PDF reader")
    checks = [_judge_signature(report, expected)]
    if expected.page_count and report.page_count != expected.page_count:
        raise DocJobError(
            FailureCode.FIDELITY_PAGE_COUNT, "the release gate counts another number of pages than render did"
        )
    checks.append("gate_page_count")
    if expected.sanitize.mode is not SanitizeMode.KEEP:
        if report.active:
            kinds = ", ".join(sorted(report.active))
            raise DocJobError(
                FailureCode.SANITIZE_RESIDUE, f"the release gate found active content ({kinds}) before signing"
            )
        checks.append("gate_no_active_content")
    if report.watermark_missing is not None:
        if report.watermark_missing:
            missing = len(report.watermark_missing)
            raise DocJobError(
                FailureCode.FIDELITY_WATERMARK, f"the release gate finds no watermark on {missing} page(s)"
            )
        checks.append("gate_watermark_every_page")
    if report.redaction_leaks:
        raise DocJobError(
            FailureCode.REDACTION_LEAK, "the release gate finds a redaction pattern in the document's text"
        )
    return checks


def _judge_signature(report: GateReport, expected: Expected) -> str:
    if len(report.placeholders) != 1:
        count = len(report.placeholders)
        raise DocJobError(
            FailureCode.SIGNATURE_DICTIONARY, f"the prepared document has {count} empty signatures, not one"
        )
    [found] = report.placeholders
    certify = not (expected.allow_signed_input and report.earlier_signatures)
    entries, lock = expected_signature(expected.reason, certify=certify)
    if found.entries != entries or found.lock != lock:
        raise DocJobError(
            FailureCode.SIGNATURE_DICTIONARY, "the signature dictionary is not the one the worker expects"
        )
    if found.certifies != certify:
        raise DocJobError(
            FailureCode.SIGNATURE_DICTIONARY, "the document's DocMDP permissions do not point at the signature"
        )
    if found.byte_range != list(expected.byte_range):
        raise DocJobError(
            FailureCode.SIGNATURE_DICTIONARY, "the signature's /ByteRange is not the range the worker checked"
        )
    signed_at = _pdf_date(found.signing_time)
    if signed_at is None or abs(signed_at - expected.now()) > SIGNING_TIME_SLACK:
        raise DocJobError(FailureCode.SIGNATURE_DICTIONARY, "the signature's signing time is not now")
    _judge_widget(found.widget, expected.stamp, signed_at)
    return "gate_signature_dictionary"


def _judge_widget(widget: Widget | None, stamp: ExpectedStamp | None, signed_at: datetime) -> None:
    """The widget pyHanko writes: on the first page; invisible (an empty rectangle, nothing drawn), or at the stamp
    box drawing exactly the stamp the worker draws itself."""
    if widget is None or not widget.on_first_page:
        raise DocJobError(FailureCode.SIGNATURE_DICTIONARY, "the signature's widget is not the one the worker expects")
    if stamp is None:
        empty = widget.rect is not None and (widget.rect[0] == widget.rect[2] or widget.rect[1] == widget.rect[3])
        if not empty or widget.appearance_sha256 is not None or widget.appearance_entries is not None:
            raise DocJobError(FailureCode.SIGNATURE_DICTIONARY, "the signature is visible, but the policy says not")
        return
    if widget.rect != [float(n) for n in stamp.box]:
        raise DocJobError(FailureCode.SIGNATURE_DICTIONARY, "the signature's stamp is not in the signer's stamp box")
    if (widget.appearance_sha256, widget.appearance_entries) != stamp_appearance(stamp, signed_at):
        raise DocJobError(FailureCode.SIGNATURE_DICTIONARY, "the signature's stamp is not the one the worker draws")


_PDF_DATE = re.compile(r"^D:(\d{14})(?:(Z)|([+-])(\d{2})'?(\d{2})'?)?$")


def _pdf_date(text: str | None) -> datetime | None:
    """A PDF date string to its time (UTC when it names no offset), None when it is not one."""
    match = _PDF_DATE.match(text or "")
    if match is None:
        return None
    try:
        moment = datetime.strptime(match.group(1), "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None
    if match.group(3):
        offset = timedelta(hours=int(match.group(4)), minutes=int(match.group(5)))
        moment -= offset if match.group(3) == "+" else -offset
    return moment
