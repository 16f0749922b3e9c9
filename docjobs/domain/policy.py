"""A document class's policy: what is done to its documents (watermark, OCR, redaction, signature, sanitizing,
generation, office conversion) and the parser budgets, and its version and fingerprint (docs/policies.md).

A policy may enter Temporal history (a pinned request), so it carries settings only, never document content; a job's
own redaction terms are job data (`Policy.version` leaves them out)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator, model_validator

from docjobs.domain.base import JSON_SAFE_INTEGER, POLICY_NAME_PATTERN, Frozen
from docjobs.domain.canonical import canonical_sha256
from docjobs.domain.linear_regex import LinearRegex
from docjobs.domain.stamp_text import encode_text


class WatermarkMode(StrEnum):
    STRUCTURE = "structure"  # stamp into the page content; text, fonts, links and boxes stay
    RASTER = "raster"  # render each page to an image at `dpi`, stamp it, rebuild the PDF


WATERMARK_OPACITY = 0.35  # the stamp's default opacity, in both modes


class WatermarkPolicy(Frozen):
    text: str = Field(min_length=1, max_length=200)
    mode: WatermarkMode = WatermarkMode.STRUCTURE
    dpi: int = Field(default=150, ge=36, le=600)
    # How much of the page the stamp hides where it is drawn (1: all of it); at least 0.1, so it is always seen.
    opacity: float = Field(default=WATERMARK_OPACITY, ge=0.1, le=1.0)

    @field_validator("text")
    @classmethod
    def _printable_in_the_stamp_font(cls, text: str) -> str:
        encode_text(text)  # rejected at acceptance, not discovered by a worker
        return text


class OcrMode(StrEnum):
    OFF = "off"  # no OCR stage
    SKIP = "skip"  # OCR only the pages that have no text
    REDO = "redo"  # replace an existing OCR layer
    FORCE = "force"  # rasterize and OCR every page


class OcrOutputType(StrEnum):
    PDF = "pdf"
    PDFA = "pdfa"


class OcrUnreadable(StrEnum):
    """What happens to a page with ink that OCR read no text from, even after the corrected retry."""

    FAIL = "fail"  # the job fails with ocr.page_unreadable
    IMAGE_ONLY = "image_only"  # the page is released as it is, without text, and recorded (pages_unreadable)


class OcrPolicy(Frozen):
    mode: OcrMode = OcrMode.OFF
    languages: tuple[str, ...] = ("eng",)
    rotate_pages: bool = True
    deskew: bool = True
    output_type: OcrOutputType = OcrOutputType.PDF
    tesseract_timeout: float = Field(default=180.0, gt=0)  # per page, seconds
    unreadable: OcrUnreadable = OcrUnreadable.FAIL
    # A longer document is OCR'd in page ranges of this many pages, each an activity of its own (docs/ocr.md).
    chunk_pages: int = Field(default=16, ge=1)
    max_parallel: int = Field(default=4, ge=1)  # chunks of one job OCR'd at once


class RedactRegion(Frozen):
    """A rectangle to black out, in PDF points in the page's default user space (docjobs/pdf/redaction/regions.py)."""

    # Canonical JSON writes neither an integer beyond JSON_SAFE_INTEGER nor an infinity: the ask is hashed.
    page: int = Field(ge=1, le=JSON_SAFE_INTEGER)  # 1-based
    x0: float = Field(allow_inf_nan=False)
    y0: float = Field(allow_inf_nan=False)
    x1: float = Field(allow_inf_nan=False)
    y1: float = Field(allow_inf_nan=False)

    @model_validator(mode="after")
    def _positive_area(self) -> RedactRegion:
        if not (self.x0 < self.x1 and self.y0 < self.y1):
            raise ValueError("a region needs x0 < x1 and y0 < y1")
        return self


BUILTIN_PATTERN_NAMES = ("ssn", "phone", "email", "dob", "mrn")


class RedactLayout(StrEnum):
    MASK = "mask"  # a line holding a redaction is re-set: natural advances, one fixed-width box per removed span
    KEEP = "keep"  # every other glyph stays in place: the gap keeps the removed text's width (docs/redaction.md)


class RedactPolicy(Frozen):
    """What to remove for real: built-in named patterns, custom regexes and explicit regions."""

    patterns: tuple[str, ...] = ()  # built-in pattern names (BUILTIN_PATTERN_NAMES)
    regexes: tuple[str, ...] = ()  # custom regular expressions (RE2 syntax: docjobs.domain.linear_regex)
    regions: tuple[RedactRegion, ...] = ()
    mrn_format: str = r"\bMRN[-: #]*\d{6,10}\b"  # the medical record number format of the organization
    fallback_dpi: int = Field(default=200, ge=72, le=600)  # pages that cannot be rewritten are burned in at it
    layout: RedactLayout = RedactLayout.MASK
    # The box a removed span becomes on a re-set line, in ems of its font size: ten average glyphs of half an em.
    mask_width: float = Field(default=5.0, gt=0, le=100)

    @property
    def enabled(self) -> bool:
        return bool(self.patterns or self.regexes or self.regions)

    @field_validator("patterns")
    @classmethod
    def _known_patterns(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(names) - set(BUILTIN_PATTERN_NAMES))
        if unknown:
            raise ValueError(f"unknown built-in pattern(s) {unknown}; known: {list(BUILTIN_PATTERN_NAMES)}")
        return names

    @field_validator("regexes", "mrn_format")
    @classmethod
    def _compiles(cls, value: tuple[str, ...] | str) -> tuple[str, ...] | str:
        """Each regex compiles on the linear-time engine (raises UnsupportedRegex for a feature it lacks)."""
        for regex in (value,) if isinstance(value, str) else value:
            LinearRegex.compile(regex)
        return value


class SignLevel(StrEnum):
    """The PAdES baseline level a release is signed at (docs/release-gates.md, "Long-term signatures")."""

    B_B = "b-b"  # a signature, no timestamp (even if a TSA is configured)
    B_T = "b-t"  # with the TSA's RFC 3161 timestamp of the signature
    B_LT = "b-lt"  # and a DSS: the signer's and the TSA's chains, their OCSP responses and CRLs
    B_LTA = "b-lta"  # and a document timestamp over all of it

    @property
    def timestamped(self) -> bool:
        return self is not SignLevel.B_B

    @property
    def long_term(self) -> bool:
        return self in (SignLevel.B_LT, SignLevel.B_LTA)

    @property
    def archival(self) -> bool:
        return self is SignLevel.B_LTA


class SignPolicy(Frozen):
    enabled: bool = False  # the shipped policies turn it on; `--no-sign` turns it off for a job
    allow_signed_input: bool = False  # False: an already signed input fails `input.signed`
    visible: bool = False
    level: SignLevel | None = None  # None: B-T when DOCJOBS_TSA_URL is set, else B-B (as before levels existed)


class ArchivePolicy(Frozen):
    """A B-LTA release's archive (workflows/archive.py): renewed this many days before its newest timestamp's TSA
    certificate expires."""

    renew_before_days: int = Field(default=30, ge=1, le=3650)


class SanitizeMode(StrEnum):
    STRIP = "strip"  # remove active content (scripts, launch and submit actions, rich media, attachments)
    FAIL = "fail"  # refuse an input that has any: the job fails `input.active_content`
    KEEP = "keep"  # leave the document as it is (and sign it as it is): only for inputs that are trusted


class SanitizePolicy(Frozen):
    """Active content is never signed by default: see docjobs/pdf/sanitize.py for what counts."""

    mode: SanitizeMode = SanitizeMode.STRIP
    keep_attachments: bool = False  # True: embedded files are neither removed nor refused


class MissingResource(StrEnum):
    """What a generated document's refused resource (outside the job, or not in its bundle) does."""

    IGNORE = "ignore"  # left out of the document, counted in the status
    FAIL = "fail"  # the job fails `generate.resource_refused`


class PdfVariant(StrEnum):
    PDF_A_2B = "pdf/a-2b"
    PDF_A_3B = "pdf/a-3b"
    PDF_UA_1 = "pdf/ua-1"  # tagged


CSS_LENGTH = r"\d{1,4}(\.\d{1,3})?(mm|cm|in|pt|px)"


class GeneratePolicy(Frozen):
    """How HTML and templates become PDF (docjobs/generate/): page defaults (the document's own `@page`
    rules win), the PDF variant, what a refused resource does, and the bundle's and template's limits."""

    page_size: str = Field(
        default="A4", pattern=rf"^((A[3-5]|B[45]|letter|legal)( (portrait|landscape))?|{CSS_LENGTH} {CSS_LENGTH})$"
    )
    margin: str = Field(default="20mm", pattern=rf"^{CSS_LENGTH}( {CSS_LENGTH}){{0,3}}$")
    pdf_variant: PdfVariant | None = None
    missing: MissingResource = MissingResource.IGNORE
    template_seconds: float = Field(default=10.0, gt=0, le=300)  # wall-clock limit of one template rendering
    bundle_mb: int = Field(default=50, gt=0)  # a zip bundle, unpacked
    bundle_files: int = Field(default=500, gt=0)


class OfficePolicy(Frozen):
    """Office documents (Word, Excel, PowerPoint, OpenDocument, RTF), converted to PDF by LibreOffice in the render
    stage's document child (docjobs/generate/office.py, docs/office.md)."""

    enabled: bool = True  # False: an office document fails `input.unsupported`
    allow_macro_formats: bool = False  # False: a macro-enabled format (.docm, .xlsm, .pptm): `input.active_content`
    convert_seconds: float = Field(default=120.0, gt=0, le=3600)  # wall-clock limit of one conversion
    pdf_variant: PdfVariant | None = None  # what LibreOffice exports: PDF/A-2b, PDF/A-3b or PDF/UA-1 (None: plain)


class LimitsPolicy(Frozen):
    """Parser budgets for a document class (docjobs/pdf/budgets.py); raised for a trusted tenant whose
    documents fail `input.too_complex`. The page limit is the policy's `max_pages`."""

    stream_decoded_mb: int = Field(default=256, gt=0)  # one stream, decoded
    document_decoded_mb: int = Field(default=2048, gt=0)  # all streams of the document, decoded
    operators_per_page: int = Field(default=1_000_000, gt=0)  # content operators of one page, forms included
    megapixels: int = Field(default=100, gt=0)  # one rasterised page or decoded image
    nesting_depth: int = Field(default=100, gt=0)  # levels of a walked hierarchy (fields, outline, structure)
    objects_per_walk: int = Field(default=1_000_000, gt=0)  # objects visited by one walk


class Policy(Frozen):
    """How one document class is processed. Its version is derived from its content."""

    name: str = Field(pattern=POLICY_NAME_PATTERN)
    watermark: WatermarkPolicy
    deadline_seconds: int = Field(default=900, ge=1, le=7 * 24 * 3600)
    max_pages: int = Field(default=2000, ge=1)
    # True: an input encrypted with an empty user password (it opens without one, and is otherwise processed
    # and recorded as `input_encryption`) fails `input.encrypted` like one that needs a password.
    refuse_encrypted: bool = False
    ocr: OcrPolicy = OcrPolicy()
    redact: RedactPolicy = RedactPolicy()
    sign: SignPolicy = SignPolicy()
    sanitize: SanitizePolicy = SanitizePolicy()
    limits: LimitsPolicy = LimitsPolicy()
    generate: GeneratePolicy = GeneratePolicy()
    office: OfficePolicy = OfficePolicy()
    archive: ArchivePolicy = ArchivePolicy()

    @property
    def version(self) -> str:
        """`name@digest` of the canonical policy without its redaction terms (`redact.regexes`, `redact.regions`,
        left empty): what a job's status and evidence show. The terms are a job's data, not its policy: a version
        that hashed them would let anyone who sees it confirm a guessed name offline (put it back, hash, compare).
        A policy with terms has the version of the same policy without them, so a policy that never had any keeps
        the version it always had; `fingerprint` tells policies with other terms apart."""
        return self.without_terms().fingerprint

    @property
    def fingerprint(self) -> str:
        """`name@digest` of the whole canonical policy, terms included: what a job's identity is derived from (an
        override makes a new fingerprint, so a new job) and what a batch pins its documents to. Never released: it
        stays in the history and the tenant's own records. It is what `version` was before the terms left it, so a
        version recorded or pinned by older code is the policy's fingerprint (docs/batches.md).

        A section added after versions were first recorded (`office`, `archive`) counts only when it differs from its
        defaults, and so does a field added to a section since (`office.pdf_variant`, `watermark.opacity`,
        `sign.level`), so every policy that does not use them keeps the digest it had (pinned batches, recorded
        jobs)."""
        unset: dict[str, Any] = {}
        if self.office == OfficePolicy():
            unset["office"] = True
        elif self.office.pdf_variant is None:
            unset["office"] = {"pdf_variant"}
        if self.watermark.opacity == WATERMARK_OPACITY:
            unset["watermark"] = {"opacity"}
        if self.sign.level is None:
            unset["sign"] = {"level"}
        if self.archive == ArchivePolicy():
            unset["archive"] = True
        return f"{self.name}@{canonical_sha256(self, unset or None)[:12]}"

    def without_terms(self) -> Policy:
        """This policy with no redaction terms of its own: what a release may show of it."""
        if not (self.redact.regexes or self.redact.regions):
            return self
        return self.model_copy(update={"redact": self.redact.model_copy(update={"regexes": (), "regions": ()})})

    def released(self) -> dict[str, Any]:
        """The policy as a release shows it: without the redaction terms (`redact.regexes` and `redact.regions`,
        left out), whose number the evidence gives by kind instead (`Evidence.redactions`)."""
        return self.model_dump(mode="json", exclude={"redact": {"regexes", "regions"}})
