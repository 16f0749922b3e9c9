"""The retention sweep: the blobs of runs Temporal no longer retains go; nothing of a live or retained run does.

An idempotency key lasts as long as the namespace retains its job's closed run: after that the same job ID
starts a new run, which writes into its own run folder (docjobs/store/storage.py). What the sweep deletes:

- A run folder, when Temporal answers NOT_FOUND for that exact run (workflow ID and run ID from the folder's
  marker): deleted, or past the namespace's retention. A running run, a retained closed run, a folder whose
  marker is missing, names another namespace or does not match its folder, are kept; any other answer from
  Temporal stops the sweep.
- A source (content-addressed, shared by every job with the same bytes), when no run that visibility lists
  (running or retained) names it in its start memo, nor the manifest of a running batch (its documents
  waiting for their turn have no job yet), and it was last stored more than `source_grace` before the
  sweep began (a template job's source is its manifest: the data it names is kept with it). The grace covers
  a job being accepted at that moment: its source is stored before its workflow starts and before visibility
  shows it, and storing the same bytes again renews the time (which is read again just before the deletion:
  what is left is the moment between that read and the deletion).

Jobs that ended before runs had folders keep their files in the job's folder: the sweep leaves those alone.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ValidationError
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from docjobs.domain.contract import WORKFLOW_TYPE
from docjobs.domain.errors import DocJobError
from docjobs.domain.models import BlobRef, DocumentJobInput, InputKind
from docjobs.store.batch_store import read_manifest
from docjobs.store.storage import (
    OWNER_MARKER_KEY,
    RUN_MARKER,
    RUNS_FOLDER,
    SOURCE_KEY,
    SOURCES_FOLDER,
    BlobStore,
    RunScope,
    StoredBlob,
    job_prefix,
    source_key,
)
from docjobs.store.templates import MAX_MANIFEST_BYTES, TemplateManifest
from docjobs.temporal.batches import BATCH_MEMO
from docjobs.temporal.codec import PayloadDecryptionError
from workflows.batch_job import WORKFLOW_TYPE as BATCH_WORKFLOW_TYPE

SOURCE_GRACE = timedelta(hours=1)
MARKER_MAX_BYTES = 64 * 1024


class GcReport(BaseModel):
    """What one sweep removed (or, in a dry run, would remove)."""

    dry_run: bool
    runs_removed: int = 0
    runs_kept: int = 0
    sources_removed: int = 0
    blobs_removed: int = 0  # the removed runs' blobs and the removed sources
    bytes_removed: int = 0
    unreadable_runs: int = 0  # runs whose start memo this process cannot open: while any, no source is removed

    def count(self, blobs: list[StoredBlob]) -> None:
        self.blobs_removed += len(blobs)
        self.bytes_removed += sum(blob.size for blob in blobs)


def run_folders(store: BlobStore) -> dict[str, list[StoredBlob]]:
    """Every run folder (`jobs/<job digest>/runs/<run ID>`) and its blobs."""
    folders: dict[str, list[StoredBlob]] = defaultdict(list)
    for blob in store.list_blobs("jobs"):
        parts = blob.key.split("/")
        if len(parts) > 4 and parts[2] == RUNS_FOLDER:
            folders["/".join(parts[:4])].append(blob)
    return dict(folders)


def read_marker(store: BlobStore, folder: str, blobs: list[StoredBlob]) -> RunScope | None:
    """The run a folder belongs to, if its marker says so and the folder is the one that run's keys name."""
    key = f"{folder}/{RUN_MARKER}"
    if key not in {blob.key for blob in blobs}:
        return None
    with store.open(key) as marker:
        data = marker.read(MARKER_MAX_BYTES + 1)
    try:
        run = RunScope.model_validate_json(data[:MARKER_MAX_BYTES])
    except ValidationError:
        return None
    return run if run.prefix == folder else None


async def run_is_gone(client: Client, run: RunScope) -> bool:
    try:
        await client.get_workflow_handle(run.workflow_id, run_id=run.run_id).describe()
    except RPCError as error:
        if error.status is RPCStatusCode.NOT_FOUND:
            return True
        raise
    return False


@dataclass
class References:
    """The sources that runs Temporal still has (running or retained) were started with."""

    sources: set[str] = field(default_factory=set)
    unreadable: int = 0  # runs with blobs in this store whose start memo this process cannot open


async def referenced_sources(client: Client, store: BlobStore) -> References:
    """The source of every listed run, from its start memo.

    A memo sealed with a key this process lacks hides its source: if that run has blobs in this store, no
    source may be deleted (an unknown reference must not become a deletion); a run with no folder here
    keeps its files in another store. A start without a docjobs request memo (refused at once by the
    workflow) refers to no source.
    """
    references = References()
    async for execution in client.list_workflows(f'WorkflowType = "{WORKFLOW_TYPE}"'):
        try:
            request = await execution.memo_value("request", default=None)  # the start memo, or the resolved one
            public = await execution.memo_value("input", default=None)  # a public input's start memo (not resolved)
        except (PayloadDecryptionError, KeyError):  # sealed with a key we lack, or sealed and we have no codec
            if await asyncio.to_thread(_has_blobs, store, f"{job_prefix(execution.id)}/{RUNS_FOLDER}"):
                references.unreadable += 1
            continue
        try:
            if request is None:
                if public is None:
                    continue
                job_source = DocumentJobInput.model_validate(public).source  # resolve copies it to its address
                source = BlobRef(key=source_key(job_source.sha256), sha256=job_source.sha256, size=job_source.size)
                kind = job_source.kind
            else:
                source = BlobRef.model_validate(request["source"])
                kind = InputKind(request.get("input_kind", InputKind.DOCUMENT))
        except (TypeError, KeyError, ValueError):  # pydantic's ValidationError is a ValueError
            continue
        references.sources.add(source.key)
        if kind is InputKind.TEMPLATE:
            references.sources |= await asyncio.to_thread(_named_by_manifest, store, source)
    await _add_batch_sources(client, store, references)
    return references


def _named_by_manifest(store: BlobStore, manifest: BlobRef) -> set[str]:
    """The sources a template job's manifest names (its data); none if it cannot be read (then nothing it
    named is known, and its data goes like any unreferenced source)."""
    try:
        with store.open(manifest.key) as blob:
            return {TemplateManifest.model_validate_json(blob.read(MAX_MANIFEST_BYTES)).data.key}
    except (DocJobError, ValidationError):
        return set()


async def _add_batch_sources(client: Client, store: BlobStore, references: References) -> None:
    """The sources of running batches, from their manifests: a document waiting for its turn has no job yet."""
    async for execution in client.list_workflows(
        f'WorkflowType = "{BATCH_WORKFLOW_TYPE}" AND ExecutionStatus = "Running"'
    ):
        try:
            identity = await execution.memo_value(BATCH_MEMO, default=None)
            manifest = BlobRef.model_validate(identity["manifest"])
        except (PayloadDecryptionError, KeyError, TypeError, ValidationError):
            references.unreadable += 1  # an unknown reference must not become a deletion
            continue
        sources = await asyncio.to_thread(read_manifest, store, manifest)
        references.sources.update(source.key for source in sources)


async def collect_garbage(
    client: Client, store: BlobStore, *, dry_run: bool = False, source_grace: timedelta = SOURCE_GRACE
) -> GcReport:
    """Delete the blobs of runs that are gone, then the sources nothing retained refers to (see the module)."""
    began = datetime.now(UTC)
    referenced = await referenced_sources(client, store)  # first: a source stored after it is within the grace
    report = GcReport(dry_run=dry_run, unreadable_runs=referenced.unreadable)
    for folder, blobs in (await asyncio.to_thread(run_folders, store)).items():
        run = await asyncio.to_thread(read_marker, store, folder, blobs)
        if run is None or run.namespace != client.namespace or not await run_is_gone(client, run):
            report.runs_kept += 1
            continue
        if not dry_run:
            await asyncio.to_thread(_remove_run, store, folder, blobs)
        report.runs_removed += 1
        report.count(blobs)
    if referenced.unreadable:
        return report  # some run's source is unknown: keep every source
    cutoff = began - source_grace
    sources, markers = await asyncio.to_thread(_sources_and_markers, store)
    removed: set[str] = set()
    for blob in sources.values():
        if blob.key in referenced.sources or blob.modified > cutoff:
            continue
        if not dry_run and not await asyncio.to_thread(_remove_source, store, blob.key, cutoff):
            continue
        removed.add(blob.key)
        report.sources_removed += 1
        report.count([blob])
    # Ownership markers go with their source, once it is gone (removed now, or before), and only those last
    # written before the cutoff: an upload right now writes its source, then its marker.
    for key, owned in markers.items():
        if key in sources and key not in removed:
            continue
        old = [marker for marker in owned if marker.modified <= cutoff]
        if not dry_run:
            await asyncio.to_thread(_remove_markers, store, old, cutoff)
        report.count(old)
    return report


def _sources_and_markers(store: BlobStore) -> tuple[dict[str, StoredBlob], dict[str, list[StoredBlob]]]:
    """The sources (`sources/<sha256>`) by key, and their ownership markers by their source's key."""
    sources: dict[str, StoredBlob] = {}
    markers: dict[str, list[StoredBlob]] = defaultdict(list)
    for blob in store.list_blobs(SOURCES_FOLDER):
        if SOURCE_KEY.fullmatch(blob.key):
            sources[blob.key] = blob
        elif owned := OWNER_MARKER_KEY.fullmatch(blob.key):
            markers[source_key(owned.group(1))].append(blob)
    return sources, dict(markers)


def _remove_markers(store: BlobStore, markers: list[StoredBlob], cutoff: datetime) -> None:
    """Delete the markers unless one was written again since it was listed (its tenant storing the source anew)."""
    for marker in markers:
        current = store.stat(marker.key)
        if current is not None and current.modified <= cutoff:
            store.delete(marker.key)


def _has_blobs(store: BlobStore, prefix: str) -> bool:
    return next(iter(store.list_blobs(prefix)), None) is not None


def _remove_source(store: BlobStore, key: str, cutoff: datetime) -> bool:
    """Delete the source unless it was stored again since it was listed (a job being accepted right now)."""
    current = store.stat(key)
    if current is None or current.modified > cutoff:
        return False
    store.delete(key)
    return True


def _remove_run(store: BlobStore, folder: str, blobs: list[StoredBlob]) -> None:
    """The marker goes last: a sweep cut short leaves a folder the next sweep can still name."""
    marker = f"{folder}/{RUN_MARKER}"
    for blob in blobs:
        if blob.key != marker:
            store.delete(blob.key)
    store.delete_prefix(folder)
