"""Failures with stable, machine-readable codes.

A code is a public contract (scripts match on it); the message is safe to show and never carries document
content, file names or metadata values. Whether a failure is retried, fails the job or quarantines it is
decided here, once, from the code.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What a failure code does to the job."""

    RETRY = "retry"  # transient: the activity is retried with backoff
    FAIL = "fail"  # deterministic: the job ends `failed` at once
    QUARANTINE = "quarantine"  # output or input cannot be trusted: the job ends `quarantined`


# code -> (outcome, default safe message)
FAILURE_CODES: dict[str, tuple[Outcome, str]] = {
    "input.malformed": (Outcome.FAIL, "the input is not a readable PDF"),
    "input.encrypted": (Outcome.FAIL, "the input PDF needs a password to open"),
    "input.unsupported": (Outcome.FAIL, "the input is not a supported document type"),
    "input.too_large": (Outcome.FAIL, "the input exceeds the configured size or page limit"),
    "input.empty": (Outcome.FAIL, "the input has no pages"),
    "input.too_complex": (Outcome.FAIL, "the input exceeds a processing limit (memory, CPU time, or a parser budget)"),
    "input.signed": (Outcome.FAIL, "the input is already signed and the policy does not allow re-signing it"),
    "input.active_content": (
        Outcome.FAIL,
        "the input contains active content (scripts, actions, rich media or attachments) and the policy refuses it",
    ),
    "source.digest_mismatch": (Outcome.QUARANTINE, "the stored input no longer matches its accepted sha256"),
    "source.missing": (Outcome.FAIL, "the stored input blob is missing"),
    "artifact.digest_mismatch": (Outcome.QUARANTINE, "a staged artifact does not match its recorded sha256"),
    "publish.conflict": (Outcome.QUARANTINE, "a different artifact was already published for this job"),
    "render.failed": (Outcome.RETRY, "rendering failed"),
    "tool.missing": (Outcome.RETRY, "a required external tool is not installed on the worker"),
    "storage.unavailable": (Outcome.RETRY, "object storage is unavailable"),
    "internal.error": (Outcome.RETRY, "an unexpected worker error; the worker log has the details"),
    "signature.invalid": (Outcome.QUARANTINE, "the output signature is missing, broken or invalid"),
    "signature.untrusted": (Outcome.QUARANTINE, "the output signature does not chain to a trusted root"),
    "signature.coverage": (Outcome.QUARANTINE, "the output signature does not cover the entire file"),
    "signature.tsa_unavailable": (Outcome.RETRY, "the timestamp authority could not be reached"),
    **{
        f"fidelity.{check}": (Outcome.QUARANTINE, "the output does not meet its contract")
        for check in ("page_count", "geometry", "links", "qpdf", "reader", "text", "watermark")
    },
    # A generated document with a font it does not carry: deterministic, and found before anything is released.
    "fidelity.fonts": (Outcome.FAIL, "the generated document has fonts that are not embedded"),
    "template.invalid": (Outcome.FAIL, "the template cannot be rendered with this data"),
    "generate.resource_refused": (
        Outcome.FAIL,
        "the document refers to resources outside the job and the policy refuses to leave them out",
    ),
    "sanitize.residue": (Outcome.QUARANTINE, "active content is still present in the output"),
    "evidence.unavailable": (Outcome.QUARANTINE, "the signed evidence of the job could not be written"),
    "ocr.page_timeout": (Outcome.FAIL, "OCR did not produce text on some pages in time"),
    "ocr.page_unreadable": (Outcome.FAIL, "OCR could not read any text on some pages, even after correcting them"),
    "ocr.invalid_output": (Outcome.QUARANTINE, "OCR produced an output that is not a valid PDF"),
    "ocr.failed": (Outcome.RETRY, "the OCR engine failed"),
    "notify.failed": (Outcome.RETRY, "the tenant's callback did not accept the event"),
    "redaction.leak": (Outcome.QUARANTINE, "redacted content is still present in the output"),
    "redaction.failed": (Outcome.RETRY, "redaction failed"),
    "redaction.region_outside": (Outcome.FAIL, "a redaction region names a page the document does not have"),
    "redaction.needs_ocr": (Outcome.FAIL, "pages to redact by pattern have no text, only images: OCR them first"),
    "stage.retries_exhausted": (Outcome.FAIL, "a stage kept failing after all retries"),
    "stage.timeout": (Outcome.FAIL, "a stage did not finish within its time budget"),
    "workflow.terminated": (Outcome.FAIL, "the job was ended outside its workflow (terminated or failed)"),
    "workflow.timed_out": (
        Outcome.FAIL,
        "the job's workflow reached its execution timeout before the job's deadline: a fault, not a deadline",
    ),
    "request.invalid": (Outcome.FAIL, "the job request could not be read or does not belong to this job ID"),
    "policy.unknown": (Outcome.FAIL, "no policy of that name is configured"),
    "policy.invalid": (Outcome.FAIL, "the policy overrides are not valid"),
    "policy.forbidden": (Outcome.FAIL, "the tenant may not use this policy"),
    "source.outside_store": (Outcome.FAIL, "the source URI does not name a blob inside this deployment's store"),
    "codec.unsealed": (Outcome.FAIL, "the job request was not sealed with this deployment's payload key"),
}


class DocJobError(Exception):
    """An error with a stable code and a safe message (no document content)."""

    def __init__(self, code: str, message: str | None = None) -> None:
        if code not in FAILURE_CODES:
            raise ValueError(f"unknown failure code {code!r}")
        self.code = code
        self.message = message or FAILURE_CODES[code][1]
        super().__init__(f"{code}: {self.message}")

    @property
    def outcome(self) -> Outcome:
        return outcome_of(self.code)


def outcome_of(code: str) -> Outcome:
    """Outcome of a code; unknown codes (e.g. from a newer worker) fail rather than retry forever."""
    return FAILURE_CODES.get(code, (Outcome.FAIL, ""))[0]
