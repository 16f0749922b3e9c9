"""The `ocr` stage: OCRmyPDF on its own task queue, in a document child (OCRmyPDF in a child of its own).

Cancellation and lease loss reach the activity through its heartbeats; the document child's group is then
killed, and OCRmyPDF's own group (tesseract and ghostscript included) follows within a second.
"""

from __future__ import annotations

from activities.declared import implements
from activities.isolated import IsolatedStages
from docjobs.domain import stage_specs as specs
from docjobs.domain.models import OcrInput, OcrOutput
from docjobs.isolation import stage_work
from docjobs.isolation.stage_work import OcrWork


class OcrActivities(IsolatedStages):
    @implements(specs.OCR)
    def ocr(self, request: OcrInput) -> OcrOutput:
        with self._attempt(specs.OCR.name, request) as attempt:
            done, paths = self._restage(
                attempt,
                request,
                stage_work.OCR,
                lambda paths: OcrWork(
                    source=paths.source,
                    output=paths.output,
                    text_output=paths.text_output,
                    workdir=attempt.folder,
                    settings=request,  # sent as OcrSettings: only the settings reach the child
                    tag=request.job_id,
                ),
            )
            text = self._put_staged("ocr-text", attempt.number, paths.text_output, ".json")
            staged = self._put_staged("ocr", attempt.number, paths.output)
        return self._output(specs.OCR, done, attempt, staged=staged, text=text)
