"""The `redact` stage: remove matches and regions for real, prove it, then stamp the watermark.

It runs after OCR, so patterns match OCR text too, and before the watermark, so a region never cuts into
the stamp. The matched values exist only in the document child's memory: the gate that needs them runs there.
When the job has an OCR text blob it is rebuilt from the redacted file (the old one holds the values).
"""

from __future__ import annotations

from activities.declared import implements
from activities.isolated import IsolatedStages
from docjobs.domain import stage_specs as specs
from docjobs.domain.models import RedactInput, RedactOutput
from docjobs.isolation import stage_work
from docjobs.isolation.stage_work import RedactWork


class RedactActivities(IsolatedStages):
    @implements(specs.REDACT)
    def redact(self, request: RedactInput) -> RedactOutput:
        with self._attempt(specs.REDACT.name, request) as attempt:
            done, paths = self._restage(
                attempt,
                request,
                stage_work.REDACT,
                lambda paths: RedactWork(
                    source=paths.source,
                    output=paths.output,
                    text_output=paths.text_output if request.rebuild_text else None,
                    workdir=attempt.folder,
                    settings=request,  # sent as RedactSettings: only the settings reach the child
                ),
            )
            text = None
            if request.rebuild_text:
                text = self._put_staged("redact-text", attempt.number, paths.text_output, ".json")
            staged = self._put_staged("redact", attempt.number, paths.output)
        return self._output(specs.REDACT, done, attempt, staged=staged, text=text)
