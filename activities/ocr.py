"""The `ocr` stage: OCRmyPDF on its own task queue, in a document child (OCRmyPDF in a child of its own).

Cancellation and lease loss reach the activity through its heartbeats; the document child's group is then
killed, and OCRmyPDF's own group (tesseract and ghostscript included) follows within a second.
"""

from __future__ import annotations

from temporalio import activity

from activities.isolated import IsolatedStages
from activities.runs import put_staged
from docjobs.models import OcrInput, OcrOutput
from docjobs.stage_work import OcrDone, OcrWork


class OcrActivities(IsolatedStages):
    @activity.defn(name="ocr")
    def ocr(self, request: OcrInput) -> OcrOutput:
        with self._attempt("ocr", request) as attempt:
            self._store.verify(request.source, mismatch_code="source.digest_mismatch")
            folder = attempt.folder
            rendered, output, text_file = folder / "rendered.pdf", folder / "output.pdf", folder / "text.json"
            self._store.fetch(request.staged, rendered, mismatch_code="artifact.digest_mismatch")
            work = OcrWork(
                source=rendered,
                output=output,
                text_output=text_file,
                workdir=attempt.folder,
                ocr=request.ocr,
                watermark=request.watermark,
                tag=request.job_id,
            )
            done = self._isolated(attempt, work, OcrDone, request.cpu)
            text = put_staged(self._store, "ocr-text", attempt.number, text_file, ".json")
            staged = put_staged(self._store, "ocr", attempt.number, output)
        return OcrOutput(
            staged=staged,
            text=text,
            pages_ocred=done.pages_ocred,
            attempt=attempt.number,
            pages_deskewed=done.pages_deskewed,
            pages_unreadable=done.pages_unreadable,
        )
