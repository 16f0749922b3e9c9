"""The `render` stage: normalize the input to PDF (office documents are converted, scans become pages), strip active
content, stamp the watermark."""

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
            folder = attempt.folder
            source, output = folder / "input", folder / "output.pdf"
            self._fetch_job_input(request.job_id, request.source, source)
            # The input is its settings (and more): sent to the child as RenderSettings, only they go there.
            work = RenderWork(source=source, output=output, workdir=folder, settings=request)
            done = self._isolated(attempt, stage_work.RENDER, work, request.cpu, max_pages=request.max_pages)
            staged = self._put_staged("render", attempt.number, output)
            # An office input: the PDF it was converted to is the job's document from here on (verify compares with it).
            converted = None
            if done.converted_from is not None:
                converted = self._put_staged("render", attempt.number, folder / stage_work.CONVERTED, ".converted.pdf")
        pages = min(done.page_count, request.max_pages)  # the child's count is a claim: capped
        done = done.model_copy(update={"page_count": pages})
        return self._output(specs.RENDER, done, attempt, staged=staged, converted=converted)
