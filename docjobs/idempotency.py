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
