"""The `redact` stage: remove matches and regions for real, prove it, then stamp the watermark.

It runs after OCR, so patterns match OCR text too, and before the watermark, so a region never cuts into
the stamp. The matched values exist only in this process's memory: the gate that needs them runs here.
When the job has an OCR text blob it is rebuilt from the redacted file (the old one holds the values).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pikepdf
from temporalio import activity

from activities.lease import Lease, typed_failures
from docjobs.models import RedactInput, RedactOutput
from docjobs.pdf.ocr import page_texts, text_json, tool
from docjobs.pdf.redact import redact_pdf
from docjobs.pdf.stamp import stamp
from docjobs.storage import BlobStore, staging_key


class RedactActivities:
    def __init__(self, store: BlobStore, workdir: Path) -> None:
        self._store = store
        self._workdir = workdir

    @activity.defn(name="redact")
    def redact(self, request: RedactInput) -> RedactOutput:
        with typed_failures("redact", request.shape) as attempt, Lease("redact") as lease:
            self._store.verify(request.source, mismatch_code="source.digest_mismatch")
            self._workdir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=self._workdir, prefix="redact-") as tmp:
                staged_in, redacted = Path(tmp) / "input.pdf", Path(tmp) / "redacted.pdf"
                self._store.fetch(request.staged, staged_in, mismatch_code="artifact.digest_mismatch")
                summary = redact_pdf(
                    staged_in,
                    redacted,
                    request.redact,
                    workdir=Path(tmp),
                    on_page=lease.progress,
                    ocr_done=request.rebuild_text,  # the job was OCR'd: every page with pixels has text now
                )
                text = None
                if request.rebuild_text:
                    with pikepdf.open(redacted) as written:  # our own output: no need to re-check every stream
                        pages = len(written.pages)
                    text_file = Path(tmp) / "text.json"
                    text_file.write_text(text_json(page_texts(tool("pdftotext"), redacted, pages, "redaction.failed")))
                    text = self._store.put_file(staging_key(request.job_id, "redact-text", attempt, ".json"), text_file)
                output = redacted
                if request.watermark is not None:
                    stamp(redacted, output := Path(tmp) / "stamped.pdf", request.watermark, workdir=Path(tmp))
                staged = self._store.put_file(staging_key(request.job_id, "redact", attempt), output)
        return RedactOutput(staged=staged, text=text, summary=summary, attempt=attempt)
