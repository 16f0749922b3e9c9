"""Verifying a long-term signature (PAdES B-LT, B-LTA) with pyHanko's AdES engine, offline, from what it embeds.

`long_term_verdict` validates the document's last regular signature fetching nothing: the DSS (and the document
timestamps) must carry every chain, OCSP response and CRL. An archive (B-LTA) gets ETSI EN 319 102-1's validation
with long-term availability (`ades_lta_validation`); a B-LT signature, which has no document timestamp to give its
validation data a proof of existence (AdES LTA answers `INDETERMINATE:NO_POE` for it), gets pyHanko's validation
at the current time with the DSS as its only revocation data, every certificate's required, and nothing changed
after the signature but the DSS. For an archive it also simulates that validation at a future date
(`simulate_future_ades_lta_validation`, by default a day after the last of the signer's and the signature
timestamp's certificates expires): it passes only if the embedded material alone will still prove the signature
once those certificates have expired, given that the archive's timestamps are renewed (docs/signing.md).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

from cryptography import x509
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.ades.report import AdESStatus, AdESSubIndic
from pyhanko.sign.diff_analysis import ModificationLevel
from pyhanko.sign.validation import ades, validate_pdf_signature
from pyhanko.sign.validation.dss import DocumentSecurityStore
from pyhanko.sign.validation.pdf_embedded import EmbeddedPdfSignature
from pyhanko.sign.validation.policy_decl import (
    PdfSignatureValidationSpec,
    RevinfoOnlineFetchingRule,
    RevocationInfoGatheringSpec,
    SignatureValidationSpec,
)
from pyhanko_certvalidator.context import CertValidationPolicySpec
from pyhanko_certvalidator.ltv.types import ValidationTimingInfo
from pyhanko_certvalidator.policy_decl import REQUIRE_REVINFO, CertRevTrustPolicy
from pyhanko_certvalidator.registry import SimpleTrustManager

from docjobs.domain.models import ADES_PASSED as PASSED
from docjobs.domain.models import LongTermVerdict
from docjobs.signing.config import TrustAnchors, asn1_certs
from docjobs.signing.long_term import signature_timestamp, tsa_certificates
from docjobs.signing.verify import KEY_USAGE, PDF_ERRORS


def _verdict(indication: AdESSubIndic) -> str:
    if indication.status is AdESStatus.PASSED:
        return PASSED
    return f"{indication.status.name}:{indication.standard_name}"


def _spec(anchors: TrustAnchors) -> PdfSignatureValidationSpec:
    """Trust the configured roots only, require revocation data for every certificate, fetch nothing."""
    policy = CertValidationPolicySpec(
        trust_manager=SimpleTrustManager.build(trust_roots=asn1_certs(anchors.roots())),
        revinfo_policy=CertRevTrustPolicy(REQUIRE_REVINFO),
    )
    return PdfSignatureValidationSpec(
        SignatureValidationSpec(
            cert_validation_policy=policy,
            revinfo_gathering_policy=RevocationInfoGatheringSpec(
                online_fetching_rule=RevinfoOnlineFetchingRule.LOCAL_ONLY
            ),
            key_usage_settings=KEY_USAGE,
        )
    )


def _with_dss(signature: EmbeddedPdfSignature, anchors: TrustAnchors) -> str:
    """`PASSED` when the signature is intact, valid and trusted now with the DSS's revocation data for every
    certificate, and nothing but validation data was added after it; else why not."""
    context = DocumentSecurityStore.read_dss(signature.reader).as_validation_context(
        {"trust_roots": asn1_certs(anchors.roots()), "allow_fetching": False, "revocation_mode": "require"}
    )
    status = validate_pdf_signature(signature, context, key_usage_settings=KEY_USAGE)
    if not (status.intact and status.valid):
        return "FAILED:HASH_FAILURE"
    if not status.trusted:
        problem = status.trust_problem_indic
        return f"INDETERMINATE:{problem.standard_name if problem else 'NOT_TRUSTED'}"
    if status.modification_level not in (ModificationLevel.NONE, ModificationLevel.LTA_UPDATES):
        return "FAILED:MODIFIED"
    return PASSED if status.bottom_line else "FAILED:BOTTOM_LINE"


def default_future(signature: EmbeddedPdfSignature) -> datetime:
    """A day after the last of the signer's and the signature timestamp's TSA certificates expires."""
    signer = x509.load_der_x509_certificate(cast(bytes, signature.signer_cert.dump()))
    ends = [signer.not_valid_after_utc]
    token = signature_timestamp(signature.pkcs7_content)
    if token is not None:
        ends.extend(cert.not_valid_after_utc for cert in tsa_certificates(token))
    return max(ends) + timedelta(days=1)


def long_term_verdict(
    path: Path, anchors: TrustAnchors, *, archival: bool, future: datetime | None = None
) -> LongTermVerdict:
    """The AdES verdicts on `path`'s last regular signature (see the module's docstring)."""
    spec = _spec(anchors)
    with path.open("rb") as file:
        try:
            reader = PdfFileReader(file, strict=False)
            signatures = cast(list[EmbeddedPdfSignature], reader.embedded_regular_signatures)
            timestamps = len(cast(list[Any], reader.embedded_timestamp_signatures))
            dss = "/DSS" in reader.root
        except PDF_ERRORS:
            return LongTermVerdict(dss=False, document_timestamps=0, ades="FAILED:UNREADABLE")
        if not signatures:
            return LongTermVerdict(dss=dss, document_timestamps=timestamps, ades="FAILED:NO_SIGNATURE")
        signature = signatures[-1]
        try:
            if not archival:
                verdict = _with_dss(signature, anchors) if dss else "FAILED:NO_DSS"
                return LongTermVerdict(dss=dss, document_timestamps=timestamps, ades=verdict)
            now = asyncio.run(ades.ades_lta_validation(signature, spec))
            at = future or default_future(signature)
            later = asyncio.run(ades.simulate_future_ades_lta_validation(signature, spec, future_validation_time=at))
        except PDF_ERRORS:
            return LongTermVerdict(dss=dss, document_timestamps=timestamps, ades="FAILED:MALFORMED")
    return LongTermVerdict(
        dss=dss,
        document_timestamps=timestamps,
        ades=_verdict(now.ades_subindic),
        future_at=at,
        future_ades=_verdict(later.ades_subindic),
    )


def validated_at(path: Path, anchors: TrustAnchors, moment: datetime) -> str:
    """pyHanko's AdES LTA verdict on `path`'s last regular signature as it would be given at `moment`, from what the
    file embeds (nothing fetched, and no timestamp presumed renewed, as `simulate_future_ades_lta_validation`
    presumes): how long an archive as it stands now proves its signature."""
    timing = ValidationTimingInfo(validation_time=moment, best_signature_time=moment, point_in_time_validation=False)
    with path.open("rb") as file:
        try:
            signatures = cast(list[EmbeddedPdfSignature], PdfFileReader(file, strict=False).embedded_regular_signatures)
            if not signatures:
                return "FAILED:NO_SIGNATURE"
            result = asyncio.run(ades.ades_lta_validation(signatures[-1], _spec(anchors), timing_info=timing))
        except PDF_ERRORS:
            return "FAILED:MALFORMED"
    return _verdict(result.ades_subindic)
