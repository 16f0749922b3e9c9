"""The `generate` stage: HTML, a bundle or a stored template with JSON data, made into the PDF the job then
works on. Only HTML and template jobs run it; WeasyPrint and Jinja run in a document child."""

from __future__ import annotations

from activities.declared import implements
from activities.isolated import IsolatedStages
from docjobs.domain import stage_specs as specs
from docjobs.domain.models import GenerateInput, GenerateOutput, InputKind
from docjobs.isolation import stage_work
from docjobs.isolation.stage_work import GenerateWork
from docjobs.store.templates import check_manifest, read_manifest


class GenerateActivities(IsolatedStages):
    @implements(specs.GENERATE)
    def generate(self, request: GenerateInput) -> GenerateOutput:
        with self._attempt(specs.GENERATE.name, request) as attempt:
            source, output, data = attempt.folder / "input", attempt.folder / "output.pdf", None
            self._fetch_job_input(request.job_id, request.source, source)
            if request.input_kind is InputKind.TEMPLATE:  # the manifest names the template version and the data
                manifest = read_manifest(source)
                check_manifest(self._store, manifest, tenant=request.job_id.partition("/")[0])
                source, data = attempt.folder / "template.zip", attempt.folder / "data.json"
                self._fetch_source(manifest.bundle, source)
                self._fetch_source(manifest.data, data)
            # Sent as GenerateSettings: only the settings reach the child.
            work = GenerateWork(source=source, data=data, output=output, workdir=attempt.folder, settings=request)
            done = self._isolated(attempt, stage_work.GENERATE, work, request.cpu, max_pages=request.max_pages)
            staged = self._put_staged("generate", attempt.number, output)
        pages = min(done.summary.page_count, request.max_pages)  # the child's count is a claim: capped
        summary = done.summary.model_copy(update={"page_count": pages})
        return self._output(specs.GENERATE, done.model_copy(update={"summary": summary}), attempt, staged=staged)
