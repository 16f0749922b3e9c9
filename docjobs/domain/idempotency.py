"""Client idempotency keys: a key becomes the second half of a job ID (`TENANT/KEY`).

One rule for every entry point (the API's `Idempotency-Key`, the CLI's `--key`): a key is one URL path
segment that means nothing else. No '/', not `.` or `..` (a client or proxy normalizes those away), and not
a word that names a job sub-resource. Checked with a full match: `$` would let a trailing newline through.
"""

from __future__ import annotations

import hashlib
import hmac
import re

CLIENT_KEY = re.compile(r"[A-Za-z0-9._~:-]{1,128}")
RESERVED_KEYS = frozenset({".", "..", "artifact", "evidence", "cancel"})
CLIENT_KEY_RULE = "1-128 of A-Z a-z 0-9 . _ ~ : - (not '.', '..', 'artifact', 'evidence' or 'cancel')"


def is_valid_client_key(key: str) -> bool:
    return CLIENT_KEY.fullmatch(key) is not None and key not in RESERVED_KEYS


def keyed_job_id(tenant: str, key: str) -> str:
    """The workflow ID of a job with a client (or derived) key."""
    return f"{tenant}/{key}"


BATCH_KEY_MAX = 100  # room for the document digest in the documents' job keys (at most 128 characters)
BATCH_KEY_RULE = f"{CLIENT_KEY_RULE}, at most {BATCH_KEY_MAX} characters"


def is_valid_batch_key(key: str) -> bool:
    return is_valid_client_key(key) and len(key) <= BATCH_KEY_MAX


def keyless_digest(id_key: bytes, *parts: str) -> str:
    """What names a job or batch submitted without a key: a digest keyed with the deployment's job-ID key
    (`DOCJOBS_JOB_ID_KEY_FILE`), so that the same input asked the same is the same job, yet nobody without the
    key can put a guessed document back into an ID and confirm it (the ID travels in every notification)."""
    message = "\0".join(("docjobs keyless id v2", *parts)).encode()
    return hmac.new(id_key, message, hashlib.sha256).hexdigest()[:32]


def batch_document_key(batch_key: str, sha256: str, salt: str | None) -> str:
    """A batch document's own idempotency key: the batch's key and the document's digest keyed with the batch's
    own salt (a valid client key, never a reserved word), so the batch's runs find the same jobs, and the ID tells
    nobody the document's digest. `salt` None: a batch accepted before it had one (an old history), whose
    documents keep the IDs they were given (the digest itself)."""
    if salt is None:
        return batch_document_prefix(batch_key) + sha256[:16]
    return batch_document_prefix(batch_key) + hmac.new(bytes.fromhex(salt), sha256.encode(), "sha256").hexdigest()[:16]


def batch_document_prefix(batch_key: str) -> str:
    """What every document key of the batch `batch_key` starts with (16 hex digits follow)."""
    return f"{batch_key}."
