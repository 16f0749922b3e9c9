"""One adapter for every document stage declared by a `StageEntry` (docjobs/isolation/stage_work.py): it makes the
stage's activity, registered under its spec's name with its spec's types, and runs each attempt the same way.

An attempt (`IsolatedStages._attempt`: typed failures, the lease, the tenant's pool, a private folder) fetches what
the stage reads, each blob checked against its digest; builds the work order; runs it in a document child (a
cancel or a lost lease kills it); stages the files the stage keeps (copied out untrusted); and returns the child's
result as the worker takes it, with the kept blobs, the attempt's number and its cost, as the spec's output.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

from pydantic import BaseModel

from activities.declared import implements
from activities.isolated import IsolatedStages, RestageInput
from docjobs.domain.models import BlobRef, GenerateInput, InputKind, StageInput
from docjobs.isolation.child_pool import ChildPool
from docjobs.isolation.entries import OUTPUT, TEXT, Given, Reads, StageEntry
from docjobs.isolation.tenant_pools import TenantPools
from docjobs.signing.config import TrustAnchors
from docjobs.signing.environment import signer_from_env
from docjobs.store.storage import BlobStore
from docjobs.store.templates import check_manifest, read_manifest

InputT = TypeVar("InputT", bound=StageInput)
OutputT = TypeVar("OutputT", bound=BaseModel)


class JobInput(Protocol):
    """A stage that reads the job's first document."""

    @property
    def job_id(self) -> str: ...

    @property
    def source(self) -> BlobRef: ...


class StageActivities(IsolatedStages):
    def __init__(self, store: BlobStore, workdir: Path, pool: ChildPool | TenantPools, data_dir: Path) -> None:
        super().__init__(store, workdir, pool)
        self._data_dir = data_dir

    def activity(self, entry: StageEntry[InputT, OutputT, Any, Any]) -> Callable[[InputT], OutputT]:
        """`entry`'s activity: a Temporal activity under its spec's name, of its spec's input and output types."""

        def run(request: InputT) -> OutputT:
            return self.run_stage(entry, request)

        run.__name__ = run.__qualname__ = entry.name
        run.__annotations__ = {"request": entry.spec.input, "return": entry.spec.output}  # what the SDK converts by
        return implements(entry.spec)(run)

    def run_stage(self, entry: StageEntry[InputT, OutputT, Any, Any], request: InputT) -> OutputT:
        """One attempt of `entry`'s stage on `request`."""
        with self._attempt(entry.name, request) as attempt:
            given = self._given(entry, request, attempt.folder)
            work = entry.order(request, given)
            done = self._isolated(attempt, entry, work, request.cpu, max_pages=entry.max_pages(request))
            kept = {
                keep.into: self._put_staged(keep.key, attempt.number, attempt.folder / keep.file, keep.suffix)
                for keep in entry.keeps
                if keep.when(request, done)
            }
        return self._output(entry.spec, entry.checked(request, done), attempt, **kept)

    def _given(self, entry: StageEntry[InputT, Any, Any, Any], request: InputT, folder: Path) -> Given:
        """What the stage reads, fetched into the attempt's `folder` as its `reads` says, and where its child writes."""
        source, output, data = folder / "input", folder / OUTPUT, None
        if entry.reads in (Reads.JOB_INPUT, Reads.TEMPLATE):
            first = cast(JobInput, request)
            self._fetch_job_input(first.job_id, first.source, source)
            if entry.reads is Reads.TEMPLATE and isinstance(request, GenerateInput):
                source, data = self._fetch_template(request, source, folder)
        elif entry.reads is Reads.STAGED:  # an earlier stage's output rewritten: the job's input must keep its digest
            restaged = cast(RestageInput, request)
            source = folder / "input.pdf"
            self._verify_source(restaged.source)
            self._fetch_staged(restaged.staged, source)
        elif entry.reads is Reads.RELEASE:
            released = cast(RestageInput, request)
            self._fetch_source(released.source, source)
            self._fetch_staged(released.staged, output)
        for name, ref in entry.fetches(request):
            self._fetch_staged(ref, folder / name)
        return Given(folder=folder, source=source, output=output, text=folder / TEXT, data=data, trust=self._trust)

    def _fetch_template(self, request: GenerateInput, source: Path, folder: Path) -> tuple[Path, Path | None]:
        """A template job's bundle and data, which its manifest (`source`, checked against the store) names: else
        the job's input itself, without data."""
        if request.input_kind is not InputKind.TEMPLATE:
            return source, None
        manifest = read_manifest(source)
        check_manifest(self._store, manifest, tenant=request.job_id.partition("/")[0])
        bundle, data = folder / "template.zip", folder / "data.json"
        self._fetch_source(manifest.bundle, bundle)
        self._fetch_source(manifest.data, data)
        return bundle, data

    def _trust(self) -> TrustAnchors:
        """The trust anchors of the signer's configuration (on the embedded default, made on first use)."""
        return TrustAnchors.of(signer_from_env(self._data_dir))
