"""The activities the workflow runs, declared by name and types: what the workflow calls.

The workflow may not import the implementations (activities/ does I/O), so it calls these declarations; the
worker registers the implementations under the same names (`worker.stage_activities`), and
tests/test_stages.py checks that each declaration has exactly one, with its parameter and return types. The
names are in every recorded history: never rename one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from temporalio import activity

from docjobs.domain.models import (
    CleanupInput,
    EvidenceInput,
    EvidenceOutput,
    GenerateInput,
    GenerateOutput,
    JobRequest,
    NotifyInput,
    OcrInput,
    OcrOutput,
    PublishInput,
    PublishOutput,
    RedactInput,
    RedactOutput,
    RenderInput,
    RenderOutput,
    ResolveInput,
    SignInput,
    SignOutput,
    VerifyInput,
    VerifyOutput,
)
from docjobs.domain.ocr_chunks import OcrChunkInput, OcrChunkOutput, OcrMergeInput, OcrMergeOutput
from docjobs.domain.states import Stage

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT")


def declare(name: str, parameter: type[InputT], result: type[OutputT]) -> Callable[[InputT], OutputT]:
    """An activity declaration: its name and types, for the workflow to call (its body never runs: the worker
    runs the implementation registered under the name)."""

    def declaration(request: InputT) -> OutputT:
        raise NotImplementedError(f"{name} is a declaration: a worker runs its implementation (activities/)")

    declaration.__name__ = declaration.__qualname__ = name
    declaration.__annotations__ = {"request": parameter, "return": result}  # what the SDK converts by
    return activity.defn(name=str(name))(declaration)


def activity_name(declaration: Callable[..., Any]) -> str:
    """The name a declaration (or an implementation) is registered under."""
    definition = activity._Definition.must_from_callable(declaration)
    assert definition.name is not None, "every docjobs activity has a name"
    return definition.name


generate = declare(Stage.GENERATE, GenerateInput, GenerateOutput)
resolve = declare("resolve", ResolveInput, JobRequest)  # a public input's policy, timings and source
render = declare(Stage.RENDER, RenderInput, RenderOutput)
ocr = declare(Stage.OCR, OcrInput, OcrOutput)
redact = declare(Stage.REDACT, RedactInput, RedactOutput)
sign = declare(Stage.SIGN, SignInput, SignOutput)
verify = declare(Stage.VERIFY, VerifyInput, VerifyOutput)
publish = declare(Stage.PUBLISH, PublishInput, PublishOutput)
evidence = declare("evidence", EvidenceInput, EvidenceOutput)
cleanup = declare("cleanup", CleanupInput, int)
notify = declare("notify", NotifyInput, str)
ocr_chunk = declare("ocr_chunk", OcrChunkInput, OcrChunkOutput)  # a page range of a long document's OCR
ocr_merge = declare("ocr_merge", OcrMergeInput, OcrMergeOutput)  # the OCR'd ranges back into the document

DECLARATIONS: tuple[Callable[..., Any], ...] = (
    generate,
    resolve,
    render,
    ocr,
    redact,
    sign,
    verify,
    publish,
    evidence,
    cleanup,
    notify,
    ocr_chunk,
    ocr_merge,
)
