"""One blob-store suite over both backends: a folder (`file://`) and S3 (`s3://`, a real moto server).

The S3 backend talks HTTP to moto's standalone server on a free loopback port, configured the standard boto3
way (AWS_ENDPOINT_URL, AWS_REGION, ...), exactly as a worker would be against a real bucket.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.exceptions import ClientError, IncompleteReadError  # type: ignore[import-untyped]

from docjobs.domain.errors import DocJobError, FailureCode, Outcome
from docjobs.domain.models import BlobRef
from docjobs.store import s3store
from docjobs.store.s3store import S3BlobStore, open_blob_store
from docjobs.store.storage import (
    TEXT_BLOB,
    BlobStore,
    FileBlobStore,
    RunScope,
    artifact_key,
    beside,
    evidence_key,
    mark_run,
    ocr_range_key,
    ocr_ranges_prefix,
    run_marker_key,
    staging_key,
    staging_prefix,
    text_key,
    verified_chunks,
)
from docjobs.temporal.retention import read_marker, run_folders
from tests.conftest import BUCKET, REGION, aws_environment, free_port

MB = 1024 * 1024


@pytest.fixture
def s3(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A raw boto3 client on the moto server (the environment is set for the store too)."""
    aws_environment(monkeypatch, moto_endpoint)
    return boto3.client("s3", region_name=REGION)


@dataclass
class Backend:
    name: str
    store: BlobStore
    tamper: Callable[[str, bytes], None]  # replace a stored blob's bytes behind the store's back


@pytest.fixture(params=["file", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "file":
        root = tmp_path / "blobs"

        def tamper_file(key: str, data: bytes) -> None:
            with (root / key).open("r+b") as handle:  # in place: a promoted artifact is a hard link
                handle.write(data)
                handle.truncate()

        return Backend("file", open_blob_store(root.as_uri()), tamper_file)
    client = request.getfixturevalue("s3")
    prefix = f"run-{uuid.uuid4().hex[:12]}/blobs"

    def tamper_s3(key: str, data: bytes) -> None:
        # Same metadata digest as before: the store must hash the bytes, not trust the metadata.
        head = client.head_object(Bucket=BUCKET, Key=f"{prefix}/{key}")
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{key}", Body=data, Metadata=head["Metadata"])

    return Backend("s3", open_blob_store(f"s3://{BUCKET}/{prefix}"), tamper_s3)


def run_of(job_id: str) -> RunScope:
    """A run of `job_id` as Temporal would name it to an activity."""
    return RunScope(namespace="default", workflow_id=job_id, run_id=str(uuid.uuid4()))


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def read_blob(store: BlobStore, key: str) -> bytes:
    with store.open(key) as handle:
        return handle.read()


def raises_code(code: str, call: Callable[[], object]) -> DocJobError:
    with pytest.raises(DocJobError) as caught:
        call()
    assert caught.value.code == code, caught.value
    return caught.value


# --- the shared suite -----------------------------------------------------------------------------------


def test_round_trip_with_digest(backend: Backend, tmp_path: Path) -> None:
    data = b"%PDF-1.7\n" + os.urandom(300_000)
    ref = backend.store.put_file("sources/abc", write(tmp_path / "in.pdf", data))
    assert ref == BlobRef(key="sources/abc", sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    assert backend.store.exists("sources/abc")
    assert not backend.store.exists("sources/other")
    assert not backend.store.exists("sources")  # a folder is not a blob
    backend.store.fetch(ref, tmp_path / "out.pdf", mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)
    assert (tmp_path / "out.pdf").read_bytes() == data
    backend.store.verify(ref, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)
    assert read_blob(backend.store, "sources/abc") == data
    empty = backend.store.put_file("sources/empty", write(tmp_path / "empty", b""))
    assert empty.size == 0
    backend.store.verify(empty, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)
    again = backend.store.put_file("sources/abc", write(tmp_path / "v2.pdf", b"%PDF-replaced"))  # plain put replaces
    assert read_blob(backend.store, "sources/abc") == b"%PDF-replaced"
    backend.store.verify(again, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)


def test_missing_blob_is_source_missing(backend: Backend, tmp_path: Path) -> None:
    ghost = BlobRef(key="sources/ghost", sha256="0" * 64, size=1)
    raises_code(
        "source.missing",
        lambda: backend.store.fetch(ghost, tmp_path / "x", mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH),
    )
    raises_code("source.missing", lambda: backend.store.verify(ghost, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH))
    assert not (tmp_path / "x").exists()
    final_key = artifact_key(run_of("t/ghost"))
    raises_code("source.missing", lambda: backend.store.promote(ghost, final_key))
    assert not backend.store.exists(final_key)


def test_tampered_blob_is_detected(backend: Backend, tmp_path: Path) -> None:
    data = b"%PDF-original" * 1000
    ref = backend.store.put_file("sources/t", write(tmp_path / "in.pdf", data))
    backend.tamper("sources/t", b"%PDF-tampered" * 1000)  # same size, different bytes
    raises_code(
        "source.digest_mismatch",
        lambda: backend.store.fetch(ref, tmp_path / "out.pdf", mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH),
    )
    raises_code(
        "source.digest_mismatch", lambda: backend.store.verify(ref, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)
    )
    raises_code(
        "artifact.digest_mismatch",
        lambda: backend.store.verify(ref, mismatch_code=FailureCode.ARTIFACT_DIGEST_MISMATCH),
    )
    # a tampered staged artifact is never published
    final_key = artifact_key(run_of("t/tampered"))
    raises_code("artifact.digest_mismatch", lambda: backend.store.promote(ref, final_key))
    assert not backend.store.exists(final_key)


def test_a_stream_holds_back_its_last_chunk_until_the_digest_is_known(backend: Backend, tmp_path: Path) -> None:
    """What the API sends: all of an intact blob; of a changed one, never the last chunk, then the error."""
    data = os.urandom(3 * 1000 + 17)
    ref = backend.store.put_file("sources/s", write(tmp_path / "in.pdf", data))
    chunks = list(verified_chunks(backend.store.open(ref.key), ref.sha256, chunk_size=1000))
    assert b"".join(chunks) == data and len(chunks) == 4
    backend.tamper(ref.key, data[:-1] + bytes([data[-1] ^ 1]))  # only the last byte differs
    sent: list[bytes] = []
    with pytest.raises(DocJobError) as caught:
        sent.extend(verified_chunks(backend.store.open(ref.key), ref.sha256, chunk_size=1000))
    assert caught.value.code == "artifact.digest_mismatch" and b"".join(sent) == data[:3000]


def test_promotion_is_create_only(backend: Backend, tmp_path: Path) -> None:
    store = backend.store
    first, second = write(tmp_path / "a.pdf", b"%PDF-first"), write(tmp_path / "b.pdf", b"%PDF-second")
    run = run_of("t/k")
    winner = store.put_file(staging_key(run, "render", 1), first)
    same = store.put_file(staging_key(run, "render", 2), first)
    loser = store.put_file(staging_key(run, "render", 3), second)
    final, created = store.promote(winner, artifact_key(run))
    assert created and final == BlobRef(key=artifact_key(run), sha256=winner.sha256, size=winner.size)
    assert store.promote(winner, artifact_key(run)) == (final, False)  # a retried publish: a no-op
    assert store.promote(same, artifact_key(run)) == (final, False)  # same digest: a no-op
    raises_code("publish.conflict", lambda: store.promote(loser, artifact_key(run)))
    assert read_blob(store, artifact_key(run)) == b"%PDF-first"
    store.verify(final, mismatch_code=FailureCode.ARTIFACT_DIGEST_MISMATCH)
    # the artifact does not depend on its staging blob
    assert store.delete_prefix(staging_prefix(run)) == 3
    store.verify(final, mismatch_code=FailureCode.ARTIFACT_DIGEST_MISMATCH)


def test_a_stale_chunk_attempt_never_overwrites_the_recorded_chunk(backend: Backend, tmp_path: Path) -> None:
    """Two attempts at the same page range (the first outlived its lease): each stores under a key of its own,
    so the chunk the workflow recorded keeps its bytes whichever attempt writes last."""
    store, run = backend.store, run_of("t/long")
    recorded = store.put_file(ocr_range_key(run, 17, 32, 2), write(tmp_path / "new.pdf", b"%PDF-attempt-2"))
    stale = store.put_file(ocr_range_key(run, 17, 32, 1), write(tmp_path / "old.pdf", b"%PDF-attempt-1"))
    assert stale.key != recorded.key and recorded.key.startswith(f"{ocr_ranges_prefix(run)}/17-32-a2-")
    store.verify(recorded, mismatch_code=FailureCode.ARTIFACT_DIGEST_MISMATCH)
    assert read_blob(store, recorded.key) == b"%PDF-attempt-2"
    assert store.delete_prefix(ocr_ranges_prefix(run)) == 2  # publish removes both with the run's chunks


def race_promotions(store: BlobStore, staged: list[BlobRef], final_key: str) -> dict[int, object]:
    """Promote every staged blob to `final_key` at once, one thread each; the outcome (result or code) of each."""
    barrier = threading.Barrier(len(staged))
    outcomes: dict[int, object] = {}

    def publish(n: int) -> None:
        barrier.wait()
        try:
            outcomes[n] = store.promote(staged[n], final_key)
        except DocJobError as error:
            outcomes[n] = error.code

    threads = [threading.Thread(target=publish, args=(n,)) for n in range(len(staged))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return outcomes


def test_racing_promotions_have_exactly_one_winner(backend: Backend, tmp_path: Path) -> None:
    store = backend.store
    for round_ in range(8):
        job = run_of(f"t/race-{round_}")
        contents = [f"%PDF-attempt-{n}-".encode() + os.urandom(200_000) for n in range(2)]
        staged = [
            store.put_file(staging_key(job, "render", n), write(tmp_path / f"r{round_}-{n}.pdf", contents[n]))
            for n in range(2)
        ]
        outcomes = race_promotions(store, staged, artifact_key(job))
        winners = [n for n, outcome in outcomes.items() if isinstance(outcome, tuple)]
        assert len(winners) == 1, outcomes
        (winner,) = winners
        final = BlobRef(key=artifact_key(job), sha256=staged[winner].sha256, size=staged[winner].size)
        assert outcomes[winner] == (final, True)
        assert outcomes[1 - winner] == "publish.conflict"
        assert read_blob(store, artifact_key(job)) == contents[winner]
        store.verify(final, mismatch_code=FailureCode.ARTIFACT_DIGEST_MISMATCH)


def test_delete_prefix_removes_only_that_folder(backend: Backend, tmp_path: Path) -> None:
    store = backend.store
    blob = write(tmp_path / "b", b"blob")
    inside = ["jobs/j1/staging/a.pdf", "jobs/j1/staging/b.pdf", "jobs/j1/staging/sub/c.pdf"]
    outside = ["jobs/j1/artifact.pdf", "jobs/j1/staging-other/d.pdf", "jobs/j1/stagingx", "jobs/j2/staging/e.pdf"]
    for key in inside + outside:
        store.put_file(key, blob)
    assert store.delete_prefix("jobs/j1/staging") == 3
    assert [store.exists(key) for key in inside] == [False] * 3
    assert [store.exists(key) for key in outside] == [True] * 4
    assert store.delete_prefix("jobs/j1/staging") == 0
    assert store.delete_prefix("jobs/none") == 0


def test_each_run_of_a_job_id_has_its_own_folder(backend: Backend, tmp_path: Path) -> None:
    """A job ID reused after its run is gone publishes into a new folder: no conflict, nothing of the old run."""
    store = backend.store
    old, new = run_of("t/reused"), run_of("t/reused")
    job_digest = hashlib.sha256(b"t/reused").hexdigest()[:32]
    assert (old.prefix, new.prefix) == (f"jobs/{job_digest}/runs/{old.run_id}", f"jobs/{job_digest}/runs/{new.run_id}")
    for run in (old, new):
        keys = [artifact_key(run), evidence_key(run), text_key(run), run_marker_key(run), staging_key(run, "ocr", 2)]
        assert all(key.startswith(f"{run.prefix}/") for key in keys), keys
    assert staging_key(old, "ocr", 2).startswith(f"{staging_prefix(old)}/ocr-a2-")
    assert beside(evidence_key(old), TEXT_BLOB) == text_key(old)
    assert beside(f"jobs/{job_digest}/evidence.json", TEXT_BLOB) == f"jobs/{job_digest}/text.json"  # older jobs
    staged_keys = {}
    for run, data in ((old, b"%PDF-old"), (new, b"%PDF-new")):
        mark_run(store, run)
        staged = store.put_file(staging_key(run, "render", 1), write(tmp_path / "staged.pdf", data))
        assert store.promote(staged, artifact_key(run))[1]  # created: the old run's artifact is not in the way
        staged_keys[run.run_id] = staged.key
    assert read_blob(store, artifact_key(old)) == b"%PDF-old" and read_blob(store, artifact_key(new)) == b"%PDF-new"

    folders = run_folders(store)
    assert sorted(folders) == sorted([old.prefix, new.prefix])
    for run in (old, new):
        expected = {run_marker_key(run), artifact_key(run), staged_keys[run.run_id]}
        assert {blob.key for blob in folders[run.prefix]} == expected
    assert read_marker(store, old.prefix, folders[old.prefix]) == old
    assert read_marker(store, new.prefix, folders[new.prefix]) == new
    # A marker copied into another run's folder names a run whose keys are elsewhere: it is not believed.
    with store.open(run_marker_key(old)) as marker:
        store.put_file(run_marker_key(new), write(tmp_path / "copied.json", marker.read()))
    assert read_marker(store, new.prefix, folders[new.prefix]) is None


def test_run_ids_are_canonical_uuids() -> None:
    good = str(uuid.uuid4())
    assert RunScope(namespace="default", workflow_id="t/x", run_id=good).run_id == good
    for bad in ("..", "../../sources", good.upper(), good.replace("-", ""), f"{good}/x", ""):
        with pytest.raises(ValueError):
            RunScope(namespace="default", workflow_id="t/x", run_id=bad)


def test_listing_and_deleting_blobs(backend: Backend, tmp_path: Path) -> None:
    store = backend.store
    before = time.time()
    sizes = {"jobs/l1/a.pdf": 10, "jobs/l1/sub/b.json": 0, "jobs/l1x/c.pdf": 3, "sources/l1": 7}
    for key, size in sizes.items():
        store.put_file(key, write(tmp_path / "blob", b"x" * size))
    listed = list(store.list_blobs("jobs/l1"))
    assert sorted((blob.key, blob.size) for blob in listed) == [("jobs/l1/a.pdf", 10), ("jobs/l1/sub/b.json", 0)]
    assert all(before - 2 <= blob.modified.timestamp() <= time.time() + 2 for blob in listed)
    assert list(store.list_blobs("jobs/none")) == []
    assert store.stat("jobs/l1/a.pdf") in listed and store.stat("jobs/l1") is None and store.stat("jobs/no") is None
    store.delete("jobs/l1/a.pdf")
    store.delete("jobs/l1/a.pdf")  # already gone: nothing happens
    assert not store.exists("jobs/l1/a.pdf") and store.exists("jobs/l1x/c.pdf")
    assert [blob.key for blob in store.list_blobs("jobs/l1")] == ["jobs/l1/sub/b.json"]


def test_keys_cannot_escape_the_store(backend: Backend, tmp_path: Path) -> None:
    blob = write(tmp_path / "b", b"blob")
    for key in ("../outside", "jobs/../../outside"):
        with pytest.raises(ValueError):
            backend.store.put_file(key, blob)


def test_round_trip_timing(backend: Backend, tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    """put + fetch of a 1 MB blob, median of 20 (reported, not asserted: it feeds the benchmark)."""
    source = write(tmp_path / "1mb", os.urandom(MB))
    times = []
    for n in range(20):
        start = time.perf_counter()
        ref = backend.store.put_file(f"bench/{n}", source)
        backend.store.fetch(ref, tmp_path / "fetched", mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH)
        times.append(time.perf_counter() - start)
    median_ms = statistics.median(times) * 1000
    record_property(f"round_trip_1mb_median_ms_{backend.name}", round(median_ms, 2))
    print(f"\n{backend.name}: 1 MB put+fetch median of 20 = {median_ms:.2f} ms")


# --- S3 only --------------------------------------------------------------------------------------------


def s3_store(prefix: str = "", **options: Any) -> S3BlobStore:
    return S3BlobStore(f"s3://{BUCKET}/{prefix or 'run-' + uuid.uuid4().hex[:12]}", **options)


def test_s3_objects_are_private_and_carry_their_digest(s3: Any, tmp_path: Path) -> None:
    prefix = f"private-{uuid.uuid4().hex[:8]}"
    store = s3_store(prefix)
    ref = store.put_file("sources/p", write(tmp_path / "p", b"%PDF-private"))
    store.promote(ref, "jobs/p/artifact.pdf")
    for key in (f"{prefix}/sources/p", f"{prefix}/jobs/p/artifact.pdf"):
        assert s3.head_object(Bucket=BUCKET, Key=key)["Metadata"] == {"sha256": ref.sha256}
        acl = s3.get_object_acl(Bucket=BUCKET, Key=key)
        owner = {"ID": acl["Owner"]["ID"], "Type": "CanonicalUser"}
        assert acl["Grants"] == [{"Grantee": owner, "Permission": "FULL_CONTROL"}]  # no AllUsers, no AuthenticatedUsers


@pytest.mark.parametrize(("sse", "kms_key_id"), [("AES256", None), ("aws:kms", None), ("aws:kms", "alias/docjobs")])
def test_s3_server_side_encryption_is_requested(s3: Any, tmp_path: Path, sse: str, kms_key_id: str | None) -> None:
    prefix = f"sse-{uuid.uuid4().hex[:8]}"
    store = open_blob_store(f"s3://{BUCKET}/{prefix}", sse=sse, kms_key_id=kms_key_id)
    ref = store.put_file("staged", write(tmp_path / "s", b"%PDF-secret"))
    store.promote(ref, "final")
    for key in ("staged", "final"):
        head = s3.head_object(Bucket=BUCKET, Key=f"{prefix}/{key}")
        assert head["ServerSideEncryption"] == sse
        assert head.get("SSEKMSKeyId") == kms_key_id


def test_s3_unreachable_is_storage_unavailable(s3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    prefix = f"unreachable-{uuid.uuid4().hex[:8]}"
    good = s3_store(prefix)
    ref = good.put_file("sources/u", write(tmp_path / "u", b"%PDF-u"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")
    store = s3_store(prefix)
    calls: list[Callable[[], object]] = [
        lambda: store.put_file("sources/u2", tmp_path / "u"),
        lambda: store.fetch(ref, tmp_path / "f", mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH),
        lambda: store.verify(ref, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH),
        lambda: store.promote(ref, "jobs/u/artifact.pdf"),
        lambda: store.exists("sources/u"),
        lambda: store.open("sources/u"),
        lambda: store.delete_prefix("sources"),
        lambda: store.delete("sources/u"),
        lambda: list(store.list_blobs("sources")),
        lambda: store.stat("sources/u"),
    ]
    for call in calls:
        error = raises_code("storage.unavailable", call)
        assert error.outcome is Outcome.RETRY
        assert "sources" not in str(error) and "127.0.0.1" not in str(error)  # no keys, no endpoint
    assert not (tmp_path / "f").exists()


def test_s3_open_missing_is_source_missing(s3: Any) -> None:
    raises_code("source.missing", lambda: s3_store().open("sources/none"))


def test_s3_delete_prefix_pages_and_batches(s3: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(s3store, "LIST_PAGE", 3)
    monkeypatch.setattr(s3store, "DELETE_BATCH", 2)
    store = s3_store()
    blob = write(tmp_path / "b", b"x")
    for n in range(7):
        store.put_file(f"jobs/many/staging/{n}", blob)
    store.put_file("jobs/many/artifact.pdf", blob)
    assert store.delete_prefix("jobs/many/staging") == 7
    assert store.exists("jobs/many/artifact.pdf")


def test_open_blob_store_picks_the_backend(s3: Any, tmp_path: Path) -> None:
    folder = tmp_path / "with space"
    file_store = open_blob_store(folder.as_uri())
    assert isinstance(file_store, FileBlobStore) and file_store.root == folder  # percent-decoded
    s3_backend = open_blob_store(f"s3://{BUCKET}/a/b/", sse="AES256")
    assert isinstance(s3_backend, S3BlobStore) and (s3_backend.bucket, s3_backend.prefix) == (BUCKET, "a/b")
    bare = open_blob_store(f"s3://{BUCKET}")
    assert isinstance(bare, S3BlobStore) and bare.prefix == ""
    for url in ("http://example.com/x", "/plain/path", "gs://bucket/x", "s3:///no-bucket", "s3://b/../x"):
        with pytest.raises(ValueError):
            open_blob_store(url)
    with pytest.raises(ValueError):
        open_blob_store(f"s3://{BUCKET}/x", sse="aws:fancy")
    with pytest.raises(ValueError):
        open_blob_store(f"s3://{BUCKET}/x", sse="AES256", kms_key_id="alias/k")


# --- error mapping, with a scripted client (what moto cannot be made to answer) -------------------------


def client_error(code: str, status: int, operation: str = "GetObject") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation
    )


class ScriptedClient:
    """Answers each call from a script: an exception to raise or a value to return, in order per method."""

    def __init__(self, real: Any, **script: list[Any]) -> None:
        self.real = real
        self.script = script
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(**kwargs: Any) -> Any:
            self.calls.append(name)
            if self.script.get(name):
                answer = self.script[name].pop(0)
                if isinstance(answer, Exception):
                    raise answer
                return answer
            return getattr(self.real, name)(**kwargs)

        return call


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (client_error("SlowDown", 503), "storage.unavailable"),
        (client_error("InternalError", 500), "storage.unavailable"),
        (client_error("AccessDenied", 403), "storage.unavailable"),
        (client_error("TooManyRequestsException", 429), "storage.unavailable"),
        (client_error("RequestTimeout", 400), "storage.unavailable"),
        (client_error("NoSuchKey", 404), "source.missing"),
    ],
)
def test_s3_error_mapping(s3: Any, tmp_path: Path, error: ClientError, code: str) -> None:
    ref = BlobRef(key="sources/x", sha256="0" * 64, size=1)
    store = s3_store(client=ScriptedClient(s3, get_object=[error]))
    raises_code(code, lambda: store.verify(ref, mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH))


def test_s3_unexpected_client_errors_are_not_disguised(s3: Any) -> None:
    store = s3_store(client=ScriptedClient(s3, head_object=[client_error("InvalidArgument", 400, "HeadObject")]))
    with pytest.raises(ClientError):
        store.exists("sources/x")


def test_s3_connection_lost_mid_body_is_not_a_digest_mismatch(s3: Any, tmp_path: Path) -> None:
    class BrokenBody:
        def read(self, size: int = -1) -> bytes:
            raise IncompleteReadError(actual_bytes=1, expected_bytes=2)

        def close(self) -> None:
            pass

    ref = BlobRef(key="sources/x", sha256="0" * 64, size=2)
    store = s3_store(client=ScriptedClient(s3, get_object=[{"Body": BrokenBody()}, {"Body": BrokenBody()}]))
    raises_code(
        "storage.unavailable",
        lambda: store.fetch(ref, tmp_path / "f", mismatch_code=FailureCode.SOURCE_DIGEST_MISMATCH),
    )
    assert not (tmp_path / "f").exists()
    with store.open("sources/x") as handle:
        raises_code("storage.unavailable", handle.read)


def test_s3_conditional_conflict_409_is_left_to_the_next_attempt(s3: Any, tmp_path: Path) -> None:
    """A 409 (another conditional write in flight) is `storage.unavailable`: the activity's retry promotes."""
    conflict = client_error("ConditionalRequestConflict", 409, "PutObject")
    store = s3_store(client=ScriptedClient(s3, put_object=[]))
    staged = store.put_file("staged", write(tmp_path / "s", b"%PDF-s"))
    store._client = ScriptedClient(s3, put_object=[conflict])
    error = raises_code("storage.unavailable", lambda: store.promote(staged, "final"))
    assert error.outcome is Outcome.RETRY and not store.exists("final")
    assert store.promote(staged, "final")[1] is True
    assert store._client.calls.count("put_object") == 2


def test_s3_client_uses_botocores_standard_retries(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mode whose judgement of transient errors `storage.unavailable` follows; AWS_MAX_ATTEMPTS still counts."""
    monkeypatch.setenv("AWS_RETRY_MODE", "legacy")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "4")
    retries = s3_store()._client.meta.config.retries
    assert (retries["mode"], retries["total_max_attempts"]) == ("standard", 4)


def test_s3_overwrite_after_create_is_settled(s3: Any, tmp_path: Path) -> None:
    """A store whose conditional create is not atomic: another writer replaced our object right after it."""
    prefix = f"run-{uuid.uuid4().hex[:12]}"
    store = s3_store(prefix)
    ours = store.put_file("ours", write(tmp_path / "o", b"%PDF-ours"))
    theirs = write(tmp_path / "t", b"%PDF-theirs")

    def put_then_overwritten(**kwargs: Any) -> Any:
        response = s3.put_object(**kwargs)
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/final", Body=theirs.read_bytes())
        return response

    class Client(ScriptedClient):
        def __getattr__(self, name: str) -> Any:
            return put_then_overwritten if name == "put_object" else getattr(self.real, name)

    store._client = Client(s3)
    raises_code("publish.conflict", lambda: store.promote(ours, "final"))
