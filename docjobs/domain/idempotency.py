"""Client idempotency keys: a key becomes the second half of a job ID (`TENANT/KEY`).

One rule for every entry point (the API's `Idempotency-Key`, the CLI's `--key`): a key is one URL path
segment that means nothing else. No '/', not `.` or `..` (a client or proxy normalizes those away), and not
a word that names a job sub-resource. Checked with a full match: `$` would let a trailing newline through.
"""

from __future__ import annotations

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


def batch_document_key(batch_key: str, sha256: str) -> str:
    """A batch document's own idempotency key: the batch's key and the document's digest (a valid client key,
    never a reserved word), so resubmitting the batch finds the same jobs."""
    return f"{batch_key}.{sha256[:16]}"
