"""The `render` stage: normalize the input to PDF (scans become pages), strip active content, stamp the watermark."""

from __future__ import annotations

from activities.declared import implements
from activities.isolated import IsolatedStages
from docjobs.domain import stage_specs as specs
from docjobs.domain.models import RenderInput, RenderOutput
from docjobs.isolation import stage_work
from docjobs.isolation.stage_work import RenderWork


class RenderActivities(IsolatedStages):
    @implements(specs.RENDER)
    def render(self, request: RenderInput) -> RenderOutput:
        with self._attempt(specs.RENDER.name, request) as attempt:
            source, output = attempt.folder / "input", attempt.folder / "output.pdf"
            self._fetch_job_input(request.job_id, request.source, source)
            # The input is its settings (and more): sent to the child as RenderSettings, only they go there.
            work = RenderWork(source=source, output=output, workdir=attempt.folder, settings=request)
            done = self._isolated(attempt, stage_work.RENDER, work, request.cpu, max_pages=request.max_pages)
            staged = self._put_staged("render", attempt.number, output)
        pages = min(done.page_count, request.max_pages)  # the child's count is a claim: capped
        return self._output(specs.RENDER, done.model_copy(update={"page_count": pages}), attempt, staged=staged)
