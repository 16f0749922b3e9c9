"""The `ocr` stage: OCRmyPDF on its own task queue, in a document child (OCRmyPDF in a child of its own).

Cancellation and lease loss reach the activity through its heartbeats; the document child's group is then
killed, and OCRmyPDF's own group (tesseract and ghostscript included) follows within a second.
"""

from __future__ import annotations

from temporalio import activity

from activities.isolated import IsolatedStages
from docjobs.models import OcrInput, OcrOutput
from docjobs.stage_work import OcrDone, OcrWork


class OcrActivities(IsolatedStages):
    @activity.defn(name="ocr")
    def ocr(self, request: OcrInput) -> OcrOutput:
        with self._attempt("ocr", request) as attempt:
            self._verify_source(request.source)
            folder = attempt.folder
            rendered, output, text_file = folder / "rendered.pdf", folder / "output.pdf", folder / "text.json"
            self._fetch_staged(request.staged, rendered)
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
            text = self._put_staged("ocr-text", attempt.number, text_file, ".json")
            staged = self._put_staged("ocr", attempt.number, output)
        return OcrOutput(
            staged=staged,
            text=text,
            pages_ocred=done.pages_ocred,
            attempt=attempt.number,
            cost=attempt.meter.total(),
            pages_deskewed=done.pages_deskewed,
            pages_unreadable=done.pages_unreadable,
        )
