"""Canonical JSON: the one byte form of every JSON docjobs signs, hashes or sends.

It is RFC 8785, the JSON Canonicalization Scheme (JCS), as the `rfc8785` package writes it: object keys
sorted by their UTF-16 code units at every level, no whitespace anywhere, strings as UTF-8 (escaped only
where JSON must: the quote, the backslash and the control characters), numbers as ECMAScript prints them
(so ``180.0`` is written ``180`` and ``1e-07`` ``1e-7``), integers beyond 2**53 and NaN or the infinities
refused. Any language's JCS library gives the same bytes, so an auditor can re-derive what was signed.

What uses it: the evidence envelope and the payload its signature covers (docjobs/signing/evidence.py), a policy's
version (`Policy.version`), the redaction summary's digest and the `redaction.json` an export writes, and
the body of a tenant's notification. Pure (no I/O): the workflow imports it through docjobs.domain.policy.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785
from pydantic import BaseModel

FORMAT = "RFC8785"  # the evidence envelope's `canonicalization` marker


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of a JSON value (dicts, lists, str, int, float, bool, None)."""
    return rfc8785.dumps(value)


Exclude = set[str] | dict[str, Any] | None  # pydantic's: field names, or per field a nested exclusion (or True)


def canonical_model(model: BaseModel, exclude: Exclude = None) -> bytes:
    """A model's canonical JSON: its JSON dump (datetimes ISO 8601, enums their values; without the fields in
    `exclude`), canonicalized."""
    return canonical_json(model.model_dump(mode="json", exclude=exclude))


def canonical_sha256(model: BaseModel, exclude: Exclude = None) -> str:
    """The sha256 of a model's canonical JSON (without the fields in `exclude`): equal content, equal digest."""
    return hashlib.sha256(canonical_model(model, exclude)).hexdigest()
