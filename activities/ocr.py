"""The `ocr` stage: OCRmyPDF in a killable child process, on its own task queue.

Cancellation and lease loss reach the activity through its heartbeats; the OCR runner then kills the
OCRmyPDF process group (tesseract and ghostscript included) within seconds.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import CancelledError

from activities.lease import Lease, typed_failures
from docjobs.models import OcrInput, OcrOutput
from docjobs.pdf.ocr import OcrCanceled, run_ocr, text_json
from docjobs.pdf.stamp import stamp
from docjobs.storage import BlobStore, staging_key


class OcrActivities:
    def __init__(self, store: BlobStore, workdir: Path) -> None:
        self._store = store
        self._workdir = workdir

    @activity.defn(name="ocr")
    def ocr(self, request: OcrInput) -> OcrOutput:
        with typed_failures("ocr", request.shape) as attempt, Lease("ocr") as lease:
            self._store.verify(request.source, mismatch_code="source.digest_mismatch")
            self._workdir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=self._workdir, prefix="ocr-") as tmp:
                rendered = Path(tmp) / "rendered.pdf"
                searchable = Path(tmp) / "searchable.pdf"
                self._store.fetch(request.staged, rendered, mismatch_code="artifact.digest_mismatch")
                try:
                    result = run_ocr(
                        rendered,
                        searchable,
                        request.ocr,
                        workdir=Path(tmp),
                        on_page=lease.progress,
                        should_stop=activity.is_cancelled,
                        tag=request.job_id,
                        input_validated=True,  # render validated it, and its digest is checked
                    )
                except OcrCanceled:
                    raise CancelledError("OCR stopped: the stage was canceled or lost its lease") from None
                output = searchable
                if request.watermark is not None:
                    stamp(searchable, output := Path(tmp) / "stamped.pdf", request.watermark, workdir=Path(tmp))
                text_file = Path(tmp) / "text.json"
                text_file.write_text(text_json(result.page_texts))
                text = self._store.put_file(staging_key(request.job_id, "ocr-text", attempt, ".json"), text_file)
                staged = self._store.put_file(staging_key(request.job_id, "ocr", attempt), output)
        return OcrOutput(staged=staged, text=text, pages_ocred=list(result.pages_ocred), attempt=attempt)
