"""The parts of a stage attempt, shared by every activity and composed as each needs them.

Every attempt runs under `typed_failures` (activities/lease.py: stable codes, metrics); a long one also holds
the `Lease`; one that writes files gets a private `folder`; one that reads the job's blobs fetches them with
their digest checked (`fetch_source`, `fetch_staged`, `verify_source`); one that produces a blob stages it
under its attempt's key (`put_staged`). activities/isolated.py composes all of them for the document stages.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from activities.runs import marked_run
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import BlobRef
from docjobs.store.storage import (
    LEFT_FILE_FLOOR,
    BlobStore,
    copy_left_file,
    job_prefix,
    owned_source,
    source_key,
    staging_key,
)

# The most bytes the running attempt copies out of one file its document child left (`_put_left`): set for the
# whole attempt from what its stage was given (`IsolatedStages._attempt`, `left_file_cap`), the floor outside one.
# A context variable, as an activity's attempt runs in one thread from its start to its end.
OUTPUT_CAP: ContextVar[int] = ContextVar("docjobs_output_cap", default=LEFT_FILE_FLOOR)
# The folder the running attempt's folder is in, when it is not the work folder: its tenant's root, or a confined
# pool's sandbox's own (docjobs/isolation/sandbox_root.py). What a child left is reached from it (`left_root`).
WORK_ROOT: ContextVar[Path | None] = ContextVar("docjobs_work_root", default=None)


class StoreStages:
    """Activities that work on the job's blobs: the store, and where their attempts keep files."""

    def __init__(self, store: BlobStore, workdir: Path) -> None:
        self._store = store
        self._workdir = workdir

    @contextmanager
    def _folder(self, stage: str, root: Path | None = None) -> Iterator[Path]:
        """A private folder for one attempt, in `root` (default: the work folder), gone when it ends (a crash
        leaves it to the worker's sweep)."""
        root = root or self._workdir
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root, prefix=f"{stage}-") as folder:
            yield Path(folder)

    def _fetch_source(self, ref: BlobRef, dest: Path) -> None:
        """The job's accepted input, at `dest`, re-checked against the digest it was accepted with."""
        self._store.fetch(ref, dest, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)

    def _fetch_job_input(self, job_id: str, ref: BlobRef, dest: Path) -> None:
        """The document the job's first reading stage works on (generate, render): the accepted input, only if
        the job's tenant (its ID's prefix) stored it, as `resolve` demands of a public input (another tenant's
        digest answers `source.missing`, as a source nobody stored does, after the same look-ups); or, for a
        generated document, a file of the job's own folder (what `generate` staged)."""
        if ref.key.startswith(f"{job_prefix(job_id)}/"):
            self._fetch_source(ref, dest)
            return
        owned = owned_source(self._store, ref.sha256, job_id.partition("/")[0])
        if owned is None or ref.key != source_key(ref.sha256):
            raise DocJobError(FailureCode.SOURCE_MISSING, "the source blob is missing")
        self._fetch_source(ref, dest)

    def _verify_source(self, ref: BlobRef) -> None:
        """The job's accepted input still has its digest (a stage that does not read it still refuses a changed one)."""
        self._store.verify(ref, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)

    def _fetch_staged(self, ref: BlobRef, dest: Path) -> None:
        """An earlier stage's output, at `dest`, checked against the digest that stage recorded."""
        self._store.fetch(ref, dest, mismatch_code=FailureCode.ARTIFACT_DIGEST_MISMATCH)

    def _put_staged(self, stage: str, attempt: int, path: Path, suffix: str = ".pdf") -> BlobRef:
        """Store an attempt's output under its own staging key in the run's folder (promoted only by `publish`).

        What a document child left is not trusted: see `_put_left`."""
        return self._put_left(staging_key(marked_run(self._store), stage, attempt, suffix), path)

    def _left_root(self, path: Path) -> Path:
        """The folder a file at `path` is reached from, no link followed below it: the attempt's root when it is in
        it (what its child left), else the work folder (the worker's own files, as sign's signed copy)."""
        root = WORK_ROOT.get()
        return root if root is not None and path.is_relative_to(root) else self._workdir

    def _put_left(self, key: str, path: Path, *, max_bytes: int | None = None) -> BlobRef:
        """Store what a document child left at `path` (in the attempt's folder) under `key`. It is not trusted: it
        is copied out first (`copy_left_file`: reached from `_left_root` without following a link at any depth, a
        regular file only, at most `max_bytes`, by default the attempt's `OUTPUT_CAP`) to a folder no child can
        reach, and that copy is stored."""
        self._workdir.mkdir(parents=True, exist_ok=True)
        cap = OUTPUT_CAP.get() if max_bytes is None else max_bytes
        with tempfile.TemporaryDirectory(dir=self._workdir, prefix="staged-") as private:
            copy = Path(private) / "output"
            copy_left_file(path, copy, max_bytes=cap, within=self._left_root(path))
            return self._store.put_file(key, copy)
