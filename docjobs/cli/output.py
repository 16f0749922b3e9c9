"""What the command line prints: text for a person, or exactly one JSON object last with `--json`; exit codes."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from docjobs.domain.job_status import JobStatus
from docjobs.domain.models import RedactionSummary
from docjobs.domain.states import JobState
from docjobs.temporal.settings import TemporalSettings

EXIT_OK, EXIT_JOB_NOT_SUCCEEDED, EXIT_USAGE, EXIT_BUDGET, EXIT_PROTOCOL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


class Output:
    """Speaks to a person, or prints exactly one JSON object last with `--json`."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def say(self, text: str) -> None:
        if not self.as_json:
            print(text, flush=True)

    def progress(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def result(self, payload: dict[str, Any], text: str) -> None:
        if self.as_json:
            print(json.dumps(payload, sort_keys=True), flush=True)
        else:
            print(text, flush=True)


# What a command's `handler` is: starter.py parses the arguments and awaits it for the exit code.
Command = Callable[[argparse.Namespace, TemporalSettings, Output], Coroutine[Any, Any, int]]


def status_payload(status: JobStatus) -> dict[str, Any]:
    return status.model_dump(mode="json")


def describe(status: JobStatus) -> str:
    lines = [f"job {status.job_id}: {status.state.value}" + (f" (stage {status.stage.value})" if status.stage else "")]
    if status.failure_code:
        lines.append(f"  failure: {status.failure_code}: {status.failure_message}")
    if status.cancel_reason:
        lines.append(f"  cancel reason: {status.cancel_reason}")
    lines.append(f"  input sha256:  {status.input_sha256}")
    if status.output_sha256:
        lines.append(f"  output sha256: {status.output_sha256}")
    lines.append(f"  policy {status.policy_version}, {status.watermark_mode.value} mode, {status.page_count} page(s)")
    if status.generated:
        refused = ", ".join(f"{kind} x{count}" for kind, count in status.generated.refused.items()) or "none"
        variant = f", {status.generated.pdf_variant.value}" if status.generated.pdf_variant else ""
        lines.append(f"  generated: {status.generated.page_count} page(s){variant}; resources refused: {refused}")
    if status.ocr_text_sha256:
        ocred = ", ".join(str(page) for page in status.pages_ocred) or "none (text already there)"
        lines.append(f"  OCR: pages {ocred}; text sha256 {status.ocr_text_sha256}")
    if status.sanitized:
        removed = ", ".join(f"{kind} x{count}" for kind, count in sorted(status.sanitized.items()))
        lines.append(f"  active content removed: {removed}")
    if status.redaction:
        lines.append(f"  redaction: {redaction_line(status.redaction)}")
    if status.signature:
        verdict = "valid" if status.signature.bottom_line else "NOT valid"
        lines.append(f"  signature: {verdict}, coverage {status.signature.coverage}")
    if status.fidelity_checks:
        lines.append(f"  checked: {', '.join(status.fidelity_checks)}")
    if status.evidence_sha256:
        lines.append(f"  evidence sha256: {status.evidence_sha256}")
    if status.cost.total.attempts:
        spent = status.cost.total
        lines.append(
            f"  cost: {spent.cpu_seconds:.3f} CPU s, {spent.wall_seconds:.3f} s, {spent.attempts} attempt(s), "
            f"peak {spent.peak_memory_mb:.0f} MiB, {spent.bytes_read} bytes read, {spent.bytes_written} written"
        )
    if status.trace_id:
        lines.append(f"  trace: {status.trace_id}")
    for record in status.transitions:
        stage = f" ({record.stage.value})" if record.stage else ""
        lines.append(f"  {record.at.isoformat()}  {record.state.value}{stage}")
    return "\n".join(lines)


def redaction_line(summary: RedactionSummary) -> str:
    """Counts per pattern, pages and fallbacks in one line (the values themselves are never known here)."""
    totals: dict[str, int] = {}
    for page in summary.pages:
        for pattern, count in page.matches.items():
            totals[pattern] = totals.get(pattern, 0) + count
    found = ", ".join(f"{pattern} x{count}" for pattern, count in sorted(totals.items())) or "no pattern matches"
    line = f"{found} on {len(summary.pages)} page(s)"
    if summary.document:
        line += "; document-level: " + ", ".join(f"{kind} x{count}" for kind, count in sorted(summary.document.items()))
    if summary.fallback_pages:
        line += f"; burned in (raster fallback): pages {', '.join(map(str, summary.fallback_pages))}"
    return line + f"; gate: {' + '.join(summary.gate)} found nothing"


def progress_printer(out: Output) -> Callable[[JobStatus], None]:
    """Prints a line to stderr whenever the state, stage or page progress changes."""
    last = [""]

    def show(status: JobStatus) -> None:
        stage = f" {status.stage.value}" if status.stage and status.state is JobState.PROCESSING else ""
        progress = status.progress or {}
        pages = ""
        total = progress.get("pages_total")
        if isinstance(total, int) and total > 0:
            done = int(progress.get("pages_done") or 0)
            pages = f" [{'#' * (20 * done // total):<20}] page {done}/{total}"
        line = f"  {status.state.value}{stage}{pages}"
        if line != last[0]:
            last[0] = line
            out.progress(line)

    return show


def fail(out: Output, code: int, error: str, message: str, **extra: Any) -> int:
    job = f" (job {extra['job_id']})" if extra.get("job_id") else ""
    out.result({"error": error, "message": message, **extra}, f"error: {error}: {message}{job}")
    return code
