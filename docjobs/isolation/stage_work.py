"""The document work of each stage: plain functions on files, run inside a limited child process, and each document
stage's one declaration (its `StageEntry`, at the end).

Everything here opens tenants' bytes, so it runs only in a sandboxed document child (docjobs/isolation/child_pool.py):
the stage's activity fetches the blobs, hands this module paths, and stores what it wrote. A work order is a pydantic
model (the child validates it): the attempt's paths and the stage's settings, the very model the activity input
inherits (docjobs/domain/models.py). Each result is the stage's `...Done` model (the worker validates it: the child
is not trusted), whose fields the activity output inherits. `ENTRIES` is what the child serves, by the
stage's activity name (its spec's: docjobs/domain/stage_specs.py); `STAGE_ENTRIES` are the stages whose activity
one adapter makes (activities/adapter.py), which the worker registers on their specs' queues.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pikepdf

from docjobs.domain import stage_specs as specs
from docjobs.domain.base import Frozen
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import (
    GenerateDone,
    GenerateInput,
    GenerateOutput,
    GenerateSettings,
    InputKind,
    OcrDone,
    OcrInput,
    OcrOutput,
    OcrSettings,
    RedactDone,
    RedactInput,
    RedactOutput,
    RedactSettings,
    RenderDone,
    RenderInput,
    RenderOutput,
    RenderSettings,
    VerifyDone,
    VerifyInput,
    VerifyOutput,
    VerifySettings,
)
from docjobs.domain.ocr_page_ranges import OcrMergeInput, OcrMergeOutput, StoredOcrRange
from docjobs.domain.stage_specs import StageQueue
from docjobs.generate.bundle import INDEX, unpack_bundle
from docjobs.generate.office import check_office_input, convert_to_pdf, substituted_fonts
from docjobs.generate.templating import load_data, render_template
from docjobs.isolation.entries import OUTPUT, TEXT, AnyStageEntry, Given, Keep, Reads, StageEntry
from docjobs.isolation.entries import Entry as Entry  # re-exported: the activities and tests name it here
from docjobs.isolation.entries import ProgressFn as ProgressFn
from docjobs.isolation.page_range_work import (
    OcrdRangeFile,
    OcrMergeDone,
    OcrMergeWork,
    OcrPageRangeDone,
    OcrPageRangeWork,
    ocr_chunk,
    ocr_merge,
)
from docjobs.pdf.budgets import budgets_for
from docjobs.pdf.fidelity import check_fidelity
from docjobs.pdf.images import image_to_pdf
from docjobs.pdf.inspect import WINDOW, Encryption, sniff_kind
from docjobs.pdf.normalize import repair_input
from docjobs.pdf.ocr import page_texts, run_ocr, text_json, tool
from docjobs.pdf.pdfa import outcome as pdfa_outcome
from docjobs.pdf.redaction.gate import check_redaction
from docjobs.pdf.redaction.patterns import compile_patterns
from docjobs.pdf.redaction.redact import redact_pdf
from docjobs.pdf.sanitize import check_no_active_content, sanitize_file
from docjobs.pdf.signatures import signature_count, void_certification
from docjobs.pdf.stamp import stamp
from docjobs.signing.config import DEFAULT_STAMP_BOX, TrustAnchors
from docjobs.signing.long_term import RevocationData, prepare_archival_update
from docjobs.signing.sign import prepare_signature, release_reason
from docjobs.signing.verdict import verified_signature

IMAGE_KINDS = ("png", "jpeg", "tiff")
CONVERTED = "converted.pdf"  # in render's workdir: an office input's PDF (the activity stages it: later stages use it)


class GenerateWork(Frozen):
    source: Path  # the HTML file, the bundle, or the template's bundle (all checked against their digests)
    data: Path | None  # template jobs: the JSON data
    output: Path
    workdir: Path
    settings: GenerateSettings


def generate(work: GenerateWork, progress: ProgressFn) -> GenerateDone:
    """HTML, a bundle or a template with its data, as a PDF: the job's files in one folder (`site`), the only
    place the page may take anything from."""
    site = work.workdir / "site"
    settings = work.settings
    policy = settings.generate
    html = None
    if settings.input_kind is InputKind.HTML:
        site.mkdir()
        shutil.copyfile(work.source, site / INDEX)
    else:
        unpack_bundle(work.source, site, max_bytes=policy.bundle_mb << 20, max_files=policy.bundle_files)
    if settings.input_kind is InputKind.TEMPLATE:
        if work.data is None:
            raise DocJobError(FailureCode.INPUT_MALFORMED, "a template job needs its data")
        html = render_template(site, INDEX, load_data(work.data), seconds=policy.template_seconds)
    from docjobs.generate.weasy import html_to_pdf  # WeasyPrint: a child's (PRELOAD), not the worker's 0.6 s

    summary = html_to_pdf(site, work.output, policy, html=html, max_pages=settings.max_pages, on_pages=progress)
    return GenerateDone(summary=summary)


class RenderWork(Frozen):
    source: Path  # the accepted input, already checked against its digest
    output: Path
    workdir: Path
    settings: RenderSettings


def render(work: RenderWork, progress: ProgressFn) -> RenderDone:
    """Normalize the input to PDF (an office document is converted, a scan becomes image pages), validate it and
    repair what qpdf recovers, strip active content, stamp the watermark."""
    with work.source.open("rb") as head:
        kind = sniff_kind(head.read(WINDOW))
    settings = work.settings
    normalized = work.workdir / "normalized.pdf"
    budgets = budgets_for(settings.limits, settings.max_pages)
    source = work.source  # not a PDF either: inspection says which code
    converted_from, found = None, None
    if kind in IMAGE_KINDS:
        source = work.workdir / "scan.pdf"
        image_to_pdf(work.source, source, max_pages=settings.max_pages, budgets=budgets)
    elif kind == "office":
        found = check_office_input(work.source, settings.office)
        source, converted_from = work.workdir / CONVERTED, found.value
        office, pages = settings.office, settings.max_pages
        convert_to_pdf(
            work.source,
            found,
            source,
            work.workdir,
            seconds=office.convert_seconds,
            max_pages=pages,
            variant=office.pdf_variant,
        )
    try:
        info = repair_input(source, normalized, max_pages=settings.max_pages, budgets=budgets)
    except DocJobError as error:  # an office document's pages are its converter's work, not what was sent
        if converted_from is None or error.code != FailureCode.INPUT_TOO_LARGE:
            raise
        pages = settings.max_pages
        raise DocJobError(
            FailureCode.INPUT_TOO_COMPLEX, f"the converted document has more than {pages} pages"
        ) from None
    substituted = 0 if found is None else substituted_fonts(work.source, found, normalized)
    if settings.refuse_encrypted and info.encryption is not Encryption.NONE:
        raise DocJobError(FailureCode.INPUT_ENCRYPTED, "the policy refuses encrypted inputs")
    progress(0, info.page_count)  # the page count is known: the child's CPU budget grows with it
    signatures = signature_count(normalized, budgets=budgets)
    if signatures and not settings.allow_signed_input:
        raise DocJobError(FailureCode.INPUT_SIGNED)
    sanitized = sanitize_file(normalized, settings.sanitize)
    if settings.watermark is None:
        shutil.copyfile(normalized, work.output)
    else:
        stamp(normalized, work.output, settings.watermark, workdir=work.workdir, on_page=progress, budgets=budgets)
    if signatures:
        void_certification(work.output)
    return RenderDone(
        page_count=info.page_count,
        input_encryption=info.encryption.value,
        invalidated_signatures=signatures,
        sanitized=sanitized,
        repair_warnings=info.repair_warnings,
        converted_from=converted_from,
        fonts_substituted=substituted,
    )


class OcrWork(Frozen):
    source: Path  # the rendered document
    output: Path
    text_output: Path  # the searchable text of every page, as JSON
    workdir: Path
    settings: OcrSettings
    tag: str  # put in the OCR processes' environment, so they can be found


def ocr(work: OcrWork, progress: ProgressFn) -> OcrDone:
    """OCR (in OCRmyPDF's own child, killed with this one), then the watermark stamp."""
    searchable = work.workdir / "searchable.pdf"
    result = run_ocr(
        work.source,
        searchable,
        work.settings.ocr,
        workdir=work.workdir,
        on_page=progress,
        tag=work.tag,
        input_validated=True,  # render validated it, and its digest is checked
    )
    if work.settings.watermark is None:
        shutil.move(searchable, work.output)
    else:
        stamp(searchable, work.output, work.settings.watermark, workdir=work.workdir)
    work.text_output.write_text(text_json(result.page_texts))
    return OcrDone(
        pages_ocred=list(result.pages_ocred),
        pages_deskewed=list(result.pages_deskewed),
        pages_unreadable=list(result.pages_unreadable),
    )


class RedactWork(Frozen):
    source: Path
    output: Path
    text_output: Path | None  # set: rebuild the OCR text blob from the redacted file (the old one holds values)
    workdir: Path
    settings: RedactSettings


def redact(work: RedactWork, progress: ProgressFn) -> RedactDone:
    """Remove matches and regions for real, prove it (the gate needs the matched values: they exist only
    in this child's memory), then stamp the watermark."""
    redacted = work.workdir / "redacted.pdf"
    settings = work.settings
    budgets = budgets_for(settings.limits)  # render counted the pages
    summary = redact_pdf(
        work.source,
        redacted,
        settings.redact,
        workdir=work.workdir,
        on_page=progress,
        ocr_done=work.text_output is not None,  # the job was OCR'd: every page with pixels has text now
        budgets=budgets,
    )
    if work.text_output is not None:
        with pikepdf.open(redacted) as written:  # our own output: no need to re-check every stream
            pages = len(written.pages)
        work.text_output.write_text(
            text_json(page_texts(tool("pdftotext"), redacted, pages, FailureCode.REDACTION_FAILED))
        )
    if settings.watermark is None:
        shutil.move(redacted, work.output)
    else:
        stamp(redacted, work.output, settings.watermark, workdir=work.workdir, budgets=budgets)
    return RedactDone(summary=summary)


class SignWork(Frozen):
    """The document half of signing: no key and no passphrase ever come here (docjobs/signing/sign.py)."""

    source: Path
    output: Path
    certificate_pem: str  # the signer's certificate (public: the visible stamp names its subject)
    bytes_reserved: int  # hex digits of the signature hole the worker asks for
    tenant: str  # who asked: named in the signature's /Reason
    visible: bool
    allow_signed_input: bool
    stamp_box: tuple[int, int, int, int] = DEFAULT_STAMP_BOX


class SignDone(Frozen):
    byte_range: tuple[int, int, int, int]  # the /ByteRange written: the worker checks it before it signs
    field_name: str
    certified: bool
    locked: bool
    invalidated_signatures: int


def sign(work: SignWork, progress: ProgressFn) -> SignDone:
    """Prepare the document for the worker's signature: the field, the dictionary and an empty hole."""
    prepared = prepare_signature(
        work.source,
        work.output,
        work.certificate_pem.encode(),
        bytes_reserved=work.bytes_reserved,
        reason=release_reason(work.tenant),
        allow_existing_signatures=work.allow_signed_input,
        visible=work.visible,
        stamp_box=work.stamp_box,
    )
    return SignDone(
        byte_range=prepared.byte_range,
        field_name=prepared.field_name,
        certified=prepared.certified,
        locked=prepared.locked,
        invalidated_signatures=prepared.invalidated_signatures,
    )


class ArchivalUpdateWork(Frozen):
    """The document half of B-LT and B-LTA (docjobs/signing/long_term.py): the revocation data the worker fetched
    (base64 DER, `RevocationData.encoded`), and for B-LTA the size of the document timestamp's hole."""

    source: Path  # the signed document
    output: Path
    revocation: dict[str, list[str]]
    timestamp_reserved: int | None  # hex digits of the document timestamp's hole; None: a DSS only (B-LT)


class ArchivalUpdateDone(Frozen):
    byte_range: tuple[int, int, int, int] | None  # the document timestamp's /ByteRange: the worker checks it
    field_name: str | None


def archival_update(work: ArchivalUpdateWork, progress: ProgressFn) -> ArchivalUpdateDone:
    """Append the DSS (and a document timestamp's empty place) to the signed document."""
    prepared = prepare_archival_update(
        work.source,
        work.output,
        RevocationData.decoded(work.revocation),
        timestamp_reserved=work.timestamp_reserved,
    )
    return ArchivalUpdateDone(byte_range=prepared.byte_range, field_name=prepared.field_name)


class VerifyWork(Frozen):
    source: Path  # the accepted input
    output: Path  # the bytes to be released
    workdir: Path
    trust: TrustAnchors | None  # set: the output must carry a valid signature chaining to these roots (no secret)
    settings: VerifySettings
    tenant: str | None = None  # set: the signature must name this tenant and lock the document


def verify(work: VerifyWork, progress: ProgressFn) -> VerifyDone:
    """Nothing is released unless the signature (if any) and every fidelity check pass: else quarantine."""
    source = work.source
    with source.open("rb") as head:
        if sniff_kind(head.read(16)) in IMAGE_KINDS:  # compare with the PDF that render made of it
            image_to_pdf(source, normalized := work.workdir / "input.pdf")
            source = normalized
    settings = work.settings
    signature = None
    if work.trust is not None:
        signature = verified_signature(work.output, work.trust, work.tenant, settings.sign_level)
    checks = check_fidelity(
        source,
        work.output,
        workdir=work.workdir,
        text_layer_kept=settings.text_layer_kept,
        watermark_text=settings.watermark_text,
        pages_may_turn=settings.pages_may_turn,
    )
    if settings.redact is not None:  # on the bytes to be released: no pattern may match any more
        gate = check_redaction(work.output, frozenset(), compile_patterns(settings.redact), {})
        if not gate.clean:
            raise DocJobError(FailureCode.REDACTION_LEAK)
        checks.append("redaction_patterns")
    if settings.sanitize is not None:  # on the bytes to be released: no active content came back
        checks += check_no_active_content(work.output, settings.sanitize)
    return VerifyDone(signature=signature, fidelity_checks=checks, pdfa=pdfa_outcome(source, work.output))


def generate_order(request: GenerateInput, given: Given) -> GenerateWork:
    """Sent as GenerateSettings: only the settings reach the child."""
    return GenerateWork(
        source=given.source, data=given.data, output=given.output, workdir=given.folder, settings=request
    )


def generated_pages(request: GenerateInput, done: GenerateDone) -> GenerateDone:
    """The child's page count is a claim: capped."""
    summary = done.summary.model_copy(update={"page_count": min(done.summary.page_count, request.max_pages)})
    return done.model_copy(update={"summary": summary})


def render_order(request: RenderInput, given: Given) -> RenderWork:
    """The input is its settings (and more): sent to the child as RenderSettings, only they go there."""
    return RenderWork(source=given.source, output=given.output, workdir=given.folder, settings=request)


def rendered_pages(request: RenderInput, done: RenderDone) -> RenderDone:
    """The child's page count is a claim: capped."""
    return done.model_copy(update={"page_count": min(done.page_count, request.max_pages)})


def ocr_order(request: OcrInput, given: Given) -> OcrWork:
    """Sent as OcrSettings: only the settings reach the child."""
    return OcrWork(
        source=given.source,
        output=given.output,
        text_output=given.text,
        workdir=given.folder,
        settings=request,
        tag=request.job_id,
    )


def redact_order(request: RedactInput, given: Given) -> RedactWork:
    """Sent as RedactSettings: only the settings reach the child."""
    text = given.text if request.rebuild_text else None
    return RedactWork(
        source=given.source, output=given.output, text_output=text, workdir=given.folder, settings=request
    )


def verify_order(request: VerifyInput, given: Given) -> VerifyWork:
    """Sent as VerifySettings: only the settings reach the child, and the trust anchors of a signed job."""
    return VerifyWork(
        source=given.source,
        output=given.output,
        workdir=given.folder,
        trust=given.trust() if request.signed else None,
        settings=request,
        tenant=request.tenant if request.signed else None,
    )


def range_file(stored: StoredOcrRange) -> str:
    """Where, in the merge's folder, an OCR'd page range is fetched to."""
    return f"range-{stored.pages.name}.pdf"


def merge_order(request: OcrMergeInput, given: Given) -> OcrMergeWork:
    return OcrMergeWork(
        source=given.source,
        ranges=[OcrdRangeFile(pages=stored.pages, path=given.folder / range_file(stored)) for stored in request.chunks],
        output=given.output,
        text_output=given.text,
        workdir=given.folder,
        watermark=request.watermark,
    )


def staged(key: str) -> Keep[Any, Any]:
    """The child's output document, staged under `key`: the output's `staged`."""
    return Keep(into="staged", file=OUTPUT, key=key)


# Each stage's one declaration beside its work: the annotation's four types (input, output, work order, result) make
# mypy check the spec, the work order, the child's function and every function of the declaration against each other.
GENERATE: StageEntry[GenerateInput, GenerateOutput, GenerateWork, GenerateDone] = StageEntry(
    spec=specs.GENERATE,
    work_type=GenerateWork,
    done_type=GenerateDone,
    run=generate,
    reads=Reads.TEMPLATE,
    order=generate_order,
    max_pages=lambda request: request.max_pages,
    checked=generated_pages,
    keeps=(staged("generate"),),
)
RENDER: StageEntry[RenderInput, RenderOutput, RenderWork, RenderDone] = StageEntry(
    spec=specs.RENDER,
    work_type=RenderWork,
    done_type=RenderDone,
    run=render,
    reads=Reads.JOB_INPUT,
    order=render_order,
    max_pages=lambda request: request.max_pages,
    checked=rendered_pages,
    # An office input: the PDF it was converted to is the job's document from here on (verify compares with it).
    keeps=(
        staged("render"),
        Keep(
            into="converted",
            file=CONVERTED,
            key="render",
            suffix=".converted.pdf",
            when=lambda request, done: done.converted_from is not None,
        ),
    ),
)
OCR: StageEntry[OcrInput, OcrOutput, OcrWork, OcrDone] = StageEntry(
    spec=specs.OCR,
    work_type=OcrWork,
    done_type=OcrDone,
    run=ocr,
    reads=Reads.STAGED,
    order=ocr_order,
    keeps=(Keep(into="text", file=TEXT, key="ocr-text", suffix=".json"), staged("ocr")),
)
REDACT: StageEntry[RedactInput, RedactOutput, RedactWork, RedactDone] = StageEntry(
    spec=specs.REDACT,
    work_type=RedactWork,
    done_type=RedactDone,
    run=redact,
    reads=Reads.STAGED,
    order=redact_order,
    keeps=(
        Keep(
            into="text", file=TEXT, key="redact-text", suffix=".json", when=lambda request, done: request.rebuild_text
        ),
        staged("redact"),
    ),
)
VERIFY: StageEntry[VerifyInput, VerifyOutput, VerifyWork, VerifyDone] = StageEntry(
    spec=specs.VERIFY,
    work_type=VerifyWork,
    done_type=VerifyDone,
    run=verify,
    reads=Reads.RELEASE,
    order=verify_order,
    max_pages=lambda request: None,
)
OCR_MERGE: StageEntry[OcrMergeInput, OcrMergeOutput, OcrMergeWork, OcrMergeDone] = StageEntry(
    spec=specs.OCR_MERGE,
    work_type=OcrMergeWork,
    done_type=OcrMergeDone,
    run=ocr_merge,
    reads=Reads.STAGED,
    fetches=lambda request: [(range_file(stored), stored.chunk) for stored in request.chunks],  # `ocr_chunk`'s
    order=merge_order,
    keeps=(Keep(into="text", file=TEXT, key="ocr-text", suffix=".json"), staged("ocr")),  # as `ocr` stages them
)
# The stages whose activity is the worker's own besides its child's work: `sign` (the worker holds the key, signs and
# runs the release gate: activities/release.py) and `ocr_chunk` (its page checkpoints and the worker's cores, shared
# between ranges: activities/ocr_page_ranges.py).
SIGN = Entry(specs.SIGN.name, SignWork, SignDone, sign)
ARCHIVAL_UPDATE = Entry("archival_update", ArchivalUpdateWork, ArchivalUpdateDone, archival_update)  # `sign`'s too
OCR_PAGE_RANGE = Entry(specs.OCR_PAGE_RANGE.name, OcrPageRangeWork, OcrPageRangeDone, ocr_chunk)
STAGE_ENTRIES: tuple[AnyStageEntry, ...] = (GENERATE, RENDER, OCR, REDACT, VERIFY, OCR_MERGE)
ENTRIES: dict[str, Entry[Any, Any]] = {
    entry.name: entry for entry in (*STAGE_ENTRIES, SIGN, ARCHIVAL_UPDATE, OCR_PAGE_RANGE)
}
# Modules the stages import only on first use: the zygote imports them too, so no child pays for them per task.
PRELOAD = (
    "cryptography.hazmat.backends.openssl",
    "encodings.ascii",
    "pyhanko.pdf_utils.filters",
    "pyhanko.pdf_utils.metadata.xmp_xml",
)
# And by queue, for its stages only (a worker's pools ask their queue's: ChildPool `preload`): a zygote of the general
# queue never runs OCRmyPDF, one of the OCR queue never runs WeasyPrint, and each is ready that much sooner on a
# tenant's first task.
PRELOAD_FOR: dict[str, tuple[str, ...]] = {
    StageQueue.GENERAL: ("docjobs.generate.weasy",),  # WeasyPrint, Pango and fontTools: `generate`'s
    # OCRmyPDF runs in a fork of the child (docjobs/pdf/ocr_process.py): its modules
    StageQueue.OCR: ("docjobs.pdf.ocrmypdf_import",),
}
