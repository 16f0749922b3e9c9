"""The `render` stage: normalize the input to PDF (scans become pages), strip active content, stamp the watermark."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from temporalio import activity

from activities.lease import Lease, typed_failures
from docjobs.errors import DocJobError
from docjobs.models import RenderInput, RenderOutput
from docjobs.pdf.images import image_to_pdf
from docjobs.pdf.inspect import inspect_pdf, sniff_kind
from docjobs.pdf.sanitize import sanitize_file
from docjobs.pdf.signatures import signature_count, void_certification
from docjobs.pdf.stamp import stamp
from docjobs.storage import BlobStore, staging_key


class RenderActivities:
    def __init__(self, store: BlobStore, workdir: Path) -> None:
        self._store = store
        self._workdir = workdir

    @activity.defn(name="render")
    def render(self, request: RenderInput) -> RenderOutput:
        with typed_failures("render", request.shape) as attempt, Lease("render") as lease:
            self._workdir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=self._workdir, prefix="render-") as tmp:
                source = Path(tmp) / "input"
                normalized = Path(tmp) / "normalized.pdf"
                output = Path(tmp) / "output.pdf"
                self._store.fetch(request.source, source, mismatch_code="source.digest_mismatch")
                with source.open("rb") as head:
                    kind = sniff_kind(head.read(16))
                if kind in ("png", "jpeg", "tiff"):
                    image_to_pdf(source, normalized)
                else:
                    source.rename(normalized)  # not a PDF either: inspection says which code
                info = inspect_pdf(normalized, max_pages=request.max_pages)
                signatures = signature_count(normalized)
                if signatures and not request.allow_signed_input:
                    raise DocJobError("input.signed")
                sanitized = sanitize_file(normalized, request.sanitize)
                watermark = request.watermark
                if watermark is None:
                    shutil.copyfile(normalized, output)
                else:
                    info = stamp(normalized, output, watermark, workdir=Path(tmp), on_page=lease.progress)
                if signatures:
                    void_certification(output)
                staged = self._store.put_file(staging_key(request.job_id, "render", attempt), output)
        return RenderOutput(
            staged=staged,
            page_count=info.page_count,
            input_encryption=info.encryption.value,
            attempt=attempt,
            invalidated_signatures=signatures,
            sanitized=sanitized,
        )
