"""The `redact` stage: remove matches and regions for real, prove it, then stamp the watermark.

It runs after OCR, so patterns match OCR text too, and before the watermark, so a region never cuts into
the stamp. The matched values exist only in the document child's memory: the gate that needs them runs there.
When the job has an OCR text blob it is rebuilt from the redacted file (the old one holds the values).
"""

from __future__ import annotations

from temporalio import activity

from activities.isolated import IsolatedStages
from docjobs.models import RedactInput, RedactOutput
from docjobs.stage_work import RedactDone, RedactWork


class RedactActivities(IsolatedStages):
    @activity.defn(name="redact")
    def redact(self, request: RedactInput) -> RedactOutput:
        with self._attempt("redact", request) as attempt:
            self._verify_source(request.source)
            staged_in, output = attempt.folder / "input.pdf", attempt.folder / "output.pdf"
            self._fetch_staged(request.staged, staged_in)
            text_file = attempt.folder / "text.json" if request.rebuild_text else None
            work = RedactWork(
                source=staged_in,
                output=output,
                text_output=text_file,
                workdir=attempt.folder,
                redact=request.redact,
                watermark=request.watermark,
                limits=request.limits,
            )
            done = self._isolated(attempt, work, RedactDone, request.cpu)
            text = None
            if text_file is not None:
                text = self._put_staged("redact-text", attempt.number, text_file, ".json")
            staged = self._put_staged("redact", attempt.number, output)
        return RedactOutput(
            staged=staged, text=text, summary=done.summary, attempt=attempt.number, cost=attempt.meter.total()
        )
