"""A worker with one deliberately broken stage: the test double that a release gate must catch.

    DOCJOBS_FAULT=drop-last-page python tests/fault_worker.py --task-queue QUEUE   (same flags as worker.py)

`drop-last-page` (the default): `render` drops the document's last page (the fidelity gate must catch it).
`box-only-redaction`: `redact` only draws its boxes and removes nothing (the redaction gate must catch it).
`keep-active-content`: `render` strips nothing (the verify gate must find the active content).
`spy-sign`: the `sign` and `verify` children record their work orders and environments (`$HOME/sign-spy/`).
`forge-byte-range`: the `sign` child reports a byte range that leaves bytes unsigned (the worker must refuse it).
`flaky-render`: `render`'s first attempt does the document work, then fails to store its output (retried as
`internal.error`); the second succeeds: a retry whose first attempt cost something.
`compromised-child`: `render` first runs the attack its document plans, as a parser exploit would
(tests/faults/compromised_child.py).
`compromised-release`: `render`, `sign` and `verify` do what a document that took them over plans (JavaScript left
in, no watermark, another tenant's /Reason, a "valid" verdict): the release gate must refuse to have it signed
(tests/faults/compromised_release.py).
`hold-render`: `render` holds, renewing its lease, until the test releases the job (`Hold`, in the folder
`DOCJOBS_HOLD_DIR`), then renders for real: the stand-in for a document slow enough to interfere with.
Before it holds, it leaves its attempt's span (still open) in the folder: what a killed worker never exports.
`hold-ocr-chunk`: the `ocr_chunk` of the pages from `DOCJOBS_HOLD_CHUNK` (a first page) holds the same way, its
event files named `chunk-<first>.<event>`: a long OCR stage stopped half-way for as long as the test needs.
`hold-ocr-checkpoint`: that `ocr_chunk`'s first attempt OCRs for real until it has stored page checkpoints and
named them in its heartbeats, then holds (event `chunk-<first>.checkpointed`, which lists their pages) until the
worker is killed: an attempt
lost in the middle of its range. `fail-ocr-checkpoint`: the same attempt fails there instead (a retryable error).

`hold-renewal`: an archive's renewal holds once it has recorded its new version, until released or killed.

`none`: every stage as `worker.py` has it: a worker to SIGKILL in the middle of real work.

Every fault worker hands a job's next workflow task back to the other workers of its queue after 1 s unanswered
(`STICKY_TIMEOUT`), not temporalio's 10 s: a worker a test kills leaves that task on its own queue, where no one
answers, and the test waits for the lease to lapse, not for that fallback.

`DOCJOBS_SPAN_FILE`: every span this worker ends is written there at once, one JSON object a line (a killed
worker's batch exporter would lose them).

`box-only-redaction`, `keep-active-content`, `spy-sign`, `forge-byte-range`, `compromised-child` and
`compromised-release` break the document work, so they live where the document children import them: the worker's
children serve the entries of `tests/faults/<fault>.py` (the release gate's children keep their own).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pikepdf
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import CancelledError
from temporalio.worker import Worker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from activities.adapter import StageActivities
from activities.archive import ArchiveActivities
from activities.declared import implements
from activities.lease import Lease
from activities.ocr_page_ranges import OcrPageRangeActivities, PageCheckpoints
from docjobs import worker
from docjobs.domain import stage_specs as specs
from docjobs.domain.archive import ArchiveVersion
from docjobs.domain.models import BlobRef, RenderOutput, StageInput
from docjobs.domain.ocr_page_ranges import OcrPageRangeInput, OcrPageRangeOutput
from docjobs.isolation.child_pool import ChildPool
from docjobs.isolation.entries import StageEntry
from docjobs.temporal.tracing import configure_tracing

InputT = TypeVar("InputT", bound=StageInput)
OutputT = TypeVar("OutputT", bound=BaseModel)


STICKY_TIMEOUT = timedelta(seconds=1)


@dataclass(frozen=True)
class Hold:
    """The files through which a test and a held `render` of one job talk: `held` once the stage holds,
    `released` when the test lets it go on, `canceled` when the stage saw its cancellation."""

    folder: Path
    job_id: str

    def path(self, event: str) -> Path:
        return self.folder / f"{self.job_id.replace('/', '~')}.{event}"

    def mark(self, event: str) -> None:
        self.path(event).touch()

    def has(self, event: str) -> bool:
        return self.path(event).exists()

    def wait(self, event: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.has(event):
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.job_id}: no {event} in {timeout} s")
            time.sleep(0.05)


def hold_until_released(hold: Hold, stage: str, name: str = "") -> None:
    """Hold the running activity, renewing its lease, until the test releases it (or it is canceled)."""
    with Lease(stage):
        span = trace.get_current_span()  # the SDK's RunActivity span, with docjobs' attributes
        if isinstance(span, ReadableSpan):
            hold.path(f"{name}span").write_text(span.to_json(indent=None))
        hold.mark(f"{name}held")
        try:
            while not hold.has(f"{name}released"):
                if activity.is_cancelled():
                    raise CancelledError(f"the held {stage} was canceled")
                time.sleep(0.05)
        except CancelledError:  # raised here, or by the SDK into this thread
            hold.mark(f"{name}canceled")
            raise


class HeldRenewal(ArchiveActivities):
    """`hold-renewal`: a renewal holds once it has recorded its new version, before its activity completes (the
    events `v<n>.held`, `v<n>.released`, of the archive's ID): a worker killed there leaves a renewal made and
    recorded that Temporal does not know of, which the next attempt must return, not make again."""

    def _record(self, archive_id: str, version: ArchiveVersion, attempt: int, folder: Path) -> ArchiveVersion:
        recorded = super()._record(archive_id, version, attempt, folder)
        if version.number > 1:
            hold = Hold(Path(os.environ["DOCJOBS_HOLD_DIR"]), archive_id)
            hold_until_released(hold, "renew_archive", f"v{version.number}.")
        return recorded


class HeldRender(StageActivities):
    def run_stage(self, entry: StageEntry[InputT, OutputT, Any, Any], request: InputT) -> OutputT:
        if entry.spec is specs.RENDER:
            hold_until_released(Hold(Path(os.environ["DOCJOBS_HOLD_DIR"]), request.job_id), "render")
        return super().run_stage(entry, request)


class HeldOcrPageRange(OcrPageRangeActivities):
    @implements(specs.OCR_PAGE_RANGE)
    def ocr_chunk(self, request: OcrPageRangeInput) -> OcrPageRangeOutput:
        if request.pages.first == int(os.environ["DOCJOBS_HOLD_CHUNK"]):
            hold = Hold(Path(os.environ["DOCJOBS_HOLD_DIR"]), request.job_id)
            hold_until_released(hold, "ocr_chunk", f"chunk-{request.pages.first}.")
        return super().ocr_chunk(request)


class CheckpointedOcrPageRange(OcrPageRangeActivities):
    def _store_checkpoints(self, checkpoints: PageCheckpoints) -> None:
        super()._store_checkpoints(checkpoints)
        pages = checkpoints.pages
        if checkpoints.stored and pages.first == int(os.environ["DOCJOBS_HOLD_CHUNK"]) and checkpoints.attempt == 1:
            hold = Hold(Path(os.environ["DOCJOBS_HOLD_DIR"]), str(activity.info().workflow_id))
            stored = sorted(pages.first - 1 + int(name[:6]) for name in checkpoints.stored)
            hold.path(f"chunk-{pages.first}.checkpointed").write_text(json.dumps(stored))  # their pages
            if os.environ["DOCJOBS_FAULT"] == "fail-ocr-checkpoint":
                raise OSError("the store is away (a test double)")
            while True:  # the lease's own thread renews it (and sends the checkpoints) until the worker dies
                time.sleep(1)


class FlakyRender(StageActivities):
    def _put_staged(self, stage: str, attempt: int, path: Path, suffix: str = ".pdf") -> BlobRef:
        if stage == "render" and attempt == 1:
            raise OSError("the store is away (a test double)")
        return super()._put_staged(stage, attempt, path, suffix)


class PageDroppingRender(StageActivities):
    def run_stage(self, entry: StageEntry[InputT, OutputT, Any, Any], request: InputT) -> OutputT:
        rendered = super().run_stage(entry, request)
        if not isinstance(rendered, RenderOutput):
            return rendered
        self._workdir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self._workdir) as tmp:  # what is stored is left below the work folder
            whole, short = Path(tmp) / "whole.pdf", Path(tmp) / "short.pdf"
            self._fetch_staged(rendered.staged, whole)
            with pikepdf.open(whole) as pdf:
                del pdf.pages[-1]
                pdf.save(short)
            staged = self._put_staged("render-faulty", rendered.attempt, short)
        return rendered.model_copy(update={"staged": staged})


def write_spans_to(path: Path) -> None:
    configure_tracing("docjobs-worker")
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    out = path.open("a", buffering=1)  # line-buffered: each span is in the file when it has ended
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out, formatter=span_line)))


def span_line(span: ReadableSpan) -> str:
    return f"{span.to_json(indent=None)}\n"


if __name__ == "__main__":
    if "DOCJOBS_SPAN_FILE" in os.environ:
        write_spans_to(Path(os.environ["DOCJOBS_SPAN_FILE"]))
    fault = os.environ.get("DOCJOBS_FAULT", "drop-last-page")
    assert getattr(worker, "Worker", None) is Worker, "docjobs.worker no longer builds its workers as Worker(...)"
    setattr(worker, "Worker", functools.partial(Worker, sticky_queue_schedule_to_start_timeout=STICKY_TIMEOUT))  # noqa: B010
    renders = {"drop-last-page": PageDroppingRender, "hold-render": HeldRender, "flaky-render": FlakyRender}
    if fault in renders:
        setattr(worker, "StageActivities", renders[fault])  # noqa: B010 - swap the stage in, keep the rest
    elif fault == "hold-renewal":
        setattr(worker, "ArchiveActivities", HeldRenewal)  # noqa: B010
    elif fault == "hold-ocr-chunk":
        setattr(worker, "OcrPageRangeActivities", HeldOcrPageRange)  # noqa: B010
    elif fault in ("hold-ocr-checkpoint", "fail-ocr-checkpoint"):
        setattr(worker, "OcrPageRangeActivities", CheckpointedOcrPageRange)  # noqa: B010
    elif fault in (
        "box-only-redaction",
        "keep-active-content",
        "spy-sign",
        "forge-byte-range",
        "compromised-child",
        "compromised-release",
    ):
        entries = f"tests.faults.{fault.replace('-', '_')}"
        setattr(worker, "ChildPool", functools.partial(ChildPool, entries=entries))  # noqa: B010
    elif fault != "none":
        raise SystemExit(f"unknown DOCJOBS_FAULT {fault!r}")
    raise SystemExit(worker.main())
