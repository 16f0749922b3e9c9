"""Failures with stable, machine-readable codes.

A code is a public contract (scripts match on it); the message is safe to show and never carries document
content, file names or metadata values. Whether a failure is retried, fails the job or quarantines it is
decided here, once, from the code.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class Outcome(StrEnum):
    """What a failure code does to the job."""

    RETRY = "retry"  # transient: the activity is retried with backoff
    FAIL = "fail"  # deterministic: the job ends `failed` at once
    QUARANTINE = "quarantine"  # output or input cannot be trusted: the job ends `quarantined`


class CodeInfo(NamedTuple):
    """One failure code: what it does to the job and its default safe message; then as operators read it, in the
    tables of docs/failure-codes.md and RUNBOOK.md (`starter.py codes --write ...`): how the job ends in words,
    what the code means, and what to do about it."""

    outcome: Outcome
    message: str
    state: str
    meaning: str
    action: str


class FailureCode(StrEnum):
    """A failure's stable code. Its value is the wire string (workflow histories, the status JSON, API answers,
    metric labels, scripts that match on it), so a member is never renamed nor given another value. Typed, a
    raise names a code mypy knows; what the code does and means is its `info`, in `FAILURE_CODES`."""

    INPUT_MALFORMED = "input.malformed"
    INPUT_ENCRYPTED = "input.encrypted"
    INPUT_UNSUPPORTED = "input.unsupported"
    INPUT_TOO_LARGE = "input.too_large"
    INPUT_EMPTY = "input.empty"
    INPUT_TOO_COMPLEX = "input.too_complex"
    INPUT_SIGNED = "input.signed"
    INPUT_ACTIVE_CONTENT = "input.active_content"
    SOURCE_DIGEST_MISMATCH = "source.digest_mismatch"
    SOURCE_MISSING = "source.missing"
    ARTIFACT_DIGEST_MISMATCH = "artifact.digest_mismatch"
    PUBLISH_CONFLICT = "publish.conflict"
    RENDER_FAILED = "render.failed"
    TOOL_MISSING = "tool.missing"
    STORAGE_UNAVAILABLE = "storage.unavailable"
    INTERNAL_ERROR = "internal.error"
    SIGNATURE_INVALID = "signature.invalid"
    SIGNATURE_UNTRUSTED = "signature.untrusted"
    SIGNATURE_COVERAGE = "signature.coverage"
    SIGNATURE_LONG_TERM = "signature.long_term"
    SIGNATURE_TSA_UNAVAILABLE = "signature.tsa_unavailable"
    SIGNATURE_REVOCATION_UNAVAILABLE = "signature.revocation_unavailable"
    SIGNATURE_SIGNER_REVOKED = "signature.signer_revoked"
    SIGNATURE_BYTE_RANGE = "signature.byte_range"
    SIGNATURE_DICTIONARY = "signature.dictionary"
    FIDELITY_PAGE_COUNT = "fidelity.page_count"
    FIDELITY_GEOMETRY = "fidelity.geometry"
    FIDELITY_LINKS = "fidelity.links"
    FIDELITY_QPDF = "fidelity.qpdf"
    FIDELITY_READER = "fidelity.reader"
    FIDELITY_TEXT = "fidelity.text"
    FIDELITY_WATERMARK = "fidelity.watermark"
    FIDELITY_FONTS = "fidelity.fonts"
    TEMPLATE_INVALID = "template.invalid"
    GENERATE_RESOURCE_REFUSED = "generate.resource_refused"
    SANITIZE_RESIDUE = "sanitize.residue"
    EVIDENCE_UNAVAILABLE = "evidence.unavailable"
    OCR_PAGE_TIMEOUT = "ocr.page_timeout"
    OCR_PAGE_UNREADABLE = "ocr.page_unreadable"
    OCR_INVALID_OUTPUT = "ocr.invalid_output"
    OCR_FAILED = "ocr.failed"
    NOTIFY_FAILED = "notify.failed"
    REDACTION_LEAK = "redaction.leak"
    REDACTION_FAILED = "redaction.failed"
    REDACTION_REGION_OUTSIDE = "redaction.region_outside"
    REDACTION_NEEDS_OCR = "redaction.needs_ocr"
    STAGE_RETRIES_EXHAUSTED = "stage.retries_exhausted"
    STAGE_TIMEOUT = "stage.timeout"
    WORKFLOW_TERMINATED = "workflow.terminated"
    WORKFLOW_TIMED_OUT = "workflow.timed_out"
    REQUEST_INVALID = "request.invalid"
    POLICY_UNKNOWN = "policy.unknown"
    POLICY_INVALID = "policy.invalid"
    POLICY_FORBIDDEN = "policy.forbidden"
    POLICY_CHANGED = "policy.changed"
    SOURCE_OUTSIDE_STORE = "source.outside_store"
    CODEC_UNSEALED = "codec.unsealed"

    @property
    def info(self) -> CodeInfo:
        return FAILURE_CODES[self]


# The seven fidelity checks fail alike; the code names which one failed.
_CONTRACT_BROKEN = CodeInfo(
    Outcome.QUARANTINE,
    "the output does not meet its contract",
    "quarantined",
    "the output breaks its contract (pages, boxes, text, links, watermark, qpdf, second reader)",
    "the failing check is in the code; escalate with the job ID",
)


# Every code, once, in the order the tables list them (tests/test_failure_codes.py checks none is missing).
FAILURE_CODES: dict[FailureCode, CodeInfo] = {
    FailureCode.INPUT_MALFORMED: CodeInfo(
        Outcome.FAIL,
        "the input is not a readable PDF",
        "failed",
        "a PDF: truncated (no `%%EOF`), a stream whose data does not decode, page content or a page tree that cannot "
        "be read: data would be lost. What qpdf repairs without loss is processed instead (status `repaired: true`, "
        "`repair_warnings: N`); a generated job: a zip bundle that is not a readable zip, has an entry leading outside"
        " its folder, a link, two entries of one name or no `index.html`; template data that is not a JSON object",
        "a PDF: ask for the original file (re-export it, or upload it again if the upload was interrupted); a "
        "generated job: tell the caller; a bundle with `../` names or links is worth noting as an attempt",
    ),
    FailureCode.INPUT_ENCRYPTED: CodeInfo(
        Outcome.FAIL,
        "the input PDF needs a password to open",
        "failed",
        "needs a password, or is encrypted (even with an empty user password) and the policy sets `refuse_encrypted = "
        "true`",
        "ask for an unprotected copy; or use a policy without `refuse_encrypted` if an empty-password file may be "
        "processed (`input_encryption: permissions_only` in the status)",
    ),
    FailureCode.INPUT_UNSUPPORTED: CodeInfo(
        Outcome.FAIL,
        "the input is not a supported document type",
        "failed",
        "not a PDF or a supported image (checked by content)",
        "tell the caller; nothing to retry",
    ),
    FailureCode.INPUT_TOO_LARGE: CodeInfo(
        Outcome.FAIL,
        "the input exceeds the configured size or page limit",
        "failed / rejected",
        "over the byte limit or the policy's `max_pages`",
        "raise the limit only if the workers can take it",
    ),
    FailureCode.INPUT_EMPTY: CodeInfo(
        Outcome.FAIL,
        "the input has no pages",
        "failed",
        "no pages",
        "tell the caller",
    ),
    FailureCode.INPUT_TOO_COMPLEX: CodeInfo(
        Outcome.FAIL,
        "the input exceeds a processing limit (memory, CPU time, or a parser budget)",
        "failed",
        "the document exhausts a parser budget or its document child's limit; the message names which: a stream "
        "decoding to more than 256 MiB, more than 1000000 operators on a page, a page or image over 100 megapixels, a "
        "tree nested too deep (the policy's `limits.*`, see \"Parser budgets\" below); the child's memory "
        "(`DOCJOBS_STAGE_MEMORY_MB`), its CPU seconds (the stage's base + per-page seconds) or `DOCJOBS_STALL_SECONDS`"
        " without progress",
        "usually a hostile or broken file: tell the caller. For a trusted tenant with genuinely heavy documents, raise"
        " the named `limits.*` setting in that tenant's policy, or the worker setting that was hit on the workers that"
        " serve it; never raise them for everybody to let one file through",
    ),
    FailureCode.INPUT_SIGNED: CodeInfo(
        Outcome.FAIL,
        "the input is already signed and the policy does not allow re-signing it",
        "failed",
        "already signed; the policy does not allow re-signing",
        "use a policy with `sign.allow_signed_input = true` if voiding the signatures is acceptable",
    ),
    FailureCode.INPUT_ACTIVE_CONTENT: CodeInfo(
        Outcome.FAIL,
        "the input contains active content (scripts, actions, rich media or attachments) and the policy refuses it",
        "failed",
        "the input has scripts, launch/submit/import/remote actions, rich media, XFA or (unless kept) attachments, and"
        " the policy's `sanitize.mode` is `fail`; the message names the kinds",
        "tell the caller; if the document may lose them, resubmit with a `strip` policy (the default), which removes "
        "them and counts what went in `sanitized`",
    ),
    FailureCode.SOURCE_DIGEST_MISMATCH: CodeInfo(
        Outcome.QUARANTINE,
        "the stored input no longer matches its accepted sha256",
        "quarantined",
        "the stored input changed after acceptance",
        "treat as an integrity incident: who can write the blob store? Do not resubmit blindly",
    ),
    FailureCode.SOURCE_MISSING: CodeInfo(
        Outcome.FAIL,
        "the stored input blob is missing",
        "failed",
        "the source blob named by the input is not there, is a source only another tenant stored, or is another key "
        "in docjobs' own folders (`jobs/`, `templates/`, `batches/`): one answer for all three (only `resolve` ran); "
        "a template job whose manifest names another tenant's data or template (`generate`)",
        "the service must store the document in the deployment's store first, under the URI it sends (its own key, "
        "or an upload by that tenant). Sources stored before ownership markers existed have no owner: naming such a "
        "digest gives `source.missing` until the tenant uploads the document again, and so does a job accepted "
        'before that upgrade whose first stage runs after it: drain before upgrading (see "Draining workers for a '
        'deploy")',
    ),
    FailureCode.ARTIFACT_DIGEST_MISMATCH: CodeInfo(
        Outcome.QUARANTINE,
        "a staged artifact does not match its recorded sha256",
        "quarantined",
        "a staged file changed between stages; at download (API log: `download of job JOB_ID broken off`; the job "
        "is unchanged), a published artifact or evidence no longer matches the digest the job recorded: the API "
        "broke the download off and the client got an incomplete body",
        "an integrity incident, as for `source.digest_mismatch` (for the staging area); at download: compare the "
        "blob with `output_sha256`/`evidence_sha256` (`starter.py fetch` refuses it too); restore it from a backup "
        "or resubmit under a new key",
    ),
    FailureCode.PUBLISH_CONFLICT: CodeInfo(
        Outcome.QUARANTINE,
        "a different artifact was already published for this job",
        "quarantined",
        "a different artifact was already published for this job",
        "compare both digests (audit); never overwrite the published one by hand",
    ),
    FailureCode.RENDER_FAILED: CodeInfo(
        Outcome.RETRY,
        "rendering failed",
        "retried, then failed",
        "transient trouble",
        "look at the worker log of that attempt (codes and exception types only)",
    ),
    FailureCode.TOOL_MISSING: CodeInfo(
        Outcome.RETRY,
        "a required external tool is not installed on the worker",
        "retried, then failed",
        "a worker lacks a binary (tesseract, qpdf, poppler, OCRmyPDF)",
        "fix the worker image: the log says which tool, loudly",
    ),
    FailureCode.STORAGE_UNAVAILABLE: CodeInfo(
        Outcome.RETRY,
        "object storage is unavailable",
        "retried, then failed",
        "the blob store did not answer",
        "check S3/MinIO or the shared volume",
    ),
    FailureCode.INTERNAL_ERROR: CodeInfo(
        Outcome.RETRY,
        "an unexpected worker error; the worker log has the details",
        "retried, then failed",
        "transient trouble",
        "look at the worker log of that attempt (codes and exception types only)",
    ),
    FailureCode.SIGNATURE_INVALID: CodeInfo(
        Outcome.QUARANTINE,
        "the output signature is missing, broken or invalid",
        "quarantined",
        "the output signature is broken or missing, or does not name the job's tenant or lock the document",
        "check the signer key and pyHanko/tool versions in the evidence; a signature that names another tenant is "
        "a security event",
    ),
    FailureCode.SIGNATURE_UNTRUSTED: CodeInfo(
        Outcome.QUARANTINE,
        "the output signature does not chain to a trusted root",
        "quarantined",
        "the signer does not chain to `DOCJOBS_TRUST_ROOTS`",
        "fix the trust roots or the signing certificate on the workers",
    ),
    FailureCode.SIGNATURE_COVERAGE: CodeInfo(
        Outcome.QUARANTINE,
        "the output signature does not cover the entire file",
        "quarantined",
        "something was appended after signing",
        "a stage after `sign` changed the file: a bug, escalate",
    ),
    FailureCode.SIGNATURE_LONG_TERM: CodeInfo(
        Outcome.QUARANTINE,
        "the long-term signature does not validate from what it embeds",
        "quarantined",
        "the policy asked B-LT or B-LTA, and pyHanko's AdES validation of the released file (offline, from its DSS and "
        "document timestamp alone; for B-LTA also simulated past the signer's and the TSA's certificates' expiry) did "
        "not pass",
        "check that the revocation data of every certificate of the signer's and the TSA's chains is reachable at "
        "DOCJOBS_REVOCATION_URLS, and retry the job",
    ),
    FailureCode.SIGNATURE_TSA_UNAVAILABLE: CodeInfo(
        Outcome.RETRY,
        "the timestamp authority could not be reached",
        "retried, then failed",
        "transient trouble",
        "look at the worker log of that attempt (codes and exception types only)",
    ),
    FailureCode.SIGNATURE_REVOCATION_UNAVAILABLE: CodeInfo(
        Outcome.RETRY,
        "the revocation status of the signing certificates could not be obtained",
        "retried, then failed",
        "a long-term signature (PAdES B-LT, B-LTA) needs the OCSP responses or CRLs of the signer's and the TSA's "
        "certificates, and a responder or CRL location did not answer, answered too slowly or too much, or is not "
        "among the configured ones",
        "check that the certificates' OCSP and CRL URLs are configured and answer; the worker log names the reason",
    ),
    FailureCode.SIGNATURE_SIGNER_REVOKED: CodeInfo(
        Outcome.FAIL,
        "a signing certificate is revoked, or not valid now",
        "failed",
        "the signer's (or its CA's, or the TSA's) certificate is revoked or expired by its CA's own revocation data: "
        "nothing is signed with it",
        "replace the signing certificate; jobs signed before its revocation keep their evidence",
    ),
    FailureCode.SIGNATURE_BYTE_RANGE: CodeInfo(
        Outcome.QUARANTINE,
        "the document prepared for signing does not leave exactly the signature's place unsigned",
        "quarantined",
        "the sign stage's document child prepared a file the worker would not sign (ranges leaving bytes unsigned, "
        "a hole not empty or of the wrong size, the rendered document changed)",
        "a compromised or broken child: keep the attempt's logs, escalate as a security event",
    ),
    FailureCode.SIGNATURE_DICTIONARY: CodeInfo(
        Outcome.QUARANTINE,
        "the signature dictionary prepared for signing is not the one the worker expects for this job",
        "quarantined",
        "the release gate read, in the file prepared for signing, a signature dictionary other than the worker's "
        "(a `/Reason` naming another tenant, no DocMDP P1 certification or FieldMDP lock, another filter, a second "
        "empty signature, a byte range other than the one checked); nothing was signed",
        "a compromised or broken child: keep the attempt's logs, escalate as a security event",
    ),
    FailureCode.FIDELITY_PAGE_COUNT: _CONTRACT_BROKEN,
    FailureCode.FIDELITY_GEOMETRY: _CONTRACT_BROKEN,
    FailureCode.FIDELITY_LINKS: _CONTRACT_BROKEN,
    FailureCode.FIDELITY_QPDF: _CONTRACT_BROKEN,
    FailureCode.FIDELITY_READER: _CONTRACT_BROKEN,
    FailureCode.FIDELITY_TEXT: _CONTRACT_BROKEN,
    FailureCode.FIDELITY_WATERMARK: _CONTRACT_BROKEN,
    FailureCode.FIDELITY_FONTS: CodeInfo(
        Outcome.FAIL,
        "the generated document has fonts that are not embedded",
        "failed",
        "the generated PDF uses a font it does not embed",
        "the template or HTML names a font WeasyPrint could not embed: ship the font in the bundle (`@font-face`)",
    ),
    FailureCode.TEMPLATE_INVALID: CodeInfo(
        Outcome.FAIL,
        "the template cannot be rendered with this data",
        "failed",
        "the tenant's template cannot be rendered with the job's data; the message names the kind (undefined value, "
        "syntax error, an operation the sandbox refuses, no end within `generate.template_seconds`) and the template's"
        " line",
        "tell the tenant: their template or their data is wrong (the data is never in the message: look at the "
        "template line with them). A sandbox refusal may be an attack: note the tenant",
    ),
    FailureCode.GENERATE_RESOURCE_REFUSED: CodeInfo(
        Outcome.FAIL,
        "the document refers to resources outside the job and the policy refuses to leave them out",
        "failed",
        "the HTML reaches outside the job (http(s), files outside its bundle, attachments) and the policy's "
        "`generate.missing` is `fail`; the message counts by kind",
        'tell the caller to put every resource in the bundle (or inline it as `data:`); with `missing = "ignore"` (the'
        " default) such resources are left out and counted in `generated.refused`",
    ),
    FailureCode.SANITIZE_RESIDUE: CodeInfo(
        Outcome.QUARANTINE,
        "active content is still present in the output",
        "quarantined",
        "the release gate (before signing) or `verify` found active content in the bytes that would have been "
        "signed or released; nothing was signed or released",
        "a bug or a kind the strip does not know: keep the job ID, do not release the input by hand, escalate with the"
        " policy version (the worker log has no content)",
    ),
    FailureCode.EVIDENCE_UNAVAILABLE: CodeInfo(
        Outcome.QUARANTINE,
        "the signed evidence of the job could not be written",
        "quarantined",
        "the signed evidence could not be written",
        "check the signer configuration and the blob store",
    ),
    FailureCode.OCR_PAGE_TIMEOUT: CodeInfo(
        Outcome.FAIL,
        "OCR did not produce text on some pages in time",
        "failed",
        "Tesseract ran out of time on the pages the message names",
        "raise the policy's `tesseract_timeout`; check the worker's CPU load",
    ),
    FailureCode.OCR_PAGE_UNREADABLE: CodeInfo(
        Outcome.FAIL,
        "OCR could not read any text on some pages, even after correcting them",
        "failed",
        "the named pages have ink but OCR read no text, even after docjobs' own correction (deskew, despeckle, "
        "contrast, 400 dpi)",
        "look at the page (a photo, a drawing, handwriting, a language not in `languages`?); resubmit with "
        '`ocr.unreadable = "image_only"` to release such pages without text (listed in `pages_unreadable`)',
    ),
    FailureCode.OCR_INVALID_OUTPUT: CodeInfo(
        Outcome.QUARANTINE,
        "OCR produced an output that is not a valid PDF",
        "quarantined",
        "OCRmyPDF produced an invalid PDF",
        "keep the job ID; check OCRmyPDF/Ghostscript versions",
    ),
    FailureCode.OCR_FAILED: CodeInfo(
        Outcome.RETRY,
        "the OCR engine failed",
        "retried, then failed",
        "transient trouble",
        "look at the worker log of that attempt (codes and exception types only)",
    ),
    FailureCode.NOTIFY_FAILED: CodeInfo(
        Outcome.RETRY,
        "the tenant's callback did not accept the event",
        "unchanged (`notification: failed`)",
        "the tenant's callback did not take the terminal event after 6 attempts",
        'the job itself is fine; see "Webhook deliveries failing"',
    ),
    FailureCode.REDACTION_LEAK: CodeInfo(
        Outcome.QUARANTINE,
        "redacted content is still present in the output",
        "quarantined",
        "after redaction, poppler, pypdf or the document scan still found a matched value, a pattern, or text inside a"
        " region; nothing was released",
        "never release the input by hand; `status` shows the redaction summary (counts, fallback pages), the message "
        "names the kind of leak (`value`, `pattern:…`, `in_region`, `metadata`, …); escalate with the job ID and the "
        "policy version",
    ),
    FailureCode.REDACTION_FAILED: CodeInfo(
        Outcome.RETRY,
        "redaction failed",
        "retried, then failed",
        "a redaction tool failed or timed out",
        "transient; check the worker log for the exception type",
    ),
    FailureCode.REDACTION_REGION_OUTSIDE: CodeInfo(
        Outcome.FAIL,
        "a redaction region names a page the document does not have",
        "failed",
        "a `--redact-region` names a page the document does not have",
        "resubmit with the right page number",
    ),
    FailureCode.REDACTION_NEEDS_OCR: CodeInfo(
        Outcome.FAIL,
        "pages to redact by pattern have no text, only images: OCR them first",
        "failed",
        "patterns were asked for, but the named pages are only images, with no text to search",
        "resubmit with `--ocr` or the `scan` policy (regions need no OCR)",
    ),
    FailureCode.STAGE_RETRIES_EXHAUSTED: CodeInfo(
        Outcome.FAIL,
        "a stage kept failing after all retries",
        "failed",
        "a stage ran out of time or attempts",
        "check worker capacity and the lease/timeouts settings",
    ),
    FailureCode.STAGE_TIMEOUT: CodeInfo(
        Outcome.FAIL,
        "a stage did not finish within its time budget",
        "failed",
        "a stage ran out of time or attempts",
        "check worker capacity and the lease/timeouts settings",
    ),
    FailureCode.WORKFLOW_TERMINATED: CodeInfo(
        Outcome.FAIL,
        "the job was ended outside its workflow (terminated or failed)",
        "failed",
        "someone terminated the workflow",
        'find out who; do not terminate jobs to "unstick" them, cancel them',
    ),
    FailureCode.WORKFLOW_TIMED_OUT: CodeInfo(
        Outcome.FAIL,
        "the job's workflow reached its execution timeout before the job's deadline: a fault, not a deadline",
        "failed",
        "Temporal's execution timeout closed the run before the job's deadline: the workflow did not end itself (stuck"
        " workflow tasks, a bug, or a start that did not come from docjobs with a shorter timeout)",
        "`audit JOB_ID`: look for `workflow_task_failed` events and the worker log of the workflow; escalate with the "
        "job ID",
    ),
    FailureCode.REQUEST_INVALID: CodeInfo(
        Outcome.FAIL,
        "the job request could not be read or does not belong to this job ID",
        "failed",
        "the workflow was started with an input off the schema, a public input whose tenant is not the workflow ID's "
        "prefix or whose `callback` cannot be used, or the internal `JobRequest` (only runs of old histories were "
        "started with it) (nothing ran, no blob was touched)",
        'a service\'s bug, or someone reached the frontend: see "Refused starts"',
    ),
    FailureCode.POLICY_UNKNOWN: CodeInfo(
        Outcome.FAIL,
        "no policy of that name is configured",
        "failed",
        "a service started a job (public input) naming no configured policy (only `resolve` ran), or a batch asked "
        "for one (its first step, `pin_batch_policy`, ended it `failed`: no job started)",
        "tell the service; compare `DOCJOBS_POLICY_FILE` of the workers with what it expects",
    ),
    FailureCode.POLICY_INVALID: CodeInfo(
        Outcome.FAIL,
        "the policy overrides are not valid",
        "failed",
        "a service started a job (public input), or a batch, with overrides that do not validate (only `resolve`, or "
        "the batch's `pin_batch_policy`, ran: no job started); the API and the CLI refuse them before anything is "
        "stored",
        "tell the service what the overrides' schema allows (`schemas/`)",
    ),
    FailureCode.POLICY_FORBIDDEN: CodeInfo(
        Outcome.FAIL,
        "the tenant may not use this policy",
        "failed (API: 403)",
        'the tenant named a policy it may not use: a trusted-only one (`sanitize.mode = "keep"` or `trusted_only = '
        "true`) it was not given, or one its `policies` list in the tenants file leaves out (only `resolve` ran; the "
        "API stored nothing)",
        "if the tenant should have it: its entry in `DOCJOBS_TENANTS_FILE` lists its policies (`tenant add NAME "
        "--policies A,B` writes it; the file is re-read while the API and workers run); never unmark a `keep` "
        "policy to let one tenant through",
    ),
    FailureCode.POLICY_CHANGED: CodeInfo(
        Outcome.FAIL,
        "the policy resolves to another version than the one the job was started for",
        "failed",
        "the job was started for a policy version (`policy_version` of the public input: every document of a batch "
        "names the version its batch pinned) and the named policy with its overrides resolves to another on the "
        "workers: the policy file changed in between (only `resolve` ran)",
        "if the new policy is meant: submit again (a new batch for a batch's documents); else restore the policy "
        "file. Compare `DOCJOBS_POLICY_FILE` of the workers with the API's and the CLI's",
    ),
    FailureCode.SOURCE_OUTSIDE_STORE: CodeInfo(
        Outcome.FAIL,
        "the source URI does not name a blob inside this deployment's store",
        "failed",
        "the URI names no blob inside `DOCJOBS_STORAGE_URL` (only `resolve` ran)",
        "the service must store the document in the deployment's store first, under the URI it sends",
    ),
    FailureCode.CODEC_UNSEALED: CodeInfo(
        Outcome.FAIL,
        "the job request was not sealed with this deployment's payload key",
        "failed",
        "payload keys are configured and the request was plaintext, sealed for another workflow, or sealed for no "
        "workflow (by a tool that still calls the codec endpoint's removed `/encode`); nothing ran",
        'a forged start, or a client without `DOCJOBS_CODEC_KEYS_FILE`: see "Refused starts"',
    ),
}


# The codes that say a provider did not answer (the store, the TSA, a revocation responder), not that the document
# failed: their retries wait longer (`outage_retry_seconds`), so that a stage's attempts outlast an outage of a few
# minutes instead of spending themselves in its first 15 seconds (the retry policy's 1, 2, 4, 8 s).
PROVIDER_OUTAGES = frozenset(
    {
        FailureCode.STORAGE_UNAVAILABLE,
        FailureCode.SIGNATURE_TSA_UNAVAILABLE,
        FailureCode.SIGNATURE_REVOCATION_UNAVAILABLE,
    }
)
OUTAGE_FIRST_RETRY_SECONDS = 5.0
OUTAGE_RETRY_CAP_SECONDS = 120.0


def outage_retry_seconds(attempt: int) -> float:
    """How long after its `attempt`-th attempt (1: the first) failed with a provider's outage an activity is tried
    again: 5 s, 15 s, 45 s, then 2 minutes each. A job's five attempts (the default) span over three minutes of an
    outage; its deadline still bounds them all."""
    return min(OUTAGE_FIRST_RETRY_SECONDS * 3.0 ** (max(attempt, 1) - 1), OUTAGE_RETRY_CAP_SECONDS)


GUIDE_MARKERS = ("<!-- failure codes: generated from docjobs/domain/errors.py -->", "<!-- end of failure codes -->")


def failure_code_table() -> str:
    """The failure codes as a Markdown table, between their markers (what `starter.py codes --write` puts in a
    page, and what tests/test_failure_codes.py compares each page against)."""
    rows = [f"| `{code}` | {info.state} | {info.meaning} | {info.action} |" for code, info in FAILURE_CODES.items()]
    header = ["| code | state | meaning | what to do |", "|---|---|---|---|"]
    return "\n".join([GUIDE_MARKERS[0], *header, *rows, GUIDE_MARKERS[1]])


class DocJobError(Exception):
    """An error with a stable code and a safe message (no document content)."""

    def __init__(self, code: FailureCode, message: str | None = None) -> None:
        # A string that reached here past the type checker must still name a code (ValueError otherwise); `code`
        # is then always a member.
        self.code = FailureCode(code)
        self.message = message or self.code.info.message
        super().__init__(f"{self.code}: {self.message}")

    @property
    def outcome(self) -> Outcome:
        return self.code.info.outcome


def known_code(code: str | None) -> FailureCode | None:
    """The member a code read from the wire names (a history, a status, a child's answer); None for no code, or
    one this build does not know (e.g. from a newer worker)."""
    try:
        return None if code is None else FailureCode(code)
    except ValueError:
        return None


def outcome_of(code: str) -> Outcome:
    """Outcome of a code; unknown codes (e.g. from a newer worker) fail rather than retry forever."""
    known = known_code(code)
    return known.info.outcome if known else Outcome.FAIL
