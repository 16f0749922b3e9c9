"""The evidence envelope: a signed statement of what a job did, bound to its files by SHA-256.

Envelope
  ``{"algorithm": ..., "canonicalization": "RFC8785", "certificate": PEM, "payload": {...evidence...},
  "signature": base64}``, itself written as canonical JSON (RFC 8785, docjobs/canonical.py). The signature is
  over the canonical JSON of the payload; a verifier re-canonicalizes the payload it parsed, so what is
  verified is exactly what is read. The evidence object is `Evidence.model_dump(mode="json")`: datetimes are
  ISO 8601 in UTC with a ``Z`` suffix, absent optional digests are ``null``. Algorithms: ``rsa-pss-sha256``
  (RSASSA-PSS, SHA-256, MGF1-SHA-256, 32-byte salt) for RSA keys, ``ecdsa-p256-sha256`` (ECDSA on P-256
  with SHA-256, DER-encoded signature) for EC keys; the algorithm must match the certificate's key.

Envelopes written before RFC 8785 have no ``canonicalization`` field: their signature is over the
payload as ``json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
allow_nan=False)`` in UTF-8 (Python's float repr, e.g. ``180.0``), and they are verified over those bytes.
Any other ``canonicalization`` makes the envelope unreadable.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import importlib.metadata
import json
import platform
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from pydantic import Field, ValidationError, field_validator
from pyhanko_certvalidator import CertificateValidator
from pyhanko_certvalidator.errors import PathError
from pyhanko_certvalidator.errors import ValidationError as CertificateValidationError

from docjobs.canonical import FORMAT, canonical_json
from docjobs.models import SHA256_PATTERN, Frozen
from docjobs.signing.config import SignerConfig, asn1_certs, load_signer, validation_context
from docjobs.storage import sha256_file

Algorithm = Literal["rsa-pss-sha256", "ecdsa-p256-sha256"]

# Bindings a verifier can recompute from a file, in the order they are reported.
DIGEST_FIELDS = ("input_sha256", "output_sha256", "ocr_text_sha256", "redaction_summary_sha256")

_PACKAGES = ("pikepdf", "pyHanko", "pyhanko-certvalidator", "cryptography", "pydantic", "temporalio")
_TOOLS = {"qpdf": ["qpdf", "--version"], "pdftoppm": ["pdftoppm", "-v"], "tesseract": ["tesseract", "--version"]}
_VERSION = re.compile(r"\d+(?:\.\d+)+")


class Evidence(Frozen):
    """What a job did; digests only, never document content."""

    job_id: str
    run_id: str | None = None  # the workflow run that wrote it (None: an envelope from before run folders)
    tenant: str
    document_class: str
    policy: dict[str, Any]
    policy_version: str
    input_sha256: str = Field(pattern=SHA256_PATTERN)
    output_sha256: str | None = Field(default=None, pattern=SHA256_PATTERN)  # None unless succeeded
    ocr_text_sha256: str | None = Field(default=None, pattern=SHA256_PATTERN)
    redaction_summary_sha256: str | None = Field(default=None, pattern=SHA256_PATTERN)
    sanitized: dict[str, int] | None = None  # active content removed, kind -> count (None: an older envelope)
    stage_attempts: dict[str, int] = Field(default_factory=dict)
    tool_versions: dict[str, str] = Field(default_factory=dict)
    terminal_state: str
    completed_at: datetime

    @field_validator("completed_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("completed_at must carry a timezone")
        return value.astimezone(UTC)


class EvidenceCheck(Frozen):
    """The outcome of `verify_evidence`: which bindings broke (empty when all hold)."""

    broken: list[str]  # "envelope", "signature", "payload", "run", then DIGEST_FIELDS, in that order
    evidence: Evidence | None = None  # the payload, when it could be read
    signer_subject: str | None = None
    problem: str | None = None  # why the signature check failed (safe, generic text)

    @property
    def ok(self) -> bool:
        return not self.broken


def _legacy_json(payload: dict[str, Any]) -> bytes:
    """The bytes an envelope without a `canonicalization` field was signed over (see the module docstring)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def evidence_payload(evidence: Evidence) -> dict[str, Any]:
    return evidence.model_dump(mode="json")


def sign_evidence(evidence: Evidence, config: SignerConfig) -> bytes:
    """The signed envelope (canonical JSON bytes). Raises ConfigError when the key cannot be loaded."""
    return sign_payload(evidence_payload(evidence), config)


def sign_payload(payload: dict[str, Any], config: SignerConfig) -> bytes:
    """The signed envelope of any JSON payload (what an older docjobs wrote can be made again, for tests)."""
    material = load_signer(config)
    message = canonical_json(payload)
    key = material.key
    algorithm: Algorithm
    if isinstance(key, rsa.RSAPrivateKey):
        algorithm = "rsa-pss-sha256"
        signature = key.sign(message, _pss(), hashes.SHA256())
    else:
        if not isinstance(key.curve, ec.SECP256R1):
            raise ValueError("evidence signing supports EC keys on P-256 only")
        algorithm = "ecdsa-p256-sha256"
        signature = key.sign(message, ec.ECDSA(hashes.SHA256()))
    envelope = {
        "algorithm": algorithm,
        "canonicalization": FORMAT,
        "certificate": material.certificate.public_bytes(serialization.Encoding.PEM).decode("ascii"),
        "payload": payload,
        "signature": base64.b64encode(signature).decode("ascii"),
    }
    return canonical_json(envelope)


def verify_evidence(
    envelope: bytes,
    config: SignerConfig,
    *,
    job_id: str | None = None,
    run_id: str | None = None,
    artifact: Path | None = None,
    ocr_text: Path | None = None,
    source: Path | None = None,
    redaction_summary: Path | None = None,
) -> EvidenceCheck:
    """Check the envelope's signature and every digest for which a file is given.

    "signature" breaks when the certificate does not chain to a configured trust root (offline, at the
    current time) or the signature does not verify over the re-canonicalized payload; "run" when the
    evidence names another job than `job_id` or another run than `run_id` (an envelope from before run folders
    names none); a digest field breaks when its file's SHA-256 differs or the evidence does not record that
    digest at all.
    """
    try:
        parsed = json.loads(envelope, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
        payload, signature_b64, algorithm, cert_pem = (
            parsed["payload"],
            parsed["signature"],
            parsed["algorithm"],
            parsed["certificate"],
        )
        if not (isinstance(payload, dict) and isinstance(signature_b64, str) and isinstance(cert_pem, str)):
            raise ValueError("envelope fields have the wrong types")
        signature = base64.b64decode(signature_b64, validate=True)
        certificate = x509.load_pem_x509_certificate(cert_pem.encode("ascii"))
        signed = _signed_bytes(payload, parsed.get("canonicalization"))
    except (ValueError, KeyError, TypeError, UnicodeError):
        return EvidenceCheck(broken=["envelope"], problem="the envelope is not a well-formed evidence envelope")

    broken: list[str] = []
    problem = _check_signature(signed, signature, algorithm, certificate, config)
    if problem is not None:
        broken.append("signature")
    try:
        evidence: Evidence | None = Evidence.model_validate(payload)
    except ValidationError:
        evidence = None
        broken.append("payload")
    if (job_id is not None or run_id is not None) and (
        evidence is None
        or (job_id is not None and evidence.job_id != job_id)
        or (run_id is not None and evidence.run_id not in (None, run_id))
    ):
        broken.append("run")
    files = {
        "input_sha256": source,
        "output_sha256": artifact,
        "ocr_text_sha256": ocr_text,
        "redaction_summary_sha256": redaction_summary,
    }
    for name in DIGEST_FIELDS:
        path = files[name]
        if path is None:
            continue
        recorded = getattr(evidence, name, None) if evidence is not None else None
        if recorded is None or sha256_file(path) != recorded:
            broken.append(name)
    return EvidenceCheck(
        broken=broken,
        evidence=evidence,
        signer_subject=certificate.subject.rfc4514_string(),
        problem=problem,
    )


def _signed_bytes(payload: dict[str, Any], canonicalization: object) -> bytes:
    """The bytes the envelope's signature covers, by the form its `canonicalization` names."""
    if canonicalization == FORMAT:
        return canonical_json(payload)
    if canonicalization is None:
        return _legacy_json(payload)
    raise ValueError("unknown canonicalization")


def _check_signature(
    message: bytes, signature: bytes, algorithm: object, certificate: x509.Certificate, config: SignerConfig
) -> str | None:
    """None when the certificate is trusted for signing and the signature verifies; else a safe reason."""
    public_key = certificate.public_key()
    try:
        if algorithm == "rsa-pss-sha256" and isinstance(public_key, rsa.RSAPublicKey):
            public_key.verify(signature, message, _pss(), hashes.SHA256())
        elif (
            algorithm == "ecdsa-p256-sha256"
            and isinstance(public_key, ec.EllipticCurvePublicKey)
            and isinstance(public_key.curve, ec.SECP256R1)
        ):
            public_key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        else:
            return "the algorithm does not match the certificate's key"
    except InvalidSignature:
        return "the signature does not verify over the payload"
    try:
        validator = CertificateValidator(asn1_certs([certificate])[0], validation_context=validation_context(config))
        asyncio.run(cast(Any, validator).async_validate_usage({"digital_signature"}))
    except (PathError, CertificateValidationError):
        return "the certificate does not chain to a configured trust root"
    return None


def _pss() -> padding.PSS:
    return padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate key in the envelope")
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and infinities have no canonical form


@functools.cache
def _tool_versions() -> tuple[tuple[str, str], ...]:
    versions = {"python": platform.python_version()}
    for package in _PACKAGES:
        try:
            versions[package.lower()] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package.lower()] = "missing"
    for tool, command in _TOOLS.items():
        versions[tool] = _cli_version(command)
    return tuple(sorted(versions.items()))


def _cli_version(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "missing"
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        match = _VERSION.search(line)
        if match:
            return match.group(0)
    return "unknown"


def tool_versions() -> dict[str, str]:
    """Versions of Python, the libraries and the external tools that produce artifacts (cached per process).

    Keys: python, pikepdf, pyhanko, pyhanko-certvalidator, cryptography, pydantic, temporalio, qpdf,
    pdftoppm, tesseract; a value is "missing" when the package or tool is absent.
    """
    return dict(_tool_versions())
