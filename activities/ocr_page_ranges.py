"""OCR of a long document in page ranges (docjobs/domain/ocr_page_ranges.py): `ocr_chunk` OCRs one range, and
`ocr_merge` (declared with the other document stages: docjobs/isolation/stage_work.py, `OCR_MERGE`) puts the ranges
back into the document. Both run on the OCR queue, each attempt under its own lease and in a document child of its
own, so a cancel or a lost lease kills that range's OCRmyPDF as it does the `ocr` stage's.

A range resumes where a lost attempt stopped: the child leaves each page's words as a checkpoint as soon as
Tesseract read them (docjobs/pdf/_ocr_child.py), the worker stores each one as the page progress comes in and names
it in the lease's heartbeats, and the next attempt fetches those the last heartbeat named (each by its digest) and
reads only the other pages. A worker lost in the middle of a range costs the pages being read, not the range.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from activities.declared import implements
from activities.isolated import IsolatedStages
from activities.runs import marked_run
from docjobs.domain import stage_specs as specs
from docjobs.domain.errors import DocJobError
from docjobs.domain.models import BlobRef
from docjobs.domain.ocr_page_ranges import OcrPageRangeInput, OcrPageRangeOutput, PageRange
from docjobs.isolation import stage_work
from docjobs.isolation.child_pool import ChildPool
from docjobs.isolation.page_range_work import OcrPageRangeWork
from docjobs.isolation.tenant_pools import TenantPools
from docjobs.pdf.ocr import cpus
from docjobs.store.storage import (
    BlobStore,
    RunScope,
    ocr_checkpoint_key,
    ocr_checkpoints_prefix,
    ocr_range_key,
    open_left_dir,
    open_left_file,
)

CHECKPOINT_NAME = re.compile(r"^(\d{6})-[0-9a-f]{64}\.json$")  # `<page in the range>-<OCR image sha256>.json`
CHECKPOINT_MAX_BYTES = 4 * 1024 * 1024  # a page's hOCR and text; a larger file is not what the child should write
CHECKPOINTS_DETAIL = "checkpoints"  # the heartbeat detail naming the stored checkpoints


class OcrPageRangeActivities(IsolatedStages):
    def __init__(self, store: BlobStore, workdir: Path, pool: ChildPool | TenantPools) -> None:
        super().__init__(store, workdir, pool)
        self._cores = CoreShare(cpus())

    @implements(specs.OCR_PAGE_RANGE)
    def ocr_chunk(self, request: OcrPageRangeInput) -> OcrPageRangeOutput:
        with (
            self._attempt(specs.OCR_PAGE_RANGE.name, request) as attempt,
            self._cores.joined(attempt.folder / "cpu-share") as share,
        ):
            run = marked_run(self._store)
            folder = attempt.folder / "checkpoints"
            checkpoints = PageCheckpoints(run, request.pages, attempt.number, folder, attempt.lease)
            checkpoints.folder.mkdir()
            resume = attempt.folder / "resume"
            resume.mkdir()
            self._restore_checkpoints(checkpoints, attempt.lease.resumed_from(), resume)
            done, paths = self._restage(
                attempt,
                request,
                stage_work.OCR_PAGE_RANGE,
                lambda paths: OcrPageRangeWork(
                    source=paths.source,
                    output=paths.output,
                    workdir=attempt.folder,
                    ocr=request.ocr,
                    pages=request.pages,
                    tag=request.job_id,
                    cpu_share=share,
                    checkpoints=checkpoints.folder,
                    resume=resume,
                ),
                on_progress=lambda done, total: self._store_checkpoints(checkpoints),
            )
            key = ocr_range_key(run, request.pages.first, request.pages.last, attempt.number)
            ocrd = self._put_left(key, paths.output)
        return OcrPageRangeOutput(
            chunk=ocrd,
            pages=request.pages,
            pages_ocred=done.pages_ocred,
            pages_deskewed=done.pages_deskewed,
            pages_unreadable=done.pages_unreadable,
            pages_resumed=done.pages_resumed,
            attempt=attempt.number,
            cost=attempt.meter.total(),
        )

    def _restore_checkpoints(self, checkpoints: PageCheckpoints, previous: dict[str, Any], resume: Path) -> None:
        """The checkpoints the previous attempt's last heartbeat (`previous`) named, fetched into `resume` (each
        checked against its digest; one that fails is left out, and its page read again), and named again in this
        attempt's."""
        for name, ref in checkpoints.named_in(previous).items():
            try:
                self._fetch_staged(ref, resume / name)
            except Exception:  # noqa: BLE001 - a checkpoint is a saving, never a condition: read the page again
                (resume / name).unlink(missing_ok=True)
                continue
            checkpoints.kept(name, ref)

    def _store_checkpoints(self, checkpoints: PageCheckpoints) -> None:
        """Every new checkpoint the child left, stored and named in the lease's heartbeats."""
        for name in checkpoints.new(within=self._left_root(checkpoints.folder)):
            checkpoints.kept(name, self._store_checkpoint(checkpoints, name))

    def _store_checkpoint(self, checkpoints: PageCheckpoints, name: str) -> BlobRef:
        """One checkpoint, copied out as any file a child leaves (`_put_left`: no link followed at any depth below
        the work folder, so not a `checkpoints` folder the child swapped for a link either), at most
        CHECKPOINT_MAX_BYTES, counted as it is copied."""
        pages = checkpoints.pages
        key = ocr_checkpoint_key(checkpoints.run, pages.first, pages.last, name, checkpoints.attempt)
        return self._put_left(key, checkpoints.folder / name, max_bytes=CHECKPOINT_MAX_BYTES)


class CoreShare:
    """The worker's cores, shared by the ranges it runs: each range's OCRmyPDF runs a page a core, and its Tesseract
    calls take turns within the range's share (`run_ocr`'s `cpu_share`), which this rewrites as ranges start and
    end. Two ranges on 2 cores read a page each at a time; the last range left, as the others end, reads two: no
    core waits for the stage's last range."""

    def __init__(self, cores: int) -> None:
        self._cores = cores
        self._files: set[int] = set()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def joined(self, path: Path) -> Iterator[Path]:
        """A range's share file, at `path` (new: in a folder its child will be given), kept up to date while the
        range runs. The worker writes it through its own descriptor: what the child does to the path later never
        leads the worker's writes elsewhere."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            with self._lock:
                self._files.add(fd)
                self._spread()
            yield path
        finally:
            with self._lock:
                self._files.discard(fd)
                os.close(fd)
                self._spread()

    def _spread(self) -> None:
        share = f"{max(1, self._cores // max(1, len(self._files))):<8}\n".encode()  # one fixed-width write
        for fd in self._files:
            os.pwrite(fd, share, 0)


class Noting(Protocol):
    def note(self, **details: Any) -> None: ...


@dataclass
class PageCheckpoints:
    """The page checkpoints of one attempt of a range: those it took over from the previous attempt and those it
    stored itself, by name, as its heartbeats carry them."""

    run: RunScope
    pages: PageRange
    attempt: int
    folder: Path  # where the document child leaves them
    lease: Noting  # whose heartbeats name them
    stored: dict[str, BlobRef] = field(default_factory=dict)

    def named_in(self, details: dict[str, Any]) -> dict[str, BlobRef]:
        """The checkpoints of this range that heartbeat `details` name (anything else there is ignored)."""
        prefix = f"{ocr_checkpoints_prefix(self.run, self.pages.first, self.pages.last)}/"
        named: dict[str, BlobRef] = {}
        entries = details.get(CHECKPOINTS_DETAIL)
        for entry in entries if isinstance(entries, list) else []:
            try:
                name, ref = entry["name"], BlobRef.model_validate(entry["blob"])
            except (TypeError, KeyError, ValidationError):
                continue
            if isinstance(name, str) and self._in_range(name) and ref.key.startswith(prefix):
                named[name] = ref
        return named

    def new(self, *, within: Path | None = None) -> list[str]:
        """The checkpoints the child has left since the last look: well named, for a page of the range, regular
        files of a sane size. What a child leaves is not trusted: the folder is opened once, from `within` (a
        folder the worker made: the attempt's folder by default, the work folder for the activity) without
        following a link at any depth (a `checkpoints` the child replaced with a link to another folder is
        `internal.error`, never listed), and each file is opened in it, without following a link, before its
        type and size are looked at, on the open file (`_put_left` then counts the bytes it copies)."""
        found = []
        folder = open_left_dir(self.folder, within=self.folder.parent if within is None else within)
        try:
            for name in os.listdir(folder):
                if name not in self.stored and self._in_range(name) and _sane_checkpoint(name, folder):
                    found.append(name)
        finally:
            os.close(folder)
        return sorted(found)[: self.pages.pages - len(self.stored)]

    def kept(self, name: str, ref: BlobRef) -> None:
        self.stored[name] = ref
        entries = [{"name": name, "blob": ref.model_dump(mode="json")} for name, ref in sorted(self.stored.items())]
        self.lease.note(**{CHECKPOINTS_DETAIL: entries})

    def _in_range(self, name: str) -> bool:
        match = CHECKPOINT_NAME.match(name)
        return match is not None and 1 <= int(match.group(1)) <= self.pages.pages


def _sane_checkpoint(name: str, folder: int) -> bool:
    """The file `name` in the open `folder` is a regular file of at most CHECKPOINT_MAX_BYTES, as its open file says
    (not a link, FIFO or folder: anything else is skipped, and its page read again)."""
    try:
        fd = open_left_file(name, folder)
    except (DocJobError, OSError):
        return False
    try:
        facts = os.fstat(fd)
    finally:
        os.close(fd)
    return stat.S_ISREG(facts.st_mode) and facts.st_size <= CHECKPOINT_MAX_BYTES
