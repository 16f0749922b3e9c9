"""Blob storage on S3 (or an S3-compatible service), with the semantics of `FileBlobStore`.

`s3://bucket/prefix` names the bucket and an optional key prefix; endpoint, region and credentials come the
standard boto3 way (`AWS_ENDPOINT_URL`, `AWS_DEFAULT_REGION` or `AWS_REGION`, `AWS_ACCESS_KEY_ID`, profiles,
instance roles, ...). Objects are written without an ACL, so they stay private to the bucket owner.

Every object carries its sha256 as metadata (`x-amz-meta-sha256`) and as an S3 checksum
(`x-amz-checksum-sha256`, which S3 checks on upload), but reads never trust either: `fetch`, `verify` and
`promote` hash the bytes they actually received.

Promotion is create-only: the staged object is downloaded and hashed, and exactly those verified bytes are
written to the final key with `If-None-Match: *` (an atomic conditional create on S3). A 412 means an
artifact is already there: the same digest is a no-op, a different one is `publish.conflict`. A single PUT
is atomic for readers, so nobody ever sees a half-written artifact.

Retries are botocore's own, in its `standard` mode (`AWS_MAX_ATTEMPTS` sets the attempts, 3 by default):
throttling, transient errors and 5xx are retried there with backoff. What still fails after them, by
botocore's own judgement of which errors are transient, is `storage.unavailable`, which the activity's retry
policy retries later; so is a 409 `ConditionalRequestConflict` (another conditional write in flight).
"""

from __future__ import annotations

import base64
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, cast
from urllib.parse import urlparse
from urllib.request import url2pathname

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    ChecksumError,
    ClientError,
    CredentialRetrievalError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.retries.standard import (  # type: ignore[import-untyped]
    OrRetryChecker,
    RetryContext,
    ThrottledRetryableChecker,
    TransientRetryableChecker,
)

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import BlobRef
from docjobs.store.storage import CHUNK, BlobStore, FileBlobStore, StoredBlob, chunks_of, hashed_copy

SSE_MODES = ("AES256", "aws:kms", "aws:kms:dsse")
DELETE_BATCH = 1000  # the most keys one DeleteObjects request takes
LIST_PAGE = 1000  # keys per ListObjectsV2 page
SPOOL_BYTES = 8 * 1024 * 1024  # promotion keeps smaller artifacts in memory, larger ones in a temp file
RETRY_MODE = "standard"  # botocore's; the attempts are AWS_MAX_ATTEMPTS (botocore's default: 3)
_BOTOCORE_RETRYABLE = OrRetryChecker([TransientRetryableChecker(), ThrottledRetryableChecker()])

# Transport-level failures: the request may not have reached the store, or its answer was lost.
_TRANSIENT_EXCEPTIONS: tuple[type[Exception], ...] = (
    BotoConnectionError,  # EndpointConnectionError, ConnectTimeoutError, SSLError, ProxyConnectionError
    HTTPClientError,  # ReadTimeoutError, ConnectionClosedError, ResponseStreamingError
    IncompleteReadError,
    ChecksumError,
    NoCredentialsError,
    PartialCredentialsError,
    CredentialRetrievalError,
)
# The store refuses us: wrong credentials, bucket or policy. An operator can fix it, so it is retried.
_REFUSED = {
    "AccessDenied",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "NoSuchBucket",
    "PermanentRedirect",
    "AuthorizationHeaderMalformed",
}
_MISSING = {"NoSuchKey", "NotFound", "404"}


def _error_code(error: Any) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _http_status(error: Any) -> int:
    return int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _is_missing(error: Exception) -> bool:
    return isinstance(error, ClientError) and (_error_code(error) in _MISSING or _http_status(error) == 404)


def _retried_by_botocore(error: ClientError) -> bool:
    """Whether botocore's standard retry mode counts this error as transient or throttling (its retries ran out)."""
    return _http_status(error) >= 500 or bool(
        _BOTOCORE_RETRYABLE.is_retryable(RetryContext(attempt_number=1, parsed_response=error.response))
    )


def _storage_error(error: Exception, operation: str) -> Exception:
    """A typed failure for a boto error; the message names the operation and S3's error code, never a key."""
    if isinstance(error, _TRANSIENT_EXCEPTIONS):
        return DocJobError(
            FailureCode.STORAGE_UNAVAILABLE, f"object storage is unavailable ({operation}: {type(error).__name__})"
        )
    if isinstance(error, ClientError):
        code = _error_code(error)
        if _retried_by_botocore(error) or code == "ConditionalRequestConflict":
            return DocJobError(FailureCode.STORAGE_UNAVAILABLE, f"object storage is unavailable ({operation}: {code})")
        if code in _REFUSED:
            return DocJobError(
                FailureCode.STORAGE_UNAVAILABLE, f"object storage refused the request ({operation}: {code})"
            )
    return error  # anything else is unexpected: the activity reports it as internal.error


def _checksum(sha256_hex: str) -> str:
    """The `x-amz-checksum-sha256` form of a digest: base64 of the raw bytes."""
    return base64.b64encode(bytes.fromhex(sha256_hex)).decode()


def _default_client() -> Any:
    # botocore reads AWS_DEFAULT_REGION; AWS_REGION (what the other AWS SDKs read) is honoured as a fallback.
    region = None if os.environ.get("AWS_DEFAULT_REGION") else os.environ.get("AWS_REGION") or None
    # A fresh Config per client: botocore writes the attempts it read from the environment into it.
    return boto3.client("s3", region_name=region, config=Config(retries={"mode": RETRY_MODE}))


class _BodyReader(io.RawIOBase):
    """A GetObject body as a raw stream whose transport failures surface as `storage.unavailable`."""

    def __init__(self, body: Any) -> None:
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        try:
            data = self._body.read(len(view))
        except _TRANSIENT_EXCEPTIONS as error:
            raise _storage_error(error, "GetObject") from None
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


class S3BlobStore:
    """Blobs in one bucket under an optional prefix. Thread-safe: the boto3 client is shared by all threads."""

    def __init__(
        self, url: str, *, sse: str | None = None, kms_key_id: str | None = None, client: Any | None = None
    ) -> None:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise ValueError("an S3 storage URL has the form s3://bucket/prefix")
        if parsed.query or parsed.fragment or parsed.params:
            raise ValueError("an S3 storage URL takes no query or fragment")
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        if self.prefix:
            self._check_key(self.prefix)
        self._write_args: dict[str, str] = {}
        if sse:
            if sse not in SSE_MODES:
                raise ValueError(f"unknown server-side encryption {sse!r} (known: {', '.join(SSE_MODES)})")
            self._write_args["ServerSideEncryption"] = sse
        if kms_key_id:
            if not sse or not sse.startswith("aws:kms"):
                raise ValueError("a KMS key id needs server-side encryption aws:kms")
            self._write_args["SSEKMSKeyId"] = kms_key_id
        self._client = client if client is not None else _default_client()

    # --- keys ---------------------------------------------------------------------------------------------

    @staticmethod
    def _check_key(key: str) -> None:
        parts = key.split("/")
        if not key or key.startswith("/") or any(part in ("", ".", "..") for part in parts):
            raise ValueError("blob key escapes the store")

    def _object_key(self, key: str) -> str:
        self._check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    # --- reads --------------------------------------------------------------------------------------------

    def _get(self, key: str, operation: str) -> Any:
        """GetObject; a missing object is `source.missing`."""
        try:
            return self._client.get_object(Bucket=self.bucket, Key=self._object_key(key))
        except (ClientError, *_TRANSIENT_EXCEPTIONS) as error:
            if _is_missing(error):
                raise DocJobError(FailureCode.SOURCE_MISSING, "a stored blob is missing") from None
            raise _storage_error(error, operation) from None

    def _chunks(self, response: Any, operation: str) -> Iterator[bytes]:
        """The body in chunks; a connection lost mid-body is `storage.unavailable`, never a digest mismatch."""
        body = response["Body"]
        try:
            while True:
                try:
                    chunk = body.read(CHUNK)
                except _TRANSIENT_EXCEPTIONS as error:
                    raise _storage_error(error, operation) from None
                if not chunk:
                    return
                yield chunk
        finally:
            body.close()

    def _copy_hashed(self, key: str, out: IO[bytes] | None, operation: str) -> str:
        """Stream the object (into `out`, if given) and return the sha256 of the bytes received."""
        return hashed_copy(self._chunks(self._get(key, operation), operation), out)[0]

    def fetch(self, ref: BlobRef, dest: Path, *, mismatch_code: FailureCode) -> None:
        try:
            with dest.open("wb") as out:
                actual = self._copy_hashed(ref.key, out, "GetObject")
        except DocJobError:
            dest.unlink(missing_ok=True)
            raise
        if actual != ref.sha256:
            raise DocJobError(mismatch_code)

    def verify(self, ref: BlobRef, *, mismatch_code: FailureCode) -> None:
        if self._copy_hashed(ref.key, None, "GetObject") != ref.sha256:
            raise DocJobError(mismatch_code)

    def exists(self, key: str) -> bool:
        try:
            self._client.head_object(Bucket=self.bucket, Key=self._object_key(key))
        except (ClientError, *_TRANSIENT_EXCEPTIONS) as error:
            if _is_missing(error):
                return False
            raise _storage_error(error, "HeadObject") from None
        return True

    def open(self, key: str) -> BinaryIO:
        """A streaming reader of the object (not checked here: readers hash what they read, `verified_chunks`)."""
        response = self._get(key, "GetObject")
        return cast(BinaryIO, io.BufferedReader(_BodyReader(response["Body"]), buffer_size=CHUNK))

    # --- writes -------------------------------------------------------------------------------------------

    def _put(self, key: str, body: IO[bytes], sha256: str, **conditions: str) -> Any:
        return self._client.put_object(
            Bucket=self.bucket,
            Key=self._object_key(key),
            Body=body,
            Metadata={"sha256": sha256},
            ChecksumSHA256=_checksum(sha256),
            **self._write_args,
            **conditions,
        )

    def put_file(self, key: str, path: Path) -> BlobRef:
        """One PUT (atomic for readers), streamed from the file; S3 rejects it if the bytes don't hash right."""
        with path.open("rb") as body:
            sha256, size = hashed_copy(chunks_of(body))
            body.seek(0)
            return self._upload(key, body, sha256, size)

    def put_hashed(self, key: str, path: Path, sha256: str) -> BlobRef:
        """One PUT with the writer's digest, which S3 checks: the file is read once, by the upload."""
        with path.open("rb") as body:
            return self._upload(key, body, sha256, os.fstat(body.fileno()).st_size)

    def _upload(self, key: str, body: IO[bytes], sha256: str, size: int) -> BlobRef:
        try:
            self._put(key, body, sha256)
        except (ClientError, *_TRANSIENT_EXCEPTIONS) as error:
            if isinstance(error, ClientError) and _error_code(error) in ("BadDigest", "InvalidDigest"):
                raise DocJobError(FailureCode.INTERNAL_ERROR, "a file changed while it was being stored") from None
            raise _storage_error(error, "PutObject") from None
        return BlobRef(key=key, sha256=sha256, size=size)

    def promote(self, staged: BlobRef, final_key: str) -> tuple[BlobRef, bool]:
        final = BlobRef(key=final_key, sha256=staged.sha256, size=staged.size)
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as local:
            # Verify the staged bytes and publish exactly those: the staged object may change meanwhile.
            if self._copy_hashed(staged.key, local, "GetObject") != staged.sha256:
                raise DocJobError(FailureCode.ARTIFACT_DIGEST_MISMATCH)
            local.seek(0)
            try:
                response = self._put(final_key, cast(IO[bytes], local), staged.sha256, IfNoneMatch="*")
            except ClientError as error:
                if _error_code(error) != "PreconditionFailed" and _http_status(error) != 412:
                    raise _storage_error(error, "PutObject") from None
                response = None  # an artifact is already there
            except _TRANSIENT_EXCEPTIONS as error:
                raise _storage_error(error, "PutObject") from None
        created = response is not None
        if created and self._still_ours(final_key, str(response.get("ETag", ""))):
            return final, True
        # A 412, or overwritten since our create (only possible if the store's conditional write is not atomic,
        # or something writes the final key unconditionally): the bytes now there settle it.
        existing = self._existing_digest(final_key)
        if existing == staged.sha256:
            return final, created
        if existing is None:  # deleted meanwhile: the next attempt creates it
            raise DocJobError(FailureCode.STORAGE_UNAVAILABLE, "the artifact went missing while it was being published")
        raise DocJobError(FailureCode.PUBLISH_CONFLICT)

    def _existing_digest(self, key: str) -> str | None:
        """The sha256 of the bytes stored at `key` (hashed, not read from metadata); None if there is none."""
        try:
            return self._copy_hashed(key, None, "GetObject")
        except DocJobError as error:
            if error.code == FailureCode.SOURCE_MISSING:
                return None
            raise

    def _still_ours(self, key: str, etag: str) -> bool:
        """Whether the object at `key` is still the one our PUT answered with `etag`."""
        try:
            head = self._client.head_object(Bucket=self.bucket, Key=self._object_key(key))
        except (ClientError, *_TRANSIENT_EXCEPTIONS) as error:
            if _is_missing(error):
                return False
            raise _storage_error(error, "HeadObject") from None
        return bool(etag) and str(head.get("ETag", "")).strip('"') == etag.strip('"')

    def _pages(self, prefix: str) -> Iterator[Any]:
        """ListObjectsV2 pages of the folder `prefix` (not objects that merely share its leading characters)."""
        return cast(
            Iterator[Any],
            self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._object_key(prefix) + "/", PaginationConfig={"PageSize": LIST_PAGE}
            ),
        )

    def list_blobs(self, prefix: str) -> Iterator[StoredBlob]:
        start = len(self.prefix) + 1 if self.prefix else 0
        try:
            for page in self._pages(prefix):
                for item in page.get("Contents", []):
                    yield StoredBlob(item["Key"][start:], int(item["Size"]), item["LastModified"])
        except (ClientError, *_TRANSIENT_EXCEPTIONS) as error:
            raise _storage_error(error, "ListObjectsV2") from None

    def stat(self, key: str) -> StoredBlob | None:
        try:
            head = self._client.head_object(Bucket=self.bucket, Key=self._object_key(key))
        except (ClientError, *_TRANSIENT_EXCEPTIONS) as error:
            if _is_missing(error):
                return None
            raise _storage_error(error, "HeadObject") from None
        return StoredBlob(key, int(head["ContentLength"]), head["LastModified"])

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self._object_key(key))
        except (ClientError, *_TRANSIENT_EXCEPTIONS) as error:
            raise _storage_error(error, "DeleteObject") from None

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object in the folder `prefix` (not objects that merely share its leading characters)."""
        removed = 0
        try:
            for page in self._pages(prefix):
                keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
                for start in range(0, len(keys), DELETE_BATCH):
                    batch = keys[start : start + DELETE_BATCH]
                    result = self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
                    failed = result.get("Errors", [])
                    removed += len(batch) - len(failed)
                    if failed:
                        codes = sorted({str(item.get("Code", "")) for item in failed})
                        raise DocJobError(
                            FailureCode.STORAGE_UNAVAILABLE,
                            f"object storage did not delete some objects ({', '.join(codes)})",
                        )
        except (ClientError, *_TRANSIENT_EXCEPTIONS) as error:
            raise _storage_error(error, "DeleteObjects") from None
        return removed


def open_blob_store(storage_url: str, *, sse: str | None = None, kms_key_id: str | None = None) -> BlobStore:
    """The blob store a storage URL names: `file:///path` (sse is ignored) or `s3://bucket/prefix`."""
    parsed = urlparse(storage_url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError("a file storage URL has the form file:///absolute/path")
        return FileBlobStore(Path(url2pathname(parsed.path)))
    if parsed.scheme == "s3":
        return S3BlobStore(storage_url, sse=sse, kms_key_id=kms_key_id)
    raise ValueError("unsupported storage URL: use file:///path or s3://bucket/prefix")
