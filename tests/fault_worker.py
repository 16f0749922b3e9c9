"""A worker with one deliberately broken stage: the test double that a release gate must catch.

    DOCJOBS_FAULT=drop-last-page python tests/fault_worker.py --task-queue QUEUE   (same flags as worker.py)

`drop-last-page` (the default): `render` drops the document's last page (the fidelity gate must catch it).
`box-only-redaction`: `redact` only draws its boxes and removes nothing (the redaction gate must catch it).
`keep-active-content`: `render` strips nothing (the verify gate must find the active content).

The last two break the document work, so they live where the document children import them: the worker's
children serve the entries of `tests/faults/<fault>.py`.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path

import pikepdf
from temporalio import activity

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import worker
from activities.render import RenderActivities
from docjobs.models import RenderInput, RenderOutput
from docjobs.sandbox import ChildPool


class PageDroppingRender(RenderActivities):
    @activity.defn(name="render")
    def render(self, request: RenderInput) -> RenderOutput:
        rendered = super().render(request)
        with tempfile.TemporaryDirectory() as tmp:
            whole, short = Path(tmp) / "whole.pdf", Path(tmp) / "short.pdf"
            self._fetch_staged(rendered.staged, whole)
            with pikepdf.open(whole) as pdf:
                del pdf.pages[-1]
                pdf.save(short)
            staged = self._put_staged("render-faulty", rendered.attempt, short)
        return rendered.model_copy(update={"staged": staged})


if __name__ == "__main__":
    fault = os.environ.get("DOCJOBS_FAULT", "drop-last-page")
    if fault == "drop-last-page":
        setattr(worker, "RenderActivities", PageDroppingRender)  # noqa: B010 - swap the stage in, keep the rest
    elif fault in ("box-only-redaction", "keep-active-content"):
        entries = f"tests.faults.{fault.replace('-', '_')}"
        setattr(worker, "ChildPool", functools.partial(ChildPool, entries=entries))  # noqa: B010
    else:
        raise SystemExit(f"unknown DOCJOBS_FAULT {fault!r}")
    raise SystemExit(worker.main())
