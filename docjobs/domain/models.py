"""Typed boundaries: the job request, activity inputs/outputs and the job status.

Everything here may enter Temporal history, so it carries blob references and digests only: never
document bytes, text, file names or metadata values.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field

from docjobs.domain.base import (
    POLICY_NAME_PATTERN,
    POLICY_VERSION_PATTERN,
    SHA256_PATTERN,
    TENANT_PATTERN,
    Frozen,
    Strict,
)
from docjobs.domain.canonical import canonical_sha256
from docjobs.domain.policy import (
    BUILTIN_PATTERN_NAMES,
    GeneratePolicy,
    LimitsPolicy,
    OcrMode,
    OcrPolicy,
    OfficePolicy,
    PdfVariant,
    Policy,
    RedactPolicy,
    RedactRegion,
    SanitizePolicy,
    SignLevel,
    SignPolicy,
    WatermarkMode,
    WatermarkPolicy,
)
from docjobs.domain.stage_cost import Cost, CpuBudget
from docjobs.domain.states import JobState, Stage

ADES_PASSED = "PASSED"  # pyHanko's AdES indication for a validation that passed


class DeskewedPage(Frozen):
    """A page OCR found askew: its skew and the turn applied, in degrees (positive: counter-clockwise)."""

    page: int = Field(ge=1)
    angle: float
    correction: float


class BlobRef(Frozen):
    """A stored blob: its key in the blob store and the digest it must have."""

    key: str = Field(min_length=1)
    sha256: str = Field(pattern=SHA256_PATTERN)
    size: int = Field(ge=0)


class ActivityTiming(Frozen):
    """Timeouts fixed at acceptance, so a retry or a replay can never change them."""

    lease_seconds: float = Field(default=30.0, gt=0)  # heartbeat timeout: the lease
    base_seconds: float = Field(default=60.0, gt=0)  # start-to-close = base + per_page * pages
    per_page_seconds: float = Field(default=10.0, gt=0)
    ocr_per_page_seconds: float = Field(default=60.0, gt=0)
    max_attempts: int = Field(default=5, ge=1)
    # The first wait before a failed delivery to the tenant's callback is tried again (doubling, at most 60 s).
    notify_retry_seconds: float = Field(default=1.0, gt=0)


class InputKind(StrEnum):
    """What the accepted input is: a document (PDF or image: render opens it), or what `generate` makes one of."""

    DOCUMENT = "document"
    HTML = "html"  # one HTML file
    BUNDLE = "bundle"  # a zip: index.html with its CSS, images and fonts
    OFFICE = "office"  # Word, Excel, PowerPoint, OpenDocument or RTF: render converts it (docs/office.md)
    TEMPLATE = "template"  # a template manifest (docjobs/store/templates.py): a stored template version and JSON data


class JobRequest(Frozen):
    job_id: str
    tenant: str
    source: BlobRef
    input_kind: InputKind = InputKind.DOCUMENT
    page_count: int = Field(default=0, ge=0)  # 0: render counts them (acceptance opens no document)
    policy: Policy
    policy_version: str
    deadline_seconds: int = Field(ge=1)
    accepted_at: datetime
    timing: ActivityTiming = ActivityTiming()
    ocr_task_queue: str | None = None  # None: the workflow's own task queue
    # Where a long document's OCR runs its page ranges and their merge. None (jobs accepted before it had its
    # own): the OCR queue.
    ocr_chunk_task_queue: str | None = None
    notify_task_queue: str | None = None  # None (jobs accepted before it had its own): the workflow's own
    archive_task_queue: str | None = None  # where a B-LTA release's archive renews (None: the workflow's own)
    callback: str | None = None  # the terminal event's URL instead of the tenant's (DocumentJobInput.callback)

    @property
    def document_class(self) -> str:
        return self.policy.name

    @property
    def deadline_at(self) -> datetime:
        return self.accepted_at + timedelta(seconds=self.deadline_seconds)


class SourceRef(Strict):
    """The caller's stored document: a URI inside the deployment's store, and the digest and size it must have."""

    uri: str = Field(min_length=1, max_length=2048, description="s3://bucket/key or file:///path, inside the store")
    sha256: str = Field(pattern=SHA256_PATTERN)
    size: int = Field(ge=0)
    kind: InputKind = Field(
        default=InputKind.DOCUMENT,
        description="document (a PDF or image), html (one HTML file), bundle (a zip: index.html with its assets), "
        "template (a manifest naming a stored template version and its JSON data): these three are made into a PDF "
        "by the job's `generate` step; or office (Word, Excel, PowerPoint, OpenDocument, RTF), converted to PDF by "
        "its `render` step",
    )


class JobOverrides(Strict):
    """Ad-hoc changes to the named policy, applied by the job's `resolve` step (other overrides: another job)."""

    watermark_text: str | None = Field(default=None, min_length=1, max_length=200)
    watermark_mode: WatermarkMode | None = None
    watermark_dpi: int | None = Field(default=None, ge=36, le=600)
    ocr_mode: OcrMode | None = None
    redact_patterns: tuple[str, ...] = Field(
        default=(), description=f"built-in pattern names ({', '.join(BUILTIN_PATTERN_NAMES)}) or RE2 regexes"
    )
    redact_regions: tuple[RedactRegion, ...] = ()
    sign: bool | None = None


class DocumentJobInput(Strict):
    """The public input of the `DocumentJob` workflow, version 1: what any Temporal client starts a job with.

    The workflow ID is `{tenant}/{key}`. The workflow resolves the policy, its version and the stage timings
    itself (the `resolve` activity), and copies the source into its own layout, checked by its digest."""

    version: Literal[1]
    tenant: str = Field(pattern=TENANT_PATTERN)
    source: SourceRef
    policy: str = Field(pattern=POLICY_NAME_PATTERN, description="a named policy (document class)")
    overrides: JobOverrides = JobOverrides()
    deadline_seconds: int | None = Field(default=None, ge=1, le=7 * 24 * 3600, description="None: the policy's")
    callback: str | None = Field(
        default=None, max_length=2048, description="https URL for the terminal event, instead of the tenant's"
    )
    policy_version: str | None = Field(
        default=None,
        pattern=POLICY_VERSION_PATTERN,
        description="the policy version (`name@digest`, as a job's status shows it) the job must run with, or the "
        "policy's fingerprint (its redaction terms included: what a batch pins): if the policy and overrides resolve "
        "to another (the policy file changed), the job fails `policy.changed`; None: whatever they resolve to",
    )


class ResolveInput(Frozen):
    """What the `resolve` activity turns into a full JobRequest: the public input of one job."""

    job_id: str
    job: DocumentJobInput
    accepted_at: datetime


class CancelAnswer(BaseModel):
    """The `cancel_job` update's answer: where the job was when the cancellation was accepted."""

    job_id: str
    state: JobState
    stage: Stage | None = None


class JobShape(Frozen):
    """Low-cardinality facts about a stage's job, never its identity: what its metrics are labelled with, and
    whether the job will sign (its tenant's release-gate pool is then opened ahead, beside its stage's)."""

    watermark_mode: WatermarkMode | None = None  # None: scheduled by a workflow that did not send it yet
    page_count: int = Field(default=0, ge=0)  # 0: not known yet (render counts them)
    signs: bool = False  # the policy signs (False too from a workflow that did not send it: the gate opens at `sign`)


class StageInput(Frozen):
    """What every stage gets: its job, the job's shape and its CPU budget (both filled in by the workflow when
    it schedules the stage)."""

    job_id: str
    shape: JobShape = JobShape()
    cpu: CpuBudget = CpuBudget()


# A stage's settings are one model, carried unchanged from its activity input (which inherits the fields: the
# input's JSON stays flat) into its document child's work order. A stage's result (`...Done`) is what its child
# reports; its activity output inherits those fields and adds what the worker did (staged blobs, attempt, cost).


class GenerateSettings(Frozen):
    input_kind: InputKind
    generate: GeneratePolicy
    max_pages: int


class GenerateInput(GenerateSettings, StageInput):
    source: BlobRef  # the accepted input: HTML, a bundle, or a template manifest


class GeneratedSummary(Frozen):
    """What `generate` made: counts and options only, never a URL or a value of the data."""

    page_count: int
    refused: dict[str, int] = Field(default_factory=dict)  # resources refused, by kind (http, file, missing, ...)
    pdf_variant: PdfVariant | None = None


class GenerateDone(Frozen):
    summary: GeneratedSummary


class GenerateOutput(GenerateDone):
    staged: BlobRef  # the generated PDF: the document every later stage works on
    attempt: int
    cost: Cost = Cost()  # every attempt of the stage so far, this one included


class RenderSettings(Frozen):
    limits: LimitsPolicy = LimitsPolicy()  # the parser budgets of the job's policy
    watermark: WatermarkPolicy | None  # None: normalize only, a later stage stamps
    max_pages: int
    allow_signed_input: bool = False  # False: an input with signatures fails `input.signed`
    sanitize: SanitizePolicy = SanitizePolicy()
    refuse_encrypted: bool = False  # True: an input encrypted with an empty user password fails too
    office: OfficePolicy = OfficePolicy()  # how an office document is converted first (or refused)


class RenderInput(RenderSettings, StageInput):
    source: BlobRef


class RenderDone(Frozen):
    page_count: int
    input_encryption: str
    invalidated_signatures: int = 0  # signatures of an (allowed) signed input that processing voids
    sanitized: dict[str, int] = Field(default_factory=dict)  # active content removed: kind -> count
    repair_warnings: int = Field(default=0, ge=0)  # qpdf's warnings on the input: render worked on its repair
    converted_from: str | None = None  # an office input: its format (docx, odt, ...), never its content
    fonts_substituted: int = Field(default=0, ge=0)  # an office input's font families drawn with a substitute


class RenderOutput(RenderDone):
    staged: BlobRef
    converted: BlobRef | None = None  # an office input: the PDF LibreOffice made, the job's document from here on
    attempt: int
    cost: Cost = Cost()  # every attempt of the stage so far, this one included


class OcrSettings(Frozen):
    ocr: OcrPolicy
    watermark: WatermarkPolicy | None  # stamped after OCR (structure mode), so it never hides a page's need for OCR


class OcrInput(OcrSettings, StageInput):
    source: BlobRef  # the accepted input, re-checked
    staged: BlobRef  # the rendered (normalized) document to OCR


class OcrDone(Frozen):
    pages_ocred: list[int]
    pages_deskewed: list[DeskewedPage] = Field(default_factory=list)
    pages_unreadable: list[int] = Field(default_factory=list)  # released image-only (policy unreadable = image_only)


class OcrOutput(OcrDone):
    staged: BlobRef
    text: BlobRef  # the searchable text of every page (JSON), stored beside the artifact
    attempt: int
    cost: Cost = Cost()  # every attempt of the stage so far, this one included


class ReleaseGateSettings(Frozen):
    """What the release gate checks in the document prepared for signing, before the worker signs it
    (docjobs/pdf/release_gate.py): the job's own settings, as `verify` gets them."""

    watermark_text: str | None = None  # structure mode: searchable on every page (None: only pixels, or none)
    redact: RedactPolicy | None = None  # no pattern may match the extracted text any more
    sanitize: SanitizePolicy = SanitizePolicy()  # no active content unless the policy keeps it


class SignInput(StageInput):
    source: BlobRef
    staged: BlobRef
    sign: SignPolicy
    tenant: str | None = None  # named in the signature (None: scheduled by older code; the job ID's prefix)
    # The release gate's settings (None: scheduled by code that sends none: the gate checks active content as the
    # shipped policies strip it, the page count and the signature dictionary, not the watermark or the patterns).
    gate: ReleaseGateSettings | None = None


class SignOutput(Frozen):
    staged: BlobRef
    level: str
    signer_subject: str
    certificate_sha256: str
    invalidated_signatures: int
    attempt: int
    cost: Cost = Cost()  # every attempt of the stage so far, this one included
    tenant: str | None = None  # the tenant the signature names (None: signed by older code, which named none)
    timestamp_token: BlobRef | None = None  # B-LTA: the document timestamp's token (staged), for its archive


class RedactSettings(Frozen):
    limits: LimitsPolicy = LimitsPolicy()  # the parser budgets of the job's policy
    redact: RedactPolicy
    watermark: WatermarkPolicy | None  # stamped after redaction, so a region never cuts into it


class RedactInput(RedactSettings, StageInput):
    source: BlobRef  # the accepted input, re-checked
    staged: BlobRef  # the document to redact (after OCR, so patterns match OCR text)
    rebuild_text: bool = False  # the job has an OCR text blob: rebuild it from the redacted file


class PageRedaction(Frozen):
    """What was done on one page: counts and codes only, never the matched values."""

    page: int
    matches: dict[str, int] = Field(default_factory=dict)  # pattern name -> matches located on the page
    regions: int = 0  # opaque boxes drawn (matched runs and explicit regions)
    # Redacted spans (pattern matches and explicit regions): a count of spans, never of what they held. The
    # glyphs a span removed are not reported (the field `glyphs_removed` is gone): they told a name's length.
    spans: int = 0
    images_redacted: int = 0
    annotations_removed: int = 0
    lines_reset: int = 0  # lines re-set around their masks (layout `mask`)
    fallback: str | None = None  # why the page was burned in at the fallback DPI instead of rewritten
    # With fallback `font_not_resubset`: the kinds of the fonts that could not be re-subset there (`type1`, `cff`,
    # `truetype`, `opentype`, `type3`, `unembedded`, `unknown`). Empty otherwise, and in older summaries.
    fallback_fonts: list[str] = Field(default_factory=list)


class RedactionSummary(Frozen):
    pages: list[PageRedaction] = Field(default_factory=list)  # only pages where something was redacted
    spans: int = 0  # redacted spans on every page (pattern matches and explicit regions)
    document: dict[str, int] = Field(default_factory=dict)  # document-level scrub: item kind -> removed
    fallback_pages: list[int] = Field(default_factory=list)
    lines_reset: int = 0
    fonts_resubset: int = 0  # embedded font programs cut down to the glyphs the document still draws
    gate: list[str] = Field(default_factory=list)  # the independent extractors that found nothing left

    @property
    def sha256(self) -> str:
        """Digest of the canonical summary, bound into the evidence (by a commitment: docs/release-gates.md)."""
        return canonical_sha256(self)

    def by_kind(self) -> dict[str, int]:
        """Spans removed, by kind: a built-in pattern's name, `custom` (any of the job's own regexes, never which:
        their order could tell them apart) and `region` (explicit boxes). What a release says of its redactions."""
        counts: dict[str, int] = {}
        for page in self.pages:
            matched = 0
            for name, count in page.matches.items():
                kind = name if name in BUILTIN_PATTERN_NAMES else "custom"
                counts[kind] = counts.get(kind, 0) + count
                matched += count
            if page.spans > matched:
                counts["region"] = counts.get("region", 0) + page.spans - matched
        return counts


class RedactDone(Frozen):
    summary: RedactionSummary


class RedactOutput(RedactDone):
    staged: BlobRef
    text: BlobRef | None = None  # the rebuilt OCR text blob (when asked)
    attempt: int
    cost: Cost = Cost()  # every attempt of the stage so far, this one included


class VerifySettings(Frozen):
    text_layer_kept: bool  # structure mode: the input's text and links must still be there
    redact: RedactPolicy | None = None  # re-searched on the released bytes: no pattern may match
    watermark_text: str | None  # must be searchable on every page (None when the stamp is only pixels)
    pages_may_turn: bool  # OCR may set pages upright: compare page sizes, not rotation
    sanitize: SanitizePolicy | None = None  # no active content may remain (None: scheduled by older code)
    sign_level: SignLevel | None = None  # B-LT, B-LTA: the signature is validated from what it embeds, as such


class VerifyInput(VerifySettings, StageInput):
    source: BlobRef
    staged: BlobRef
    signed: bool
    tenant: str | None = None  # set: the signature must name this tenant and lock the document (None: no such check)


class PdfaOutcome(Frozen):
    """Whether the released file still holds the PDF/A claim of the job's document (docjobs/pdf/pdfa.py)."""

    claimed: str  # part and conformance claimed by the job's document ("2b"), else by the output (OCR's `pdfa`)
    kept: bool  # the output claims the same and no validator finds anything that breaks it
    reason: str | None = None  # not kept: a stable code (claim_dropped, claim_changed, transparency, ...)
    # Each validator's own verdict on the output: `docjobs` (docjobs/pdf/pdfa.py), `page` (page-validation, where it
    # has a profile for the claim). {}: checked by older code, with docjobs' check alone.
    validators: dict[str, bool] = Field(default_factory=dict)
    disagreement: str | None = None  # the validators disagree: what the one that failed found (a code, rule IDs)


class LongTermVerdict(Frozen):
    """pyHanko's AdES verdicts on a long-term signature (docjobs/signing/long_term_verify.py): `ades` now,
    `future_ades` at `future_at` (archives only). A verdict is `PASSED`, or the AdES indication and sub-indication,
    e.g. `INDETERMINATE:NO_POE`."""

    dss: bool  # the document has a DSS (its validation material)
    document_timestamps: int
    ades: str
    future_at: datetime | None = None
    future_ades: str | None = None

    @property
    def level(self) -> str:
        """The level the document reaches, as far as its structure goes: B-LTA, B-LT, or B-T below."""
        return "B-LTA" if self.dss and self.document_timestamps else "B-LT" if self.dss else "B-T"

    def passed(self, *, archival: bool) -> bool:
        future_ok = not archival or (self.document_timestamps > 0 and self.future_ades == ADES_PASSED)
        return self.dss and self.ades == ADES_PASSED and future_ok


class SignatureVerdict(Frozen):
    """pyHanko's verdicts on the released file's signature, as verify reports them (docjobs/signing/verify.py has
    what each means): separate results, as pyHanko gives them, never one boolean.

    `tenant` and `docmdp` are set when verify checked that the signature names the job's tenant and locks the
    document (every job signed since the key left the document children; None in an older history)."""

    intact: bool
    valid: bool
    trusted: bool
    bottom_line: bool  # pyHanko's overall judgment: what `status` prints as valid or NOT valid
    coverage: str  # entire_file, entire_revision, partial or none
    level: str | None = None  # "B-B", "B-T" (PAdES) or "CMS"
    signer_subject: str | None = None
    tenant: str | None = None  # named in the signature's signed attributes
    docmdp: int | None = None  # 1: no change allowed after the signature
    long_term: LongTermVerdict | None = None  # set for a B-LT or B-LTA release: its validation from what it embeds

    def for_evidence(self) -> dict[str, str | bool | int | None]:
        """Flat, as the evidence records it (schemas/evidence-v2.schema.json): a long-term release's verdicts as
        `ades`, `document_timestamps`, and for an archive `future_ades` at `future_at` (ISO 8601)."""
        flat: dict[str, str | bool | int | None] = self.model_dump(exclude={"long_term"})
        if self.long_term is not None:
            verdict = self.long_term
            flat |= {"ades": verdict.ades, "document_timestamps": verdict.document_timestamps}
            if verdict.future_at is not None:
                flat |= {"future_ades": verdict.future_ades, "future_at": verdict.future_at.isoformat()}
        return flat


class VerifyDone(Frozen):
    signature: SignatureVerdict | None
    fidelity_checks: list[str]
    pdfa: PdfaOutcome | None = None  # None: neither the job's document nor the output claims PDF/A


class VerifyOutput(VerifyDone):
    attempt: int
    cost: Cost = Cost()  # every attempt of the stage so far, this one included


class PublishInput(StageInput):
    source: BlobRef
    staged: BlobRef
    text: BlobRef | None = None


class PublishOutput(Frozen):
    artifact: BlobRef
    text: BlobRef | None = None
    attempt: int
    already_published: bool
    cost: Cost = Cost()  # every attempt of the stage so far, this one included


class CleanupInput(Frozen):
    job_id: str


class EvidenceInput(Frozen):
    job_id: str
    tenant: str
    policy: Policy
    policy_version: str
    input_sha256: str
    output_sha256: str | None
    ocr_text_sha256: str | None
    redaction_summary_sha256: str | None = None
    converted: BlobRef | None = None  # an office input's PDF (render's staged copy): kept beside the evidence
    sanitized: dict[str, int] | None = None  # active content removed at render: kind -> count
    signature: dict[str, str | bool | int | None] | None = None  # verify's verdict (None: unsigned, older code)
    stage_attempts: dict[str, int]
    terminal_state: JobState
    completed_at: datetime
    redactions: dict[str, int] = Field(default_factory=dict)  # spans removed by kind (RedactionSummary.by_kind)


class EvidenceOutput(Frozen):
    evidence: BlobRef
    # The key of the envelope's commitments (hex; None: an envelope written before them): the tenant's to keep.
    commitment_salt: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


class NotifyInput(Frozen):
    """The terminal event sent to a tenant's callback: codes and digests only, never content."""

    job_id: str
    tenant: str
    state: JobState
    failure_code: str | None
    cancel_reason: str | None
    # None for a job whose policy redacts: the input's plain digest would confirm a guessed value (the tenant's
    # status has it)
    input_sha256: str | None
    output_sha256: str | None
    evidence_sha256: str | None
    callback: str | None = None  # where to send it, instead of the tenant's callback (not part of the body)


class JobSummary(BaseModel):
    """One line of a job listing, from visibility (search attributes), without asking any worker."""

    job_id: str
    state: str | None
    stage: str | None
    tenant: str | None
    document_class: str | None
    started_at: datetime | None
