"""What a document job's stages read as its pipeline runs (workflows/document_job.py), and each stage's input built
from it in one place.

The pipeline is then a recipe, one named step a line, as OCRmyPDF's `_run_pipeline` is: each step takes the
context and hands on a new one with the document it made. The stage that stamps the watermark is decided once,
here, so no two stages can both stamp it, or neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from docjobs.domain.models import (
        BlobRef,
        GenerateInput,
        InputKind,
        JobRequest,
        OcrInput,
        PublishInput,
        RedactInput,
        RenderInput,
    )
    from docjobs.domain.policy import OcrMode, Policy, WatermarkMode, WatermarkPolicy
    from docjobs.domain.states import Stage


def watermark_stage(mode: WatermarkMode, *, ocr_on: bool, redact_on: bool) -> Stage:
    """The stage that stamps the watermark: the last one that changes content, so nothing cuts into it and
    a structure stamp (text) never makes a page look searchable to OCR. A raster stamp before OCR is the
    exception: it flattens the page, which OCR then reads (and redaction burns its boxes into)."""
    if mode is WatermarkMode.RASTER and ocr_on:
        return Stage.RENDER
    if redact_on:
        return Stage.REDACT
    return Stage.OCR if ocr_on else Stage.RENDER


@dataclass(frozen=True)
class JobContext:
    """The job's request and the documents its stages have made so far. Frozen: a step hands on a new context,
    so what a stage was given is never changed under it."""

    request: JobRequest
    # The job's document, which every later stage compares with: the accepted input (the request's `source`), or
    # the PDF `generate` or render's conversion made of it. Stage inputs call it `source`, as history recorded them.
    document: BlobRef
    staged: BlobRef  # the document as the last stage left it (the document until a stage stages one)
    text: BlobRef | None = None  # the searchable text of every page, once OCR made it (redaction rebuilds it)
    timestamp_token: BlobRef | None = None  # a B-LTA signature's document timestamp token (staged): for its archive

    @classmethod
    def of(cls, request: JobRequest) -> JobContext:
        return cls(request=request, document=request.source, staged=request.source)

    @property
    def policy(self) -> Policy:
        return self.request.policy

    @property
    def generates(self) -> bool:
        """HTML, bundle and template jobs: `generate` makes the PDF the other stages work on."""
        return self.request.input_kind not in (InputKind.DOCUMENT, InputKind.OFFICE)

    @property
    def ocr_on(self) -> bool:
        return self.policy.ocr.mode is not OcrMode.OFF

    @property
    def redact_on(self) -> bool:
        return self.policy.redact.enabled

    def watermark_at(self, stage: Stage) -> WatermarkPolicy | None:
        """The watermark, for the one stage that stamps it (None for every other)."""
        stamp_at = watermark_stage(self.policy.watermark.mode, ocr_on=self.ocr_on, redact_on=self.redact_on)
        return self.policy.watermark if stage is stamp_at else None


def generate_input(context: JobContext) -> GenerateInput:
    request, policy = context.request, context.policy
    return GenerateInput(
        job_id=request.job_id,
        source=request.source,
        input_kind=request.input_kind,
        generate=policy.generate,
        max_pages=policy.max_pages,
    )


def render_input(context: JobContext) -> RenderInput:
    policy = context.policy
    return RenderInput(
        job_id=context.request.job_id,
        source=context.document,
        watermark=context.watermark_at(Stage.RENDER),
        max_pages=policy.max_pages,
        allow_signed_input=policy.sign.allow_signed_input,
        sanitize=policy.sanitize,
        limits=policy.limits,
        refuse_encrypted=policy.refuse_encrypted,
        office=policy.office,
    )


def ocr_input(context: JobContext) -> OcrInput:
    return OcrInput(
        job_id=context.request.job_id,
        source=context.document,
        staged=context.staged,
        ocr=context.policy.ocr,
        watermark=context.watermark_at(Stage.OCR),
    )


def redact_input(context: JobContext) -> RedactInput:
    policy = context.policy
    return RedactInput(
        job_id=context.request.job_id,
        source=context.document,
        staged=context.staged,
        redact=policy.redact,
        limits=policy.limits,
        watermark=context.watermark_at(Stage.REDACT),
        rebuild_text=context.text is not None,
    )


def publish_input(context: JobContext) -> PublishInput:
    return PublishInput(
        job_id=context.request.job_id, source=context.document, staged=context.staged, text=context.text
    )
