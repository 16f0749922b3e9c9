"""Encrypted history: an AES-GCM payload codec with key rotation.

Every payload the SDK sends to the server (workflow input, activity inputs and results, memo, heartbeat
details, failure details) is replaced by the encryption of the whole original Payload message, so the
server, its database and anyone reading the history see only ciphertext. Search attributes stay in the
clear (the server must index them), as do failure messages and workflow/activity IDs: those are kept
content-free by design.

Keys rotate: the first configured key encrypts, every configured key decrypts, and each payload names the
key that sealed it, so histories written before a rotation stay readable as long as their key is kept.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

ENCODING = b"binary/encrypted"
KEY_ID_FIELD = "encryption-key-id"
NONCE_BYTES = 12
KEY_BYTES = 32
KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class PayloadDecryptionError(Exception):
    """A payload this codec cannot open; the message names the key ID, never the payload."""


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


class EncryptionCodec(PayloadCodec):
    """Seals payloads with the active key (nonce || AES-GCM ciphertext); opens them with the key they name."""

    def __init__(self, keys: Sequence[CodecKey]) -> None:
        if not keys:
            raise ValueError("an encryption codec needs at least one key")
        self._active = keys[0].key_id
        self._ciphers = {key.key_id: AESGCM(key.secret) for key in keys}

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        cipher = self._ciphers[self._active]
        sealed = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            sealed.append(
                Payload(
                    metadata={"encoding": ENCODING, KEY_ID_FIELD: self._active.encode()},
                    data=nonce + cipher.encrypt(nonce, payload.SerializeToString(), None),
                )
            )
        return sealed

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._open(payload) for payload in payloads]

    def _open(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # written before encryption was switched on
        key_id = payload.metadata.get(KEY_ID_FIELD, b"").decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise PayloadDecryptionError(f"payload encrypted with unknown key ID {key_id!r}: configure that key")
        try:
            plain = cipher.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], None)
        except (InvalidTag, ValueError):  # a forged or truncated payload, or another secret under this ID
            raise PayloadDecryptionError(f"payload failed authentication with key ID {key_id!r}") from None
        return Payload.FromString(plain)
