"""What a sealed deployment is configured with, free of Temporal: its payload keys and the unsealed marker.

The settings parse the keys (docjobs/settings/config.py), the payload codec seals and opens payloads with them
(docjobs/temporal/codec.py), and the workflow refuses an input the codec replaced by the unsealed marker.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field

UNSEALED_ENCODING = b"binary/docjobs-unsealed"  # the marker: a payload this deployment does not accept
# Set by a process that knows the workflow on a ciphertext it opened that was sealed for no workflow (before
# bindings existed, or by the codec endpoint's former `/encode`): the workflow refuses such a start input.
UNBOUND_FIELD = "docjobs-sealed-unbound"
KEY_BYTES = 32
KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True)
class CodecKey:
    key_id: str
    secret: bytes = field(repr=False)


def parse_keys(text: str) -> tuple[CodecKey, ...]:
    """`KEY_ID:BASE64KEY` entries separated by commas or new lines; the first one is the active key.

    Raises ValueError with a message that names the entry's position, never its key material."""
    entries = [entry.strip() for line in text.splitlines() for entry in line.split(",")]
    keys: list[CodecKey] = []
    for position, entry in enumerate((entry for entry in entries if entry), start=1):
        key_id, colon, encoded = entry.partition(":")
        if not colon or not KEY_ID.fullmatch(key_id):
            raise ValueError(f"entry {position} is not KEY_ID:BASE64KEY (key IDs: letters, digits, . _ -)")
        try:
            secret = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"the key of {key_id!r} is not standard base64") from None
        if len(secret) != KEY_BYTES:
            raise ValueError(f"the key of {key_id!r} must be {KEY_BYTES} bytes, not {len(secret)}")
        if any(key.key_id == key_id for key in keys):
            raise ValueError(f"key ID {key_id!r} is configured twice")
        keys.append(CodecKey(key_id, secret))
    return tuple(keys)
