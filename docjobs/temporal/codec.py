"""Encrypted history: an AES-GCM payload codec with key rotation.

Every payload the SDK sends to the server (workflow input, activity inputs and results, memo, heartbeat
details, failure details) is replaced by the encryption of the whole original Payload message, so the
server, its database and anyone reading the history see only ciphertext. Search attributes stay in the
clear (the server must index them), as do failure messages and workflow/activity IDs: those are kept
content-free by design.

Keys rotate: the first configured key encrypts, every configured key decrypts, and each payload names the
key that sealed it, so histories written before a rotation stay readable as long as their key is kept.

A sealed deployment accepts only sealed payloads: whoever reaches the Temporal frontend without the key must
not be able to start a job with a forged request. Decoding never raises for that (a workflow task that fails
to decode is retried forever); it hands the workflow an *unsealed* marker instead, which the workflow refuses
with `codec.unsealed`. Each ciphertext is bound (AES-GCM associated data) to the namespace and workflow the
SDK's serialization context names, so a sealed payload copied into another workflow is refused the same way;
one sealed for no workflow at all is opened but marked (`UNBOUND_FIELD`), and the workflow refuses it as its
start input (the SDK's client seals the headers it sends without a workflow, so those must still open).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)

from docjobs.domain.sealing import UNBOUND_FIELD, UNSEALED_ENCODING, CodecKey

ENCODING = b"binary/encrypted"
KEY_ID_FIELD = "encryption-key-id"
NAMESPACE_FIELD = "encryption-namespace"  # the binding, in the clear: the server knows both anyway
WORKFLOW_ID_FIELD = "encryption-workflow-id"
NONCE_BYTES = 12


class PayloadDecryptionError(Exception):
    """A payload this codec cannot open; the message names the key ID, never the payload."""


@dataclass(frozen=True)
class Binding:
    """The namespace and workflow a ciphertext belongs to: its AES-GCM associated data."""

    namespace: str
    workflow_id: str

    @property
    def associated_data(self) -> bytes:
        return json.dumps(["docjobs-codec-v1", self.namespace, self.workflow_id]).encode()

    @classmethod
    def of_context(cls, context: SerializationContext) -> Binding | None:
        """The workflow a payload is exchanged for: the workflow itself, or the workflow that runs the activity."""
        if isinstance(context, WorkflowSerializationContext | ActivitySerializationContext) and context.workflow_id:
            return cls(context.namespace, context.workflow_id)
        return None

    @classmethod
    def of_payload(cls, payload: Payload) -> Binding | None:
        """The binding a sealed payload names; None for one sealed without a workflow (or before bindings)."""
        if WORKFLOW_ID_FIELD not in payload.metadata:
            return None
        namespace, workflow_id = (payload.metadata.get(name, b"") for name in (NAMESPACE_FIELD, WORKFLOW_ID_FIELD))
        return cls(namespace.decode(errors="replace"), workflow_id.decode(errors="replace"))


def unsealed(payload: Payload) -> Payload:
    """The marker that replaces a payload a sealed process refuses (the original kept inside, never converted)."""
    return Payload(metadata={"encoding": UNSEALED_ENCODING}, data=payload.SerializeToString())


class EncryptionCodec(PayloadCodec, WithSerializationContext):
    """Seals payloads with the active key (nonce || AES-GCM ciphertext); opens them with the key they name.

    `pass_plaintext`: hand plaintext payloads through unchanged (only for a viewer such as the codec endpoint);
    docjobs' own processes replace them by the unsealed marker. The SDK calls `with_context` with the workflow
    a payload belongs to: then ciphertexts are sealed for it, and one sealed for another workflow is refused.
    """

    def __init__(self, keys: Sequence[CodecKey], *, pass_plaintext: bool = False) -> None:
        if not keys:
            raise ValueError("an encryption codec needs at least one key")
        self._active = keys[0].key_id
        self._ciphers = {key.key_id: AESGCM(key.secret) for key in keys}
        self._pass_plaintext = pass_plaintext
        self._binding: Binding | None = None

    def with_context(self, context: SerializationContext) -> Self:
        binding = Binding.of_context(context)
        if binding == self._binding:
            return self
        bound = copy.copy(self)
        bound._binding = binding
        return bound

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        cipher = self._ciphers[self._active]
        metadata = {"encoding": ENCODING, KEY_ID_FIELD: self._active.encode()}
        associated_data = None
        if self._binding is not None:
            metadata |= {
                NAMESPACE_FIELD: self._binding.namespace.encode(),
                WORKFLOW_ID_FIELD: self._binding.workflow_id.encode(),
            }
            associated_data = self._binding.associated_data
        sealed = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            ciphertext = cipher.encrypt(nonce, payload.SerializeToString(), associated_data)
            sealed.append(Payload(metadata=metadata, data=nonce + ciphertext))
        return sealed

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._open(payload) for payload in payloads]

    def _open(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload if self._pass_plaintext else unsealed(payload)
        key_id = payload.metadata.get(KEY_ID_FIELD, b"").decode(errors="replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:  # raised, not marked: a rotation rolled out in the wrong order must stay recoverable
            raise PayloadDecryptionError(f"payload encrypted with unknown key ID {key_id!r}: configure that key")
        binding = Binding.of_payload(payload)
        if binding is not None and self._binding is not None and binding != self._binding:
            return unsealed(payload)  # sealed for another workflow (or namespace) and replayed here
        associated_data = binding.associated_data if binding else None  # None: sealed before bindings existed
        try:
            plain = cipher.decrypt(payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], associated_data)
        except (InvalidTag, ValueError):  # a forged or truncated payload, or another secret under this ID
            raise PayloadDecryptionError(f"payload failed authentication with key ID {key_id!r}") from None
        opened = Payload.FromString(plain)
        if binding is None and self._binding is not None:
            # Sealed for no workflow: opened (a client seals the headers it sends without one), but marked, and
            # the workflow refuses a start input so marked (`codec.unsealed`).
            opened.metadata[UNBOUND_FIELD] = b"1"
        return opened
