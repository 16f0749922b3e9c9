"""Blob storage, addressed by key and bound by sha256.

Layout: inputs are content-addressed (`sources/<sha256>`); each job has a folder named from its ID's
digest, and each run of the job's workflow a folder of its own in it (`jobs/<digest>/runs/<run ID>`), so an
ID reused after its run is gone starts clean. There every attempt writes to its own staging key and only a
conditional promotion makes the final `artifact.pdf`. Promotion is create-only: the first artifact wins, the
same digest again is a no-op, a different digest is a conflict. Readers only ever see complete files
(write-then-rename, hard links). A run's first blob is its marker (`run.json`: namespace, workflow and run
ID), which lets the retention sweep (docjobs/temporal/retention.py) ask Temporal whether the run still exists.
Jobs that ended before runs had folders keep their files in the job folder; their statuses name those keys.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, BinaryIO, Protocol
from urllib.parse import quote, urlparse
from urllib.request import url2pathname

from pydantic import field_validator

from docjobs.domain.base import Frozen
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import BlobRef, SourceRef

CHUNK = 1024 * 1024


def chunks_of(handle: IO[bytes]) -> Iterator[bytes]:
    """A file's bytes from where it stands, CHUNK by CHUNK."""
    return iter(lambda: handle.read(CHUNK), b"")


def hashed_copy(chunks: Iterable[bytes], out: IO[bytes] | None = None) -> tuple[str, int]:
    """The sha256 and size of `chunks`, written on to `out` (if given) as they pass: the one file-hashing loop."""
    digest, size = hashlib.sha256(), 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
        if out is not None:
            out.write(chunk)
    return digest.hexdigest(), size


def sha256_file(path: Path) -> str:
    with path.open("rb") as handle:
        return hashed_copy(chunks_of(handle))[0]


def verified_chunks(blob: BinaryIO, sha256: str, *, chunk_size: int = CHUNK) -> Iterator[bytes]:
    """The blob's bytes (it is closed at the end), hashed as they are read, one chunk behind.

    The last chunk is held back until the whole blob has hashed: if it no longer has the recorded `sha256`,
    `artifact.digest_mismatch` is raised instead, so a reader never gets a complete copy of a changed blob.
    """
    digest = hashlib.sha256()
    held = b""
    with blob:
        while chunk := blob.read(chunk_size):
            digest.update(chunk)
            if held:
                yield held
            held = chunk
    if digest.hexdigest() != sha256:
        raise DocJobError(FailureCode.ARTIFACT_DIGEST_MISMATCH, "the stored file does not match its recorded digest")
    if held:
        yield held


SOURCES_FOLDER = "sources"
OWNERS_SUFFIX = ".owners"
SOURCE_KEY = re.compile(r"sources/([0-9a-f]{64})")
OWNER_MARKER_KEY = re.compile(r"sources/([0-9a-f]{64})\.owners/[0-9a-f]{32}")


# What the worker copies out of one file a document child left (a stage's output, a checkpoint). A child may leave
# files up to its RLIMIT_FSIZE (2 GiB), sparse ones at no cost to itself: without a cap the worker would write and
# store every byte of them. A stage's output is bounded by what it was given: a multiple of its inputs, never less
# than the floor, plus an allowance a page (a page burned in as an image at the policies' highest dpi).
LEFT_FILE_FLOOR = 512 * 1024 * 1024
LEFT_FILE_PER_INPUT = 8
LEFT_FILE_PER_PAGE = 16 * 1024 * 1024
_LEFT_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LEFT_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def left_file_cap(input_bytes: int = 0, pages: int = 0) -> int:
    """The most bytes the worker copies out of one file a stage's child left, for a stage given `input_bytes` (the
    sizes of the blobs it fetched, as recorded with their digests: never a size the child could change) and
    `pages` pages (0: not known yet)."""
    return max(LEFT_FILE_FLOOR, LEFT_FILE_PER_INPUT * max(input_bytes, 0)) + LEFT_FILE_PER_PAGE * max(pages, 0)


def _parts_below(path: Path, within: Path) -> tuple[str, ...]:
    """The names leading from `within` to `path` (both made absolute, neither resolved: a link is never followed)."""
    relative = Path(os.path.abspath(path)).relative_to(os.path.abspath(within))  # ValueError if not below it
    return relative.parts


def _open_folders_below(within: Path, names: Iterable[str]) -> int:
    """A descriptor of the folder `within`/`names`..., each name opened in the last with O_NOFOLLOW|O_DIRECTORY: a
    child's link (or anything not a folder) at any depth below `within` is `internal.error`, never followed."""
    fd = os.open(within, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for name in names:
        try:
            inner = os.open(name, _LEFT_FOLDER, dir_fd=fd)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise DocJobError(
                    FailureCode.INTERNAL_ERROR, "a stage left a symbolic link (or a file) for a folder"
                ) from None
            raise
        finally:
            os.close(fd)
        fd = inner
    return fd


def open_left_dir(folder: Path, *, within: Path) -> int:
    """A descriptor of `folder`, a folder at or below `within` (one the worker made, such as an attempt's folder, and
    no child may rename) whose lower parts a document child controls: no link is followed at any depth below
    `within`. List it with `os.scandir(fd)`/`os.listdir(fd)` and open what is in it with `dir_fd=fd` and
    O_NOFOLLOW. The caller closes it."""
    return _open_folders_below(within, _parts_below(folder, within))


def open_left_file(name: str, folder_fd: int) -> int:
    """A descriptor of the file `name` in the folder `folder_fd` (from `open_left_dir`), opened as
    `copy_left_file` opens one: no link followed, non-blocking (a FIFO cannot hold the worker). It may be anything
    but a link: the caller checks what `os.fstat` says of it. The caller closes it."""
    try:
        return os.open(name, _LEFT_FILE, dir_fd=folder_fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise DocJobError(FailureCode.INTERNAL_ERROR, "a stage output is a symbolic link") from None
        raise


def copy_left_file(path: Path, dest: Path, *, max_bytes: int = LEFT_FILE_FLOOR, within: Path | None = None) -> int:
    """Copy a file a document child left to `dest` (a new file), trusting nothing about it, and return its size.

    It is reached from `within` (default: the folder it is in), a folder the worker made, one name at a time
    without following a link: a link at any depth below `within` is refused, not only at the last name
    (`O_NOFOLLOW`; non-blocking, so a FIFO cannot hold the worker). It must be a regular file; what is copied is
    what that open file holds, whatever the path names later. At most `max_bytes` are copied (`left_file_cap`):
    a larger size in `fstat` is refused before a byte is copied, and the bytes actually read are counted, so a
    file that grows while it is copied stops at the cap too (`dest` is then removed). Anything else is
    `internal.error` (a child that was taken over: never a verdict on the document)."""
    base = path.parent if within is None else within
    names = _parts_below(path, base)
    if not names:
        raise ValueError("a file to copy must be below the folder it is reached from")
    folder_fd = _open_folders_below(base, names[:-1])
    try:
        fd = open_left_file(names[-1], folder_fd)
    finally:
        os.close(folder_fd)
    with os.fdopen(fd, "rb") as opened:
        facts = os.fstat(opened.fileno())
        if not stat.S_ISREG(facts.st_mode):
            raise DocJobError(FailureCode.INTERNAL_ERROR, "a stage output is not a regular file")
        too_large = DocJobError(
            FailureCode.INTERNAL_ERROR, f"a stage output is larger than the {max_bytes} bytes it may have"
        )
        if facts.st_size > max_bytes:
            raise too_large
        copied = 0
        with dest.open("xb") as out:
            while chunk := opened.read(min(CHUNK, max_bytes + 1 - copied)):  # one byte past the cap at most
                copied += len(chunk)
                if copied > max_bytes:
                    break
                out.write(chunk)
        if copied > max_bytes:
            dest.unlink()
            raise too_large
    return copied


def source_key(sha256: str) -> str:
    return f"{SOURCES_FOLDER}/{sha256}"


def tenant_digest(tenant: str) -> str:
    """A tenant's name as a path segment (never the name itself)."""
    return hashlib.sha256(tenant.encode()).hexdigest()[:32]


def owners_prefix(sha256: str) -> str:
    """The folder of a source's ownership markers, beside its blob: `sources/<sha256>.owners/`."""
    return f"{source_key(sha256)}{OWNERS_SUFFIX}"


def owner_marker_key(sha256: str, tenant: str) -> str:
    """The marker that says `tenant` stored the source `sha256` (an empty blob: its existence is the record)."""
    return f"{owners_prefix(sha256)}/{tenant_digest(tenant)}"


def record_owner(store: BlobStore, sha256: str, tenant: str) -> None:
    """Record that `tenant` stored the source `sha256`: after the source itself, and written every time (its
    time is renewed, so the retention sweep never takes the marker of a source being accepted right now)."""
    with tempfile.TemporaryDirectory(prefix="docjobs-owner-") as tmp:
        marker = Path(tmp) / "owner"
        marker.touch()
        store.put_file(owner_marker_key(sha256, tenant), marker)


def owned_source(store: BlobStore, sha256: str, tenant: str) -> StoredBlob | None:
    """The source `sha256` if `tenant` stored it, else None: a source another tenant stored and one nobody
    stored answer alike, after the same work (the marker and the blob are both looked up on every path)."""
    marked = store.exists(owner_marker_key(sha256, tenant))
    stored = store.stat(source_key(sha256))
    return stored if marked and stored is not None else None


def blob_uri(storage_url: str, key: str) -> str:
    """The URI a caller names the blob `key` of the store `storage_url` by (`DocumentJobInput.source.uri`)."""
    return f"{storage_url.rstrip('/')}/{quote(key) if storage_url.startswith('file:') else key}"


def key_in_store(storage_url: str, uri: str) -> str:
    """The key of the blob `uri` names in the store `storage_url` names (`file:///root` or `s3://bucket/prefix`);
    `source.outside_store` when it names no blob of that store."""
    store, named = urlparse(storage_url), urlparse(uri)
    outside = DocJobError(FailureCode.SOURCE_OUTSIDE_STORE)
    if named.scheme != store.scheme or named.netloc != store.netloc or named.query or named.fragment or named.params:
        raise outside
    if store.scheme == "file":
        root, path = url2pathname(store.path).rstrip("/"), url2pathname(named.path)
    else:
        root, path = store.path.rstrip("/"), named.path
    if not path.startswith(f"{root}/"):
        raise outside
    key = path[len(root) + 1 :]
    if not key or any(part in ("", ".", "..") for part in key.split("/")):
        raise outside
    return key


INTERNAL_FOLDERS = ("sources", "jobs", "templates", "batches")  # docjobs' own layout: no caller's key is there


def adopt_source(
    store: BlobStore, key: str, named: SourceRef, workdir: Path, max_bytes: int, *, tenant: str
) -> BlobRef:
    """The caller's blob `key`, copied into the content-addressed layout (`sources/<sha256>`) with its digest
    and size checked on the way, and recorded as `tenant`'s; a blob already there is checked in place.

    A source in that layout may be named only by a tenant that stored it; a key in another of docjobs' own
    folders (a run's artifact, a template, a manifest) never. Both answer `source.missing`, as a blob nobody
    stored does, after the same look-ups (`owned_source`)."""
    missing = DocJobError(FailureCode.SOURCE_MISSING, "the source blob is missing")
    content_addressed = SOURCE_KEY.fullmatch(key)
    if content_addressed or key.split("/", 1)[0] in INTERNAL_FOLDERS:
        digest = content_addressed.group(1) if content_addressed else named.sha256
        stored = owned_source(store, digest, tenant)
        if stored is None or not content_addressed:
            raise missing
    else:
        stored = store.stat(key)
    if stored is None:
        raise missing
    if stored.size > max_bytes:
        raise DocJobError(FailureCode.INPUT_TOO_LARGE, f"the input is larger than {max_bytes} bytes")
    if stored.size != named.size:
        raise DocJobError(
            FailureCode.SOURCE_DIGEST_MISMATCH, "the stored source does not have the size it was named with"
        )
    ref = BlobRef(key=key, sha256=named.sha256, size=named.size)
    if key == source_key(named.sha256):
        store.verify(ref, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)
        return ref
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir, prefix="adopt-") as folder:
        copy = Path(folder) / "source"
        store.fetch(ref, copy, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)
        adopted = store.put_file(source_key(named.sha256), copy)
    record_owner(store, named.sha256, tenant)
    return adopted


def job_prefix(job_id: str) -> str:
    """A job's folder: derived from its ID so that tenant keys never become paths."""
    return f"jobs/{hashlib.sha256(job_id.encode()).hexdigest()[:32]}"


RUNS_FOLDER = "runs"
RUN_MARKER = "run.json"
TEXT_BLOB = "text.json"
CONVERTED_BLOB = "converted.pdf"  # an office input's PDF, beside the evidence that binds it


class RunScope(Frozen):
    """One run of a job's workflow, as Temporal names it to the activity (never as a caller does)."""

    namespace: str
    workflow_id: str
    run_id: str

    @field_validator("run_id")
    @classmethod
    def _canonical_uuid(cls, value: str) -> str:
        if str(uuid.UUID(value)) != value:  # Temporal's run IDs are UUIDs: nothing else becomes a path
            raise ValueError("a run ID is a UUID in canonical form")
        return value

    @property
    def prefix(self) -> str:
        return f"{job_prefix(self.workflow_id)}/{RUNS_FOLDER}/{self.run_id}"


def run_marker_key(run: RunScope) -> str:
    return f"{run.prefix}/{RUN_MARKER}"


def staging_prefix(run: RunScope) -> str:
    return f"{run.prefix}/staging"


def staging_key(run: RunScope, stage: str, attempt: int, suffix: str = ".pdf") -> str:
    """Unique per attempt (and per worker run of an attempt), so attempts never overwrite each other."""
    return f"{staging_prefix(run)}/{stage}-a{attempt}-{uuid.uuid4().hex[:12]}{suffix}"


def ocr_ranges_prefix(run: RunScope) -> str:
    """Where OCR run in page ranges keeps its OCR'd ranges (deleted with the staged attempts)."""
    return f"{run.prefix}/ocr"


def ocr_range_key(run: RunScope, first: int, last: int, attempt: int) -> str:
    """The OCR'd pages `first` to `last` of a long document, under a key of the attempt's own (and of the worker
    run of that attempt), as staging keys are: a stale attempt that outlived its lease never overwrites the range
    the workflow recorded, which is the one the merge takes (by that key and its digest)."""
    return f"{ocr_ranges_prefix(run)}/{first}-{last}-a{attempt}-{uuid.uuid4().hex[:12]}.pdf"


def ocr_checkpoints_prefix(run: RunScope, first: int, last: int) -> str:
    """Where the page checkpoints of the range `first` to `last` go: what a lost attempt had read, for the next."""
    return f"{ocr_ranges_prefix(run)}/pages/{first}-{last}"


def ocr_checkpoint_key(run: RunScope, first: int, last: int, name: str, attempt: int) -> str:
    """A page checkpoint `name` (`<page>-<image digest>.json`) of the range, under a key of the attempt's own."""
    return f"{ocr_checkpoints_prefix(run, first, last)}/a{attempt}-{uuid.uuid4().hex[:12]}-{name}"


def artifact_key(run: RunScope) -> str:
    return f"{run.prefix}/artifact.pdf"


def evidence_key(run: RunScope) -> str:
    """The signed evidence envelope of the run's terminal state."""
    return f"{run.prefix}/evidence.json"


def commitment_salt_key(run: RunScope) -> str:
    """The salt of the run's evidence commitments: kept beside the envelope, never served to anyone."""
    return f"{run.prefix}/commitment.salt"


ARCHIVES_FOLDER = "archives"  # archives' versions (docjobs/domain/archive.py): never swept by the jobs' retention


def archive_prefix(archive_id: str) -> str:
    """An archive's folder: derived from its ID, as a job's is, so that tenant keys never become paths."""
    return f"{ARCHIVES_FOLDER}/{hashlib.sha256(archive_id.encode()).hexdigest()[:32]}"


def archive_key(archive_id: str, number: int, suffix: str) -> str:
    """Where version `number` of an archive keeps a file: `.pdf`, `.token` (its newest timestamp), `.json` (the
    version's record, written create-only last: the version exists once it does)."""
    return f"{archive_prefix(archive_id)}/v{number}{suffix}"


def archive_attempt_key(archive_id: str, number: int, attempt: int, suffix: str) -> str:
    """An attempt's own file for version `number` (an attempt never overwrites another's)."""
    return f"{archive_prefix(archive_id)}/v{number}/a{attempt}-{uuid.uuid4().hex[:12]}{suffix}"


def text_key(run: RunScope) -> str:
    """The searchable text of every page (OCR), beside the artifact."""
    return f"{run.prefix}/{TEXT_BLOB}"


def converted_key(run: RunScope) -> str:
    """An office input's PDF as LibreOffice made it, kept for the evidence's binding to be checked later."""
    return f"{run.prefix}/{CONVERTED_BLOB}"


def beside(key: str, name: str) -> str:
    """The key of `name` in the folder of `key` (a run's text beside its evidence, in either layout)."""
    return f"{key.rpartition('/')[0]}/{name}"


def mark_run(store: BlobStore, run: RunScope) -> None:
    """Write the run's marker unless it is there: before the run's first blob, so the sweep can name every run
    folder. Rewriting it is harmless (same identity, same bytes)."""
    key = run_marker_key(run)
    if store.exists(key):
        return
    with tempfile.TemporaryDirectory(prefix="docjobs-run-") as tmp:
        path = Path(tmp) / RUN_MARKER
        path.write_text(run.model_dump_json())
        store.put_file(key, path)


@dataclass(frozen=True)
class StoredBlob:
    """A blob as a listing sees it: for the retention sweep's accounting and its grace period."""

    key: str
    size: int
    modified: datetime


class BlobStore(Protocol):
    def put_file(self, key: str, path: Path) -> BlobRef: ...

    def put_hashed(self, key: str, path: Path, sha256: str) -> BlobRef:
        """Store a file whose writer hashed it while writing it and hands it over (it may be moved away):
        nothing reads it to hash it again. The caller vouches for `sha256`; S3 checks it on upload."""
        ...

    def fetch(self, ref: BlobRef, dest: Path, *, mismatch_code: FailureCode) -> None:
        """Copy the blob to `dest` and check its digest; raise `mismatch_code` when it differs."""
        ...

    def verify(self, ref: BlobRef, *, mismatch_code: FailureCode) -> None:
        """Check the stored blob still has its digest, without copying it."""
        ...

    def promote(self, staged: BlobRef, final_key: str) -> tuple[BlobRef, bool]:
        """Create `final_key` from `staged` unless it exists; returns the final ref and whether it was created."""
        ...

    def delete_prefix(self, prefix: str) -> int: ...

    def delete(self, key: str) -> None:
        """Delete one blob (nothing happens if it is not there)."""
        ...

    def list_blobs(self, prefix: str) -> Iterator[StoredBlob]:
        """Every blob in the folder `prefix` (and its subfolders), in no particular order."""
        ...

    def stat(self, key: str) -> StoredBlob | None:
        """The blob's size and last write time, or None if there is none."""
        ...

    def exists(self, key: str) -> bool: ...

    def open(self, key: str) -> BinaryIO: ...


class FileBlobStore:
    """The embedded default: a folder on the local filesystem (shared by all workers of one machine)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise ValueError("blob key escapes the store")
        return path

    def put_file(self, key: str, path: Path) -> BlobRef:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=".incoming-")
        try:
            with os.fdopen(fd, "wb") as out, path.open("rb") as src:
                sha256, size = hashed_copy(chunks_of(src), out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp_name, target)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
        return BlobRef(key=key, sha256=sha256, size=size)

    def put_hashed(self, key: str, path: Path, sha256: str) -> BlobRef:
        """Moved into place (one rename) when `path` is on the store's filesystem, else copied."""
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            os.fchmod(fd, 0o600)  # as `put_file` writes them
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(path, target)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise
            stored = self.put_file(key, path)
            if stored.sha256 != sha256:
                raise DocJobError(FailureCode.INTERNAL_ERROR, "a file changed while it was being stored") from None
        return BlobRef(key=key, sha256=sha256, size=size)

    def fetch(self, ref: BlobRef, dest: Path, *, mismatch_code: FailureCode) -> None:
        source = self._path(ref.key)
        try:
            shutil.copyfile(source, dest)
        except FileNotFoundError:
            raise DocJobError(FailureCode.SOURCE_MISSING, "a stored blob is missing") from None
        if sha256_file(dest) != ref.sha256:
            raise DocJobError(mismatch_code)

    def verify(self, ref: BlobRef, *, mismatch_code: FailureCode) -> None:
        try:
            actual = sha256_file(self._path(ref.key))
        except FileNotFoundError:
            raise DocJobError(FailureCode.SOURCE_MISSING, "a stored blob is missing") from None
        if actual != ref.sha256:
            raise DocJobError(mismatch_code)

    def promote(self, staged: BlobRef, final_key: str) -> tuple[BlobRef, bool]:
        staged_path = self._path(staged.key)
        self.verify(staged, mismatch_code=FailureCode.ARTIFACT_DIGEST_MISMATCH)
        final_path = self._path(final_key)
        final_path.parent.mkdir(parents=True, exist_ok=True)
        final = BlobRef(key=final_key, sha256=staged.sha256, size=staged.size)
        try:
            os.link(staged_path, final_path)  # atomic and create-only: the conditional write
            return final, True
        except FileExistsError:
            if sha256_file(final_path) == staged.sha256:
                return final, False
            raise DocJobError(FailureCode.PUBLISH_CONFLICT) from None

    def delete_prefix(self, prefix: str) -> int:
        if not prefix.strip("/"):
            raise ValueError("refusing to delete the whole store")
        folder = self._path(prefix)
        if not folder.exists():
            return 0
        count = sum(1 for item in folder.rglob("*") if item.is_file())
        shutil.rmtree(folder)
        return count

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def list_blobs(self, prefix: str) -> Iterator[StoredBlob]:
        root = self.root.resolve()
        for item in self._path(prefix).rglob("*"):
            if blob := self.stat(item.relative_to(root).as_posix()):
                yield blob

    def stat(self, key: str) -> StoredBlob | None:
        path = self._path(key)
        try:
            info = path.stat()
        except FileNotFoundError:
            return None  # or removed meanwhile
        if not path.is_file():
            return None
        return StoredBlob(key, info.st_size, datetime.fromtimestamp(info.st_mtime, UTC))

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def open(self, key: str) -> BinaryIO:
        try:
            return self._path(key).open("rb")
        except FileNotFoundError:
            raise DocJobError(FailureCode.SOURCE_MISSING, "a stored blob is missing") from None
