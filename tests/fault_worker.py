"""A worker whose `render` stage drops the last page: the test double that a fidelity gate must catch.

python tests/fault_worker.py --task-queue QUEUE     (same flags as worker.py)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pikepdf
from temporalio import activity

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import worker
from activities.render import RenderActivities
from docjobs.models import RenderInput, RenderOutput
from docjobs.storage import staging_key


class PageDroppingRender(RenderActivities):
    @activity.defn(name="render")
    def render(self, request: RenderInput) -> RenderOutput:
        rendered = super().render(request)
        with tempfile.TemporaryDirectory() as tmp:
            whole, short = Path(tmp) / "whole.pdf", Path(tmp) / "short.pdf"
            self._store.fetch(rendered.staged, whole, mismatch_code="artifact.digest_mismatch")
            with pikepdf.open(whole) as pdf:
                del pdf.pages[-1]
                pdf.save(short)
            staged = self._store.put_file(staging_key(request.job_id, "render-faulty", rendered.attempt), short)
        return rendered.model_copy(update={"staged": staged})


if __name__ == "__main__":
    setattr(worker, "RenderActivities", PageDroppingRender)  # noqa: B010 - swap the stage in, keep the rest
    raise SystemExit(worker.main())
