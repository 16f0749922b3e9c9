"""The `render` stage: normalize the input to PDF (scans become pages), strip active content, stamp the watermark."""

from __future__ import annotations

from temporalio import activity

from activities.isolated import IsolatedStages
from docjobs.domain.models import RenderInput, RenderOutput
from docjobs.isolation.stage_work import RenderDone, RenderWork


class RenderActivities(IsolatedStages):
    @activity.defn(name="render")
    def render(self, request: RenderInput) -> RenderOutput:
        with self._attempt("render", request) as attempt:
            source, output = attempt.folder / "input", attempt.folder / "output.pdf"
            self._fetch_job_input(request.job_id, request.source, source)
            work = RenderWork(
                source=source,
                output=output,
                workdir=attempt.folder,
                watermark=request.watermark,
                max_pages=request.max_pages,
                allow_signed_input=request.allow_signed_input,
                sanitize=request.sanitize,
                limits=request.limits,
                refuse_encrypted=request.refuse_encrypted,
            )
            done = self._isolated(attempt, work, RenderDone, request.cpu, max_pages=request.max_pages)
            staged = self._put_staged("render", attempt.number, output)
        return RenderOutput(
            staged=staged,
            page_count=min(done.page_count, request.max_pages),  # the child's count is a claim: capped
            input_encryption=done.input_encryption,
            attempt=attempt.number,
            cost=attempt.meter.total(),
            invalidated_signatures=done.invalidated_signatures,
            sanitized=done.sanitized,
            repair_warnings=done.repair_warnings,
        )
