"""A batch's blobs: its manifest (the list of sources) and the outcomes each run stored.

Both are canonical JSON, stored under keys that carry their digest, and read back only through a reference
whose digest is checked: a batch run carries references, never the lists.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from docjobs.domain.batching import BatchManifest, JobOutcome, RecordOutcomes, batch_prefix
from docjobs.domain.canonical import canonical_model
from docjobs.domain.errors import FailureCode
from docjobs.domain.models import BlobRef
from docjobs.store.storage import BlobStore, sha256_file

MANIFESTS = "batches/manifests"


def _put_canonical(store: BlobStore, body: bytes, key_of: str) -> BlobRef:
    """Store `body` under `key_of` with `{digest}` filled in."""
    with tempfile.TemporaryDirectory(prefix="batch-") as folder:
        path = Path(folder) / "blob.json"
        path.write_bytes(body)
        return store.put_file(key_of.format(digest=sha256_file(path)), path)


def _read(store: BlobStore, ref: BlobRef) -> bytes:
    with tempfile.TemporaryDirectory(prefix="batch-") as folder:
        path = Path(folder) / "blob.json"
        store.fetch(ref, path, mismatch_code=FailureCode.ARTIFACT_DIGEST_MISMATCH)
        return path.read_bytes()


def store_manifest(store: BlobStore, sources: list[BlobRef]) -> BlobRef:
    """Content-addressed: the same documents in the same order are the same manifest."""
    return _put_canonical(store, canonical_model(BatchManifest(sources=sources)), MANIFESTS + "/{digest}.json")


def read_manifest(store: BlobStore, ref: BlobRef) -> list[BlobRef]:
    return BatchManifest.model_validate_json(_read(store, ref)).sources


def store_outcomes(store: BlobStore, record: RecordOutcomes) -> BlobRef:
    key = f"{batch_prefix(record.batch_id)}/outcomes-{record.run}-" + "{digest}.json"
    return _put_canonical(store, canonical_model(record), key)


def read_outcomes(store: BlobStore, segments: list[BlobRef]) -> list[JobOutcome]:
    outcomes: list[JobOutcome] = []
    for segment in segments:
        outcomes.extend(RecordOutcomes.model_validate_json(_read(store, segment)).outcomes)
    return outcomes
