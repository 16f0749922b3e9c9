"""Verification: pyHanko's verdicts on the last regular signature, offline, against the configured roots."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, cast

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from pyhanko.pdf_utils.crypt.api import AuthStatus
from pyhanko.pdf_utils.misc import PdfError
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.diff_analysis import ModificationLevel
from pyhanko.sign.validation import validate_pdf_signature
from pyhanko.sign.validation.errors import SignatureValidationError
from pyhanko.sign.validation.pdf_embedded import EmbeddedPdfSignature
from pyhanko.sign.validation.settings import KeyUsageConstraints
from pyhanko.sign.validation.status import PdfSignatureStatus, SignatureCoverageLevel

from docjobs.domain.base import Frozen
from docjobs.domain.errors import FailureCode
from docjobs.signing.config import SignerConfig, TrustAnchors, validation_context

# A signer certificate must allow signatures: nonRepudiation (what pyHanko asks by default) or
# digitalSignature (common on organisational document-signing certificates).
KEY_USAGE = KeyUsageConstraints(key_usage={"non_repudiation", "digital_signature"}, match_all_key_usages=False)

TENANT_CLAIM = "docjobs tenant "  # + the tenant's name: the value of the signed `group` claimed attribute

# What reading or validating an untrusted PDF can raise (pyHanko's errors derive from these).
PDF_ERRORS = (PdfError, SignatureValidationError, ValueError, KeyError, TypeError, IndexError)


Coverage = Literal["entire_file", "entire_revision", "partial", "none"]

_COVERAGE: dict[SignatureCoverageLevel, Coverage] = {
    SignatureCoverageLevel.ENTIRE_FILE: "entire_file",
    SignatureCoverageLevel.ENTIRE_REVISION: "entire_revision",
    SignatureCoverageLevel.CONTIGUOUS_BLOCK_FROM_START: "partial",
    SignatureCoverageLevel.UNCLEAR: "partial",
}


class SignatureReport(Frozen):
    """pyHanko's separate verdicts on the last regular signature of a PDF.

    intact: the digest over the signed byte ranges matches the signed one; valid: the cryptographic
    signature over the signed attributes verifies with the signer certificate; trusted: the certificate
    chains to a configured root and is usable for signing (key usage, validity); bottom_line: pyHanko's
    overall judgment (intact, valid, trusted, the timestamp token if any, DocMDP and seed values);
    coverage: how much of the file the signed byte ranges cover.
    """

    signature_count: int  # regular signatures in the file (document timestamps excluded)
    intact: bool = False
    valid: bool = False
    trusted: bool = False
    bottom_line: bool = False
    coverage: Coverage = "none"
    # after the signed revision: none, lta_updates, form_filling, annotations, other (None: not analysed)
    modification_level: str | None = None
    docmdp_ok: bool | None = None
    signer_subject: str | None = None
    certificate_sha256: str | None = None
    field_name: str | None = None
    level: str | None = None  # "B-B", "B-T" for PAdES (ETSI.CAdES.detached); "CMS" for other subfilters
    timestamp_trusted: bool | None = None  # the signature timestamp token (B-T), if present
    trust_problem: str | None = None  # AdES sub-indication when not trusted, e.g. NO_CERTIFICATE_CHAIN_FOUND
    problem: str | None = None  # why the signature could not be evaluated at all (safe, generic text)
    reason: str | None = None  # the signature dictionary's /Reason (docjobs: "docjobs release for tenant NAME")
    tenant: str | None = None  # the tenant named by the signed claim (docjobs' signer-attributes-v2 `group`)
    docmdp: int | None = None  # the DocMDP permission it sets (certification, or its field's /Lock): 1 = locked

    @property
    def failure_code(self) -> FailureCode | None:
        return failure_code(self)


def failure_code(report: SignatureReport, *, long_term: bool = False) -> FailureCode | None:
    """None when the signature is acceptable, otherwise the failure code (all QUARANTINE).

    signature.invalid: no signature, or not intact / not valid (also any other `bottom_line` failure,
    e.g. an invalid timestamp token); signature.untrusted: cryptographically fine but the certificate (or
    the timestamp's) does not chain to a configured root; signature.coverage: the signature does not
    cover the entire file (something was appended after signing). A `long_term` signature (B-LT, B-LTA) covers its
    revision, and what follows it may be validation data only (a DSS, document timestamps: `lta_updates`).
    """
    if report.signature_count == 0 or not (report.intact and report.valid):
        return FailureCode.SIGNATURE_INVALID
    if not report.trusted or report.timestamp_trusted is False:
        return FailureCode.SIGNATURE_UNTRUSTED
    extended = long_term and report.coverage == "entire_revision" and report.modification_level == "lta_updates"
    if report.coverage != "entire_file" and not extended:
        return FailureCode.SIGNATURE_COVERAGE
    if not report.bottom_line:
        return FailureCode.SIGNATURE_INVALID
    return None


def verify_pdf(path: Path, config: SignerConfig | TrustAnchors) -> SignatureReport:
    """Validate the last regular signature of `path` against `config`'s trust roots (offline)."""
    context = validation_context(config)
    with path.open("rb") as file:
        try:
            reader = PdfFileReader(file, strict=False)
            if reader.encrypted and reader.decrypt(b"").status == AuthStatus.FAILED:
                return SignatureReport(signature_count=0, problem="the PDF is encrypted with a user password")
            signatures = cast(list[EmbeddedPdfSignature], reader.embedded_regular_signatures)
        except PDF_ERRORS:
            return SignatureReport(signature_count=0, problem="the PDF or its signature fields are unreadable")
        if not signatures:
            return SignatureReport(signature_count=0, problem="the PDF has no signature")
        signature = signatures[-1]
        try:
            status = validate_pdf_signature(signature, context, key_usage_settings=KEY_USAGE)
        except PDF_ERRORS:
            return SignatureReport(
                signature_count=len(signatures),
                field_name=str(signature.field_name),
                problem="the signature could not be evaluated (malformed signature data)",
            )
    return _report(status, signature, len(signatures))


def _report(status: PdfSignatureStatus, signature: EmbeddedPdfSignature, count: int) -> SignatureReport:
    cert = x509.load_der_x509_certificate(cast(bytes, status.signing_cert.dump()))
    level: ModificationLevel | None = status.modification_level
    subfilter = str(signature.sig_object.get("/SubFilter", ""))
    timestamp = status.timestamp_validity
    pades_level = ("B-T" if timestamp is not None else "B-B") if subfilter == "/ETSI.CAdES.detached" else "CMS"
    timestamp_ok = None if timestamp is None else bool(timestamp.intact and timestamp.valid and timestamp.trusted)
    problem = status.trust_problem_indic
    reason = signature.sig_object.get("/Reason")
    docmdp = signature.docmdp_level
    return SignatureReport(
        signature_count=count,
        intact=status.intact,
        valid=status.valid,
        trusted=status.trusted,
        bottom_line=status.bottom_line,
        coverage=_COVERAGE.get(status.coverage, "none") if status.coverage is not None else "none",
        modification_level=level.name.lower() if level is not None else None,
        docmdp_ok=status.docmdp_ok,
        signer_subject=cert.subject.rfc4514_string(),
        certificate_sha256=cert.fingerprint(hashes.SHA256()).hex(),
        field_name=str(signature.field_name),
        level=pades_level,
        timestamp_trusted=timestamp_ok,
        trust_problem=None if problem is None else str(problem.standard_name),
        reason=None if reason is None else str(reason),
        tenant=_claimed_tenant(status),
        docmdp=None if docmdp is None else int(docmdp.value),
    )


def _claimed_tenant(status: PdfSignatureStatus) -> str | None:
    """The tenant docjobs names in the signed attributes (a `group` claimed attribute, "docjobs tenant NAME")."""
    assertions = status.cades_signer_attrs
    if assertions is None or "group" not in assertions.claimed_attrs:
        return None
    for syntax in assertions.claimed_attrs["group"].attr_values:
        for value in cast(Any, syntax).native.get("values") or ():
            if isinstance(value, str) and value.startswith(TENANT_CLAIM):
                return value.removeprefix(TENANT_CLAIM)
    return None
