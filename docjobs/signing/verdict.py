"""The `verify` stage's judgment of a release's signature (run in its document child): pyHanko's verdicts, the
tenant and the lock docjobs' signature must carry, and at B-LT or B-LTA the validation from what the file embeds
(docjobs/signing/long_term_verify.py)."""

from __future__ import annotations

from pathlib import Path

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import SignatureVerdict
from docjobs.domain.policy import SignLevel
from docjobs.signing.config import TrustAnchors
from docjobs.signing.long_term_verify import long_term_verdict
from docjobs.signing.verify import failure_code, verify_pdf


def verified_signature(
    output: Path, trust: TrustAnchors, tenant: str | None, level: SignLevel | None
) -> SignatureVerdict:
    """pyHanko's verdicts on the release's signature; raises DocJobError (quarantine) unless it is acceptable, names
    `tenant` and locks the document (when `tenant` is set) and, at B-LT or B-LTA, validates from what it embeds."""
    long_term = level is not None and level.long_term
    report = verify_pdf(output, trust)
    code = failure_code(report, long_term=long_term)
    if code is not None:
        raise DocJobError(code)
    if tenant is not None and (report.tenant != tenant or report.docmdp != 1):
        raise DocJobError(FailureCode.SIGNATURE_INVALID, "the signature does not name the tenant, or does not lock")
    checked = {"tenant", "docmdp"} if tenant is not None else set()
    verdict = SignatureVerdict.model_validate(report.model_dump(exclude={"tenant", "docmdp"} - checked))
    if level is None or not long_term:
        return verdict
    archive = long_term_verdict(output, trust, archival=level.archival)
    if not archive.passed(archival=level.archival) or archive.level != level.value.upper():
        raise DocJobError(FailureCode.SIGNATURE_LONG_TERM)
    return verdict.model_copy(update={"level": archive.level, "long_term": archive})
