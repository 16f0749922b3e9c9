"""The activities the workflows run, declared from their specs (docjobs/domain/stage_specs.py): what the workflows call.

The workflows may not import the implementations (activities/ does I/O), so they call these declarations; the
worker registers the implementations under the same names (`worker.stage_activities`), and
tests/test_stages.py checks that each declaration has exactly one, with its parameter and return types. The
names are in every recorded history: never rename one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from temporalio import activity

from docjobs.domain import stage_specs as specs
from docjobs.domain.stage_specs import ActivitySpec, mark_spec, spec_of

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT")


def declare(spec: ActivitySpec[InputT, OutputT]) -> Callable[[InputT], OutputT]:
    """An activity declaration: its name and types, for a workflow to call (its body never runs: the worker
    runs the implementation registered under the name)."""

    def declaration(request: InputT) -> OutputT:
        raise NotImplementedError(f"{spec.name} is a declaration: a worker runs its implementation (activities/)")

    declaration.__name__ = declaration.__qualname__ = spec.name
    declaration.__annotations__ = {"request": spec.input, "return": spec.output}  # what the SDK converts by
    return activity.defn(name=spec.name)(mark_spec(spec)(declaration))


def activity_name(function: Callable[..., Any]) -> str:
    """The name a declaration (or an implementation) is registered under: its spec's."""
    return spec_of(function).name


generate = declare(specs.GENERATE)
resolve = declare(specs.RESOLVE)  # a public input's policy, timings and source
render = declare(specs.RENDER)
ocr = declare(specs.OCR)
redact = declare(specs.REDACT)
sign = declare(specs.SIGN)
verify = declare(specs.VERIFY)
publish = declare(specs.PUBLISH)
evidence = declare(specs.EVIDENCE)
cleanup = declare(specs.CLEANUP)
notify = declare(specs.NOTIFY)
ocr_chunk = declare(specs.OCR_PAGE_RANGE)  # a page range of a long document's OCR
ocr_merge = declare(specs.OCR_MERGE)  # the OCR'd ranges back into the document
open_archive = declare(specs.OPEN_ARCHIVE)  # a B-LTA release's first archive version
renew_archive = declare(specs.RENEW_ARCHIVE)  # an archive's next version

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
    open_archive,
    renew_archive,
)

# The batch workflow's steps.
pin_batch_policy = declare(specs.PIN_BATCH_POLICY)
start_documents = declare(specs.START_DOCUMENTS)
await_jobs = declare(specs.AWAIT_JOBS)
cancel_jobs = declare(specs.CANCEL_JOBS)
record_outcomes = declare(specs.RECORD_OUTCOMES)

BATCH_DECLARATIONS: tuple[Callable[..., Any], ...] = (
    pin_batch_policy,
    start_documents,
    await_jobs,
    cancel_jobs,
    record_outcomes,
)
