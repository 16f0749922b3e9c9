"""The `ocr` stage: OCRmyPDF on its own task queue, in a document child (OCRmyPDF in a child of its own).

Cancellation and lease loss reach the activity through its heartbeats; the document child's group is then
killed, and OCRmyPDF's own group (tesseract and ghostscript included) follows within a second.
"""

from __future__ import annotations

from temporalio import activity

from activities.isolated import IsolatedStages
from docjobs.domain.models import OcrInput, OcrOutput
from docjobs.isolation.stage_work import OcrDone, OcrWork


class OcrActivities(IsolatedStages):
    @activity.defn(name="ocr")
    def ocr(self, request: OcrInput) -> OcrOutput:
        with self._attempt("ocr", request) as attempt:
            done, paths = self._restage(
                attempt,
                request,
                lambda paths: OcrWork(
                    source=paths.source,
                    output=paths.output,
                    text_output=paths.text_output,
                    workdir=attempt.folder,
                    ocr=request.ocr,
                    watermark=request.watermark,
                    tag=request.job_id,
                ),
                OcrDone,
            )
            text = self._put_staged("ocr-text", attempt.number, paths.text_output, ".json")
            staged = self._put_staged("ocr", attempt.number, paths.output)
        return OcrOutput(
            staged=staged,
            text=text,
            pages_ocred=done.pages_ocred,
            attempt=attempt.number,
            cost=attempt.meter.total(),
            pages_deskewed=done.pages_deskewed,
            pages_unreadable=done.pages_unreadable,
        )
