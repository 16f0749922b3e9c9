"""The evidence: a signed statement of what a job did, bound to its files by SHA-256.

Written as an in-toto attestation (Statement v1) in a DSSE envelope, so that anyone can check it with standard
tools and without docjobs:

  ``{"payload": base64(STATEMENT), "payloadType": "application/vnd.in-toto+json",
  "signatures": [{"keyid": hex sha256 of the certificate (DER), "sig": base64(SIGNATURE), "cert": PEM}]}``

  * STATEMENT: ``{"_type": "https://in-toto.io/Statement/v1", "subject": [...], "predicateType":
    "https://docjobs.dev/evidence/v2", "predicate": {...}}`` in UTF-8 (written as RFC 8785 canonical JSON, but
    verified as the exact bytes it is). Its subjects are what the receiver is handed: the released artifact
    (``artifact.pdf``, only when the job succeeded) and its text (``text.json``, when there is one), each with its
    ``sha256`` digest. Everything on the input's side of the redaction (the job's ID, the accepted input, an
    office input's PDF as LibreOffice made it, the redaction summary and the whole policy, terms included) is
    bound by a **commitment** only (`commitment`: HMAC-SHA256 keyed with the job's own random salt, which only
    the tenant's status holds): the tenant can prove the link, a receiver can confirm no guess. The predicate is
    everything else the job binds (schema: ``schemas/evidence-v2.schema.json``): the policy without its redaction
    terms (`Policy.released`) and its version, the redactions counted by kind. Datetimes are ISO 8601 in UTC with
    a ``Z`` suffix. A ``https://docjobs.dev/evidence/v1`` statement (written before the commitments) has the
    input's side as plain subjects (``source``, ``converted.pdf``) and fields (``job_id``,
    ``redaction_summary_sha256``, the whole policy); it still verifies.
  * SIGNATURE: over DSSE's pre-authentication encoding of the payload's exact bytes,
    ``PAE = "DSSEv1" SP len(type) SP type SP len(payload) SP payload`` (lengths in ASCII decimal): RSASSA-PSS
    (SHA-256, MGF1-SHA-256, 32-byte salt) for an RSA key, ECDSA on P-256 with SHA-256 (DER-encoded) for an EC
    key. ``cert`` is the signer's certificate, a field DSSE consumers ignore; the verifier checks that it chains
    to a configured trust root.

Envelopes written before the attestation (jobs already ended keep theirs) are still verified:
``{"algorithm": ..., "canonicalization": "RFC8785", "certificate": PEM, "payload": {...evidence...},
"signature": base64}``, signed over the canonical JSON (RFC 8785, docjobs/domain/canonical.py) of the payload, which the
verifier re-derives from the payload it parsed; ``algorithm`` is ``rsa-pss-sha256`` or ``ecdsa-p256-sha256`` as
above. Without a ``canonicalization`` field (written before RFC 8785) the signature is over
``json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)`` in UTF-8
(Python's float repr, e.g. ``180.0``). Any other ``canonicalization`` makes the envelope unreadable.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import hmac
import importlib.metadata
import json
import platform
import re
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from pydantic import Field, field_validator
from pyhanko_certvalidator import CertificateValidator
from pyhanko_certvalidator.errors import PathError
from pyhanko_certvalidator.errors import ValidationError as CertificateValidationError

from docjobs.domain.base import SHA256_PATTERN, Frozen
from docjobs.domain.canonical import FORMAT, canonical_json
from docjobs.signing.config import SignerConfig, asn1_certs, load_signer, validation_context
from docjobs.store.storage import sha256_file

Algorithm = Literal["rsa-pss-sha256", "ecdsa-p256-sha256"]

# Bindings a verifier can recompute from a file, in the order they are reported.
DIGEST_FIELDS = ("input_sha256", "output_sha256", "ocr_text_sha256", "redaction_summary_sha256", "converted_sha256")

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://docjobs.dev/evidence/v2"
PREDICATE_TYPE_V1 = "https://docjobs.dev/evidence/v1"  # before the commitments: read, never written
# The statement's subjects: the name of each file it binds -> the evidence field holding its digest.
SUBJECTS = {
    "artifact.pdf": "output_sha256",
    "source": "input_sha256",
    "text.json": "ocr_text_sha256",
    "converted.pdf": "converted_sha256",
}
RELEASED_SUBJECTS = ("artifact.pdf", "text.json")  # what a v2 statement names by a plain digest
# What a v2 statement binds by a commitment only (`commitment`), and the field of a v1 statement that bound it.
COMMITTED = {
    "job": "job_id",
    "source": "input_sha256",
    "converted.pdf": "converted_sha256",
    "redaction.json": "redaction_summary_sha256",
    "policy": None,  # the sha256 of the whole policy's canonical JSON, terms included (v1 carried the policy)
}
COMMITMENT_CONTEXT = b"docjobs commitment v1\0"

_PACKAGES = ("pikepdf", "pyHanko", "pyhanko-certvalidator", "cryptography", "pydantic", "temporalio")
_TOOLS = {"qpdf": ["qpdf", "--version"], "pdftoppm": ["pdftoppm", "-v"], "tesseract": ["tesseract", "--version"]}
_VERSION = re.compile(r"\d+(?:\.\d+)+")


class Evidence(Frozen):
    """What a job did; digests and commitments only, never document content, a redaction term or a box.

    A v2 statement (`committed`) names the job, its input and its terms by commitments only; the fields marked
    v1 are those of an older statement, read back and verified, never written again."""

    job_id: str | None = None  # v1 only: v2 binds it by the commitment "job"
    run_id: str | None = None  # the workflow run that wrote it (None: an envelope from before run folders)
    tenant: str
    document_class: str
    policy: dict[str, Any]  # v2: `Policy.released` (no terms); v1: the whole policy
    policy_version: str
    input_sha256: str | None = Field(default=None, pattern=SHA256_PATTERN)  # v1 only (v2: commitment "source")
    output_sha256: str | None = Field(default=None, pattern=SHA256_PATTERN)  # None unless succeeded
    ocr_text_sha256: str | None = Field(default=None, pattern=SHA256_PATTERN)
    redaction_summary_sha256: str | None = Field(default=None, pattern=SHA256_PATTERN)  # v1 only
    # v1 only: an office input's PDF, the document every stage after render worked on
    converted_sha256: str | None = Field(default=None, pattern=SHA256_PATTERN)
    # v2: name (COMMITTED) -> hex HMAC-SHA256 under the job's salt; None: a v1 statement
    commitments: dict[str, str] | None = None
    redactions: dict[str, int] | None = None  # v2: spans removed by kind (a built-in pattern, custom, region)
    sanitized: dict[str, int] | None = None  # active content removed, kind -> count (None: an older envelope)
    # the verify stage's verdict on the release signature, naming its tenant and lock (None: unsigned, or older)
    signature: dict[str, str | bool | int | None] | None = None
    stage_attempts: dict[str, int] = Field(default_factory=dict)
    tool_versions: dict[str, str] = Field(default_factory=dict)
    terminal_state: str
    completed_at: datetime

    @property
    def committed(self) -> bool:
        """A v2 statement: the input's side is bound by commitments."""
        return self.commitments is not None

    def binds(self, name: str, value: str, salt: bytes | None) -> bool:
        """Whether the evidence binds `value` as `name` (COMMITTED): by its commitment under the job's `salt` (v2),
        else by the v1 field that held it in plain."""
        if not self.committed:
            field = COMMITTED[name]
            return field is not None and getattr(self, field) == value
        recorded = (self.commitments or {}).get(name)
        return (
            salt is not None and recorded is not None and hmac.compare_digest(recorded, commitment(salt, name, value))
        )

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


_V1_ONLY = ("job_id", "input_sha256", "redaction_summary_sha256", "converted_sha256")


def commitment(salt: bytes, name: str, value: str) -> str:
    """The commitment to `value` (a digest in hex, or the job's ID) under the job's `salt`: hex HMAC-SHA256 of
    ``"docjobs commitment v1" NUL name NUL value``. Without the salt no guess can be checked against it; with it
    (the tenant's status holds it) anyone can recompute it from the file or ID it binds."""
    message = COMMITMENT_CONTEXT + name.encode() + b"\0" + value.encode()
    return hmac.new(salt, message, hashlib.sha256).hexdigest()


def statement(evidence: Evidence) -> dict[str, Any]:
    """The in-toto Statement v1 of the evidence (predicate v2): the released files as subjects, the rest, with the
    commitments, as the predicate."""
    if not evidence.committed or any(getattr(evidence, field) is not None for field in _V1_ONLY):
        raise ValueError("only a committed evidence (v2) is written")
    fields = evidence.model_dump(mode="json", exclude=set(_V1_ONLY))
    subjects = [
        {"name": name, "digest": {"sha256": fields[SUBJECTS[name]]}}
        for name in RELEASED_SUBJECTS
        if fields[SUBJECTS[name]]
    ]
    predicate = {key: value for key, value in fields.items() if key not in SUBJECTS.values()}
    return {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE, "predicate": predicate}


def evidence_of(statement: dict[str, Any]) -> Evidence:
    """The evidence a statement states (predicate v2, or v1 as older code wrote it). Raises ValueError
    (pydantic's ValidationError among them) when it is not a docjobs evidence statement."""
    kind = statement.get("predicateType")
    if statement.get("_type") != STATEMENT_TYPE or kind not in (PREDICATE_TYPE, PREDICATE_TYPE_V1):
        raise ValueError("not a docjobs evidence statement")
    v2 = kind == PREDICATE_TYPE
    predicate, subjects = statement.get("predicate"), statement.get("subject")
    if not isinstance(predicate, dict) or not isinstance(subjects, list) or set(predicate) & set(SUBJECTS.values()):
        raise ValueError("a malformed statement")
    if v2 and (predicate.get("commitments") is None or set(predicate) & set(_V1_ONLY)):
        raise ValueError("a v2 statement binds its input by commitments only")
    if not v2 and (predicate.get("commitments") is not None or predicate.get("job_id") is None):
        raise ValueError("a malformed v1 statement")
    allowed = RELEASED_SUBJECTS if v2 else tuple(SUBJECTS)
    digests: dict[str, Any] = {}
    for subject in subjects:
        name, digest = (subject.get("name"), subject.get("digest")) if isinstance(subject, dict) else (None, None)
        field = SUBJECTS.get(name) if isinstance(name, str) and name in allowed else None
        if field is None or field in digests or not isinstance(digest, dict):
            raise ValueError("an unknown or repeated subject")
        digests[field] = digest.get("sha256")
    if not v2 and digests.get("input_sha256") is None:
        raise ValueError("a v1 statement names its source")
    return Evidence.model_validate({**predicate, **digests})


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what a DSSE signature is over."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def sign_evidence(evidence: Evidence, config: SignerConfig) -> bytes:
    """The signed DSSE envelope of the evidence's statement (canonical JSON bytes). Raises ConfigError when the
    key cannot be loaded, ValueError for an EC key on another curve than P-256."""
    return sign_envelope(canonical_json(statement(evidence)), PAYLOAD_TYPE, config)


def sign_envelope(body: bytes, payload_type: str, config: SignerConfig) -> bytes:
    """`body` in a DSSE envelope signed by the signer of `config` (the evidence's, an archive version's)."""
    material = load_signer(config)
    key = material.key
    message = pae(payload_type, body)
    if isinstance(key, rsa.RSAPrivateKey):
        signature = key.sign(message, _pss(), hashes.SHA256())
    else:
        if not isinstance(key.curve, ec.SECP256R1):
            raise ValueError("evidence signing supports EC keys on P-256 only")
        signature = key.sign(message, ec.ECDSA(hashes.SHA256()))
    certificate = material.certificate
    envelope = {
        "payload": base64.b64encode(body).decode("ascii"),
        "payloadType": payload_type,
        "signatures": [
            {
                "keyid": hashlib.sha256(certificate.public_bytes(serialization.Encoding.DER)).hexdigest(),
                "sig": base64.b64encode(signature).decode("ascii"),
                "cert": certificate.public_bytes(serialization.Encoding.PEM).decode("ascii"),
            }
        ],
    }
    return canonical_json(envelope)


@dataclass(frozen=True)
class _Opened:
    """An envelope taken apart, not yet verified: the signed bytes, the signature and the claimed payload."""

    signed: bytes
    signature: bytes
    algorithm: object
    certificate: x509.Certificate
    payload: dict[str, Any]  # the statement (DSSE) or the evidence itself (an older envelope)
    attested: bool  # a DSSE envelope (its payload is a statement)

    def evidence(self) -> Evidence:
        return evidence_of(self.payload) if self.attested else Evidence.model_validate(self.payload)


def _open(envelope: bytes) -> _Opened:
    """Raises ValueError, KeyError, TypeError or UnicodeError for an envelope of neither form."""
    parsed = json.loads(envelope, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    if "payloadType" in parsed:
        return _open_dsse(parsed)
    payload, signature_b64, cert_pem = parsed["payload"], parsed["signature"], parsed["certificate"]
    if not (isinstance(payload, dict) and isinstance(signature_b64, str) and isinstance(cert_pem, str)):
        raise ValueError("envelope fields have the wrong types")
    return _Opened(
        signed=_signed_bytes(payload, parsed.get("canonicalization")),
        signature=base64.b64decode(signature_b64, validate=True),
        algorithm=parsed["algorithm"],
        certificate=x509.load_pem_x509_certificate(cert_pem.encode("ascii")),
        payload=payload,
        attested=False,
    )


def _open_dsse(parsed: dict[str, Any]) -> _Opened:
    payload_b64, payload_type, signatures = parsed["payload"], parsed["payloadType"], parsed["signatures"]
    if payload_type != PAYLOAD_TYPE or not isinstance(payload_b64, str):
        raise ValueError("not an in-toto payload")
    if not isinstance(signatures, list) or len(signatures) != 1 or not isinstance(signatures[0], dict):
        raise ValueError("one signature expected")
    signature_b64, cert_pem = signatures[0]["sig"], signatures[0]["cert"]
    if not (isinstance(signature_b64, str) and isinstance(cert_pem, str)):
        raise ValueError("signature fields have the wrong types")
    body = _b64(payload_b64)
    statement = json.loads(body, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    if not isinstance(statement, dict):
        raise ValueError("the statement is not an object")
    certificate = x509.load_pem_x509_certificate(cert_pem.encode("ascii"))
    key = certificate.public_key()
    return _Opened(
        signed=pae(payload_type, body),
        signature=_b64(signature_b64),
        algorithm="rsa-pss-sha256" if isinstance(key, rsa.RSAPublicKey) else "ecdsa-p256-sha256",
        certificate=certificate,
        payload=statement,
        attested=True,
    )


def _b64(text: str) -> bytes:
    """DSSE allows standard or URL-safe base64."""
    if "-" in text or "_" in text:
        return base64.urlsafe_b64decode(text.encode("ascii"))
    return base64.b64decode(text, validate=True)


def envelope_evidence(envelope: bytes) -> Evidence:
    """What an envelope of either form claims, NOT verified (`verify_evidence` does that). Raises ValueError,
    KeyError, TypeError or UnicodeError for anything else."""
    return _open(envelope).evidence()


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
    converted: Path | None = None,
    salt: bytes | None = None,
) -> EvidenceCheck:
    """Check the envelope's signature and every digest or commitment for which a file is given.

    Either form (see the module docstring). "signature" breaks when the certificate does not chain to a
    configured trust root (offline, at the current time) or the signature does not verify (over the PAE of the
    payload's bytes, or over the re-canonicalized payload of an older envelope); "payload" when the payload is no
    docjobs evidence; "run" when the evidence names another job than `job_id` or another run than `run_id` (an
    envelope from before run folders names none); a digest field breaks when its file's SHA-256 differs or the
    evidence does not record that digest at all. A v2 envelope binds the job's ID, the source, an office input's
    PDF and the redaction summary by commitments: they are checked with the job's `salt` (its status holds it),
    and break without it.
    """
    try:
        opened = _open(envelope)
    except (ValueError, KeyError, TypeError, UnicodeError):
        return EvidenceCheck(broken=["envelope"], problem="the envelope is not a well-formed evidence envelope")

    broken: list[str] = []
    problem = _check_signature(opened.signed, opened.signature, opened.algorithm, opened.certificate, config)
    if problem is not None:
        broken.append("signature")
    try:
        evidence: Evidence | None = opened.evidence()
    except ValueError:  # pydantic's ValidationError too
        evidence = None
        broken.append("payload")
    if (job_id is not None or run_id is not None) and (
        evidence is None
        or (job_id is not None and not evidence.binds("job", job_id, salt))
        or (run_id is not None and evidence.run_id not in (None, run_id))
    ):
        broken.append("run")
    files = {
        "input_sha256": source,
        "output_sha256": artifact,
        "ocr_text_sha256": ocr_text,
        "redaction_summary_sha256": redaction_summary,
        "converted_sha256": converted,
    }
    broken += _unbound_files(evidence, files, salt)
    return EvidenceCheck(
        broken=broken,
        evidence=evidence,
        signer_subject=opened.certificate.subject.rfc4514_string(),
        problem=problem,
    )


def _unbound_files(evidence: Evidence | None, files: dict[str, Path | None], salt: bytes | None) -> list[str]:
    """The digest fields (in DIGEST_FIELDS' order) whose given file the evidence does not bind: by its commitment
    under `salt` (a v2 envelope), else by its recorded digest."""
    committed_as = {field: name for name, field in COMMITTED.items() if field is not None}
    unbound = []
    for name in DIGEST_FIELDS:
        path = files[name]
        if path is None:
            continue
        if evidence is not None and evidence.committed and name in committed_as:
            holds = evidence.binds(committed_as[name], sha256_file(path), salt)
        else:
            recorded = getattr(evidence, name, None) if evidence is not None else None
            holds = recorded is not None and sha256_file(path) == recorded
        if not holds:
            unbound.append(name)
    return unbound


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
