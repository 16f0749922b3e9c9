"""The `redact` stage: remove matches and regions for real, prove it, then stamp the watermark.

It runs after OCR, so patterns match OCR text too, and before the watermark, so a region never cuts into
the stamp. The matched values exist only in the document child's memory: the gate that needs them runs there.
When the job has an OCR text blob it is rebuilt from the redacted file (the old one holds the values).
"""

from __future__ import annotations

from temporalio import activity

from activities.isolated import IsolatedStages
from docjobs.domain.models import RedactInput, RedactOutput
from docjobs.isolation.stage_work import RedactDone, RedactWork


class RedactActivities(IsolatedStages):
    @activity.defn(name="redact")
    def redact(self, request: RedactInput) -> RedactOutput:
        with self._attempt("redact", request) as attempt:
            done, paths = self._restage(
                attempt,
                request,
                lambda paths: RedactWork(
                    source=paths.source,
                    output=paths.output,
                    text_output=paths.text_output if request.rebuild_text else None,
                    workdir=attempt.folder,
                    redact=request.redact,
                    watermark=request.watermark,
                    limits=request.limits,
                ),
                RedactDone,
            )
            text = None
            if request.rebuild_text:
                text = self._put_staged("redact-text", attempt.number, paths.text_output, ".json")
            staged = self._put_staged("redact", attempt.number, paths.output)
        return RedactOutput(
            staged=staged, text=text, summary=done.summary, attempt=attempt.number, cost=attempt.meter.total()
        )
