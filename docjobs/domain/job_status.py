"""The job status in typed sections: what `status`, `wait` and `run` report, and the workflow's result.

Each stage fills in its own section (`render`, `ocr`, `redaction`, `signature`, `pdfa`, `cost`), and a flag that
follows from a section (`repaired`, `pdfa_kept`) is a property of it, never stored beside it, as pyHanko's status
objects are. The wire stays what it always was: `redaction`, `signature`, `pdfa` and `cost` are objects there,
while the render and OCR sections' fields sit at the top level (`page_count`, `repaired`, `pages_ocred`, ...).
A status read back from the wire (a query's answer, a workflow's result) is folded into its sections again, so
any SDK's client and any older worker's answer read the same.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from docjobs.domain.base import Frozen
from docjobs.domain.models import (
    DeskewedPage,
    GeneratedSummary,
    OcrDone,
    PdfaOutcome,
    RedactionSummary,
    RenderDone,
    SignatureVerdict,
)
from docjobs.domain.policy import WatermarkMode
from docjobs.domain.stage_cost import JobCost
from docjobs.domain.states import JobState, Stage


class CleanupOutcome(StrEnum):
    """The clean-up of a job's staged attempts, when the wrap-up could not finish it (the store did not answer its
    three attempts): the job ended all the same, and the clean-up went on after the end. A status without one
    was cleaned up in the wrap-up."""

    RETRYING = "retrying"  # the job has ended; its clean-up is being retried
    DONE_AFTER_THE_END = "done after the end"
    LEFT_TO_RETENTION = "left to the retention sweep"  # the store did not answer while the run could live


class RenderSection(Frozen):
    """What render found in the input and did to it (never a value of the document's)."""

    input_encryption: str | None = None  # none, permissions_only (None: render has not run)
    repair_warnings: int = 0  # how many warnings qpdf gave on the way in (never their text)
    invalidated_signatures: int = 0  # the input's own signatures, voided by processing (when allowed)
    sanitized: dict[str, int] = Field(default_factory=dict)  # active content removed: kind -> count, never content
    converted_from: str | None = None  # office jobs: the input's format (docx, xlsx, odt, rtf, ...), nothing else
    fonts_substituted: int = 0  # office jobs: font families the document asks for, lacking here, drawn in another

    @classmethod
    def of(cls, done: RenderDone) -> RenderSection:
        return cls.model_validate(done, from_attributes=True)

    @property
    def repaired(self) -> bool:
        """qpdf had to repair the input: the job processed its clean rewrite."""
        return self.repair_warnings > 0


class OcrSection(Frozen):
    """Which pages OCR read, set upright, or could not read."""

    pages_ocred: list[int] = Field(default_factory=list)
    pages_deskewed: list[DeskewedPage] = Field(default_factory=list)  # skew found and turn applied, per page
    pages_unreadable: list[int] = Field(default_factory=list)  # OCR read nothing: released image-only

    @classmethod
    def of(cls, done: OcrDone) -> OcrSection:
        return cls.model_validate(done, from_attributes=True)


FLAT_SECTIONS: dict[str, type[Frozen]] = {"render": RenderSection, "ocr": OcrSection}  # fields at the top level


class ChunkProgress(BaseModel):
    """A stage run in page ranges (OCR of a long document): the pages and chunks finished so far."""

    pages_done: int = 0
    pages_total: int = 0
    chunks_done: int = 0
    chunks_total: int = 0


class TransitionRecord(Frozen):
    state: JobState
    stage: Stage | None = None
    at: datetime


def _derived_fields_optional(schema: dict[str, Any]) -> None:
    """The status's computed fields are left out of `required`: an older worker's answer has none of them."""
    schema["required"] = [name for name in schema.get("required", ()) if name not in JobStatus.model_computed_fields]


class JobStatus(BaseModel):
    """What `status`, `wait` and `run` report; also the workflow's result."""

    model_config = ConfigDict(json_schema_extra=_derived_fields_optional)

    job_id: str
    tenant: str
    document_class: str
    policy_version: str
    watermark_mode: WatermarkMode
    state: JobState
    stage: Stage | None = None
    attempts: dict[str, int] = Field(default_factory=dict)
    input_sha256: str
    output_sha256: str | None = None
    artifact_key: str | None = None
    page_count: int = 0  # the job's document's pages: render's count (or what the request knew)
    render: RenderSection = Field(default_factory=RenderSection, exclude=True)  # on the wire: its fields, flat
    ocr_text_sha256: str | None = None
    ocr: OcrSection = Field(default_factory=OcrSection, exclude=True)  # on the wire: its fields, flat
    ocr_chunks: ChunkProgress | None = None  # set when OCR runs in page ranges: the finished ones
    redaction: RedactionSummary | None = None  # counts per pattern per page and fallback pages, never values
    signature: SignatureVerdict | None = None  # pyHanko's verdicts on the released file
    generated: GeneratedSummary | None = None  # HTML and template jobs: what `generate` made
    pdfa: PdfaOutcome | None = None  # a PDF/A document or output: whether the released file keeps the claim
    fidelity_checks: list[str] = Field(default_factory=list)
    evidence_key: str | None = None  # the signed evidence envelope, stored beside the artifact
    evidence_sha256: str | None = None
    # The key of the evidence's commitments (hex): with it the tenant proves which input, policy and job a release
    # came from (verify-evidence uses it). The tenant's private record: never hand it to a receiver.
    commitment_salt: str | None = None
    cost: JobCost = JobCost()  # CPU, wall time, memory and I/O of every stage attempt (docjobs.domain.stage_cost.Cost)
    notification: str | None = None  # the tenant callback: "delivered", "no callback", "failed"
    cleanup: CleanupOutcome | None = None  # set when the wrap-up could not delete the staged attempts
    failure_code: str | None = None
    failure_message: str | None = None
    cancel_reason: str | None = None
    accepted_at: datetime
    deadline_at: datetime
    transitions: list[TransitionRecord] = Field(default_factory=list)
    progress: dict[str, int | str | None] | None = None  # live page progress of the running stage (client side)
    trace_id: str | None = None  # the job's OpenTelemetry trace (client side, from the memo written at start)

    @model_validator(mode="before")
    @classmethod
    def _sections_from_wire(cls, data: Any) -> Any:
        """A status as the wire has it (the render and OCR fields at the top level) folded into its sections."""
        if not isinstance(data, dict):
            return data
        folded = dict(data)
        for section, model in FLAT_SECTIONS.items():
            if section not in folded:
                folded[section] = {name: folded.pop(name) for name in model.model_fields if name in folded}
        return folded

    # The render and OCR sections' fields, at the top level of the wire as they always were.

    @computed_field  # type: ignore[prop-decorator]
    @property
    def input_encryption(self) -> str | None:
        return self.render.input_encryption

    @computed_field  # type: ignore[prop-decorator]
    @property
    def repaired(self) -> bool:
        """qpdf had to repair the input (`render.repaired`): the job processed its clean rewrite."""
        return self.render.repaired

    @computed_field  # type: ignore[prop-decorator]
    @property
    def repair_warnings(self) -> int:
        return self.render.repair_warnings

    @computed_field  # type: ignore[prop-decorator]
    @property
    def invalidated_signatures(self) -> int:
        return self.render.invalidated_signatures

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sanitized(self) -> dict[str, int]:
        return self.render.sanitized

    @computed_field  # type: ignore[prop-decorator]
    @property
    def converted_from(self) -> str | None:
        return self.render.converted_from

    @computed_field  # type: ignore[prop-decorator]
    @property
    def fonts_substituted(self) -> int:
        return self.render.fonts_substituted

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pages_ocred(self) -> list[int]:
        return self.ocr.pages_ocred

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pages_deskewed(self) -> list[DeskewedPage]:
        return self.ocr.pages_deskewed

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pages_unreadable(self) -> list[int]:
        return self.ocr.pages_unreadable

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pdfa_kept(self) -> bool | None:
        """`pdfa.kept` at the top level, as scripts read it (None: no PDF/A claim either side)."""
        return self.pdfa.kept if self.pdfa else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pdfa_reason(self) -> str | None:
        """Why the claim was not kept (`pdfa.reason`): a stable code, None when kept or not claimed."""
        return self.pdfa.reason if self.pdfa else None
