"""OCR of a long document in page ranges (docjobs/domain/ocr_chunks.py): `ocr_chunk` OCRs one range, `ocr_merge`
puts the ranges back into the document. Both run on the OCR queue, each attempt under its own lease and in a
document child of its own, so a cancel or a lost lease kills that chunk's OCRmyPDF as it does the `ocr` stage's.
"""

from __future__ import annotations

from pathlib import Path

from activities.declared import implements
from activities.isolated import IsolatedStages
from activities.runs import marked_run
from docjobs.domain import stage_specs as specs
from docjobs.domain.ocr_chunks import OcrChunkInput, OcrChunkOutput, OcrMergeInput, OcrMergeOutput
from docjobs.isolation import stage_work
from docjobs.isolation.chunk_work import OcrChunkFile, OcrChunkWork, OcrMergeWork
from docjobs.isolation.sandbox import ChildPool, TenantPools
from docjobs.pdf.ocr import pages_at_once
from docjobs.store.storage import BlobStore, ocr_chunk_key


class OcrChunkActivities(IsolatedStages):
    def __init__(
        self, store: BlobStore, workdir: Path, pool: ChildPool | TenantPools, *, range_slots: int = 1
    ) -> None:
        """`range_slots`: how many ranges this worker OCRs at once; they share its CPUs (pages_at_once)."""
        super().__init__(store, workdir, pool)
        self._pages_at_once = pages_at_once(range_slots)

    @implements(specs.OCR_CHUNK)
    def ocr_chunk(self, request: OcrChunkInput) -> OcrChunkOutput:
        with self._attempt("ocr_chunk", request) as attempt:
            done, paths = self._restage(
                attempt,
                request,
                stage_work.OCR_CHUNK,
                lambda paths: OcrChunkWork(
                    source=paths.source,
                    output=paths.output,
                    workdir=attempt.folder,
                    ocr=request.ocr,
                    pages=request.pages,
                    tag=request.job_id,
                    jobs=self._pages_at_once,
                ),
            )
            key = ocr_chunk_key(marked_run(self._store), request.pages.first, request.pages.last, attempt.number)
            chunk = self._put_left(key, paths.output)
        return OcrChunkOutput(
            chunk=chunk,
            pages=request.pages,
            pages_ocred=done.pages_ocred,
            pages_deskewed=done.pages_deskewed,
            pages_unreadable=done.pages_unreadable,
            attempt=attempt.number,
            cost=attempt.meter.total(),
        )

    @implements(specs.OCR_MERGE)
    def ocr_merge(self, request: OcrMergeInput) -> OcrMergeOutput:
        with self._attempt("ocr_merge", request) as attempt:
            folder = attempt.folder
            self._verify_source(request.source)
            rendered, output, text = folder / "input.pdf", folder / "output.pdf", folder / "text.json"
            self._fetch_staged(request.staged, rendered)
            chunks = []
            for chunk in request.chunks:
                path = folder / f"chunk-{chunk.pages.name}.pdf"
                self._fetch_staged(chunk.chunk, path)  # the digest its `ocr_chunk` reported
                chunks.append(OcrChunkFile(pages=chunk.pages, path=path))
            work = OcrMergeWork(
                source=rendered,
                chunks=chunks,
                output=output,
                text_output=text,
                workdir=folder,
                watermark=request.watermark,
            )
            self._isolated(attempt, stage_work.OCR_MERGE, work, request.cpu, max_pages=request.shape.page_count or None)
            text_ref = self._put_staged("ocr-text", attempt.number, text, ".json")
            staged = self._put_staged("ocr", attempt.number, output)
        return OcrMergeOutput(staged=staged, text=text_ref, attempt=attempt.number, cost=attempt.meter.total())
