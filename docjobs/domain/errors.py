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
    "signature.byte_range": (
        Outcome.QUARANTINE,
        "the document prepared for signing does not leave exactly the signature's place unsigned",
    ),
    "signature.dictionary": (
        Outcome.QUARANTINE,
        "the signature dictionary prepared for signing is not the one the worker expects for this job",
    ),
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
    "policy.changed": (Outcome.FAIL, "the policy resolves to another version than the one the job was started for"),
    "source.outside_store": (Outcome.FAIL, "the source URI does not name a blob inside this deployment's store"),
    "codec.unsealed": (Outcome.FAIL, "the job request was not sealed with this deployment's payload key"),
}


class Guide(NamedTuple):
    """A code as operators read it: how the job ends, in words, what the code means, and what to do about it."""

    state: str
    meaning: str
    action: str


# code -> how the job ends, what the code means, what an operator does about it: the tables in
# docs/failure-codes.md and RUNBOOK.md are generated from this (`starter.py codes --write ...`).
FAILURE_GUIDE: dict[str, Guide] = {
    "input.malformed": Guide(
        "failed",
        "a PDF: truncated (no `%%EOF`), a stream whose data does not decode, page content or a page tree that cannot "
        "be read: data would be lost. What qpdf repairs without loss is processed instead (status `repaired: true`, "
        "`repair_warnings: N`); a generated job: a zip bundle that is not a readable zip, has an entry leading outside"
        " its folder, a link, two entries of one name or no `index.html`; template data that is not a JSON object",
        "a PDF: ask for the original file (re-export it, or upload it again if the upload was interrupted); a "
        "generated job: tell the caller; a bundle with `../` names or links is worth noting as an attempt",
    ),
    "input.encrypted": Guide(
        "failed",
        "needs a password, or is encrypted (even with an empty user password) and the policy sets `refuse_encrypted = "
        "true`",
        "ask for an unprotected copy; or use a policy without `refuse_encrypted` if an empty-password file may be "
        "processed (`input_encryption: permissions_only` in the status)",
    ),
    "input.unsupported": Guide(
        "failed",
        "not a PDF or a supported image (checked by content)",
        "tell the caller; nothing to retry",
    ),
    "input.too_large": Guide(
        "failed / rejected",
        "over the byte limit or the policy's `max_pages`",
        "raise the limit only if the workers can take it",
    ),
    "input.empty": Guide(
        "failed",
        "no pages",
        "tell the caller",
    ),
    "input.too_complex": Guide(
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
    "input.signed": Guide(
        "failed",
        "already signed; the policy does not allow re-signing",
        "use a policy with `sign.allow_signed_input = true` if voiding the signatures is acceptable",
    ),
    "input.active_content": Guide(
        "failed",
        "the input has scripts, launch/submit/import/remote actions, rich media, XFA or (unless kept) attachments, and"
        " the policy's `sanitize.mode` is `fail`; the message names the kinds",
        "tell the caller; if the document may lose them, resubmit with a `strip` policy (the default), which removes "
        "them and counts what went in `sanitized`",
    ),
    "source.digest_mismatch": Guide(
        "quarantined",
        "the stored input changed after acceptance",
        "treat as an integrity incident: who can write the blob store? Do not resubmit blindly",
    ),
    "source.missing": Guide(
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
    "artifact.digest_mismatch": Guide(
        "quarantined",
        "a staged file changed between stages; at download (API log: `download of job JOB_ID broken off`; the job "
        "is unchanged), a published artifact or evidence no longer matches the digest the job recorded: the API "
        "broke the download off and the client got an incomplete body",
        "an integrity incident, as for `source.digest_mismatch` (for the staging area); at download: compare the "
        "blob with `output_sha256`/`evidence_sha256` (`starter.py fetch` refuses it too); restore it from a backup "
        "or resubmit under a new key",
    ),
    "publish.conflict": Guide(
        "quarantined",
        "a different artifact was already published for this job",
        "compare both digests (audit); never overwrite the published one by hand",
    ),
    "render.failed": Guide(
        "retried, then failed",
        "transient trouble",
        "look at the worker log of that attempt (codes and exception types only)",
    ),
    "tool.missing": Guide(
        "retried, then failed",
        "a worker lacks a binary (tesseract, qpdf, poppler, OCRmyPDF)",
        "fix the worker image: the log says which tool, loudly",
    ),
    "storage.unavailable": Guide(
        "retried, then failed",
        "the blob store did not answer",
        "check S3/MinIO or the shared volume",
    ),
    "internal.error": Guide(
        "retried, then failed",
        "transient trouble",
        "look at the worker log of that attempt (codes and exception types only)",
    ),
    "signature.invalid": Guide(
        "quarantined",
        "the output signature is broken or missing, or does not name the job's tenant or lock the document",
        "check the signer key and pyHanko/tool versions in the evidence; a signature that names another tenant is "
        "a security event",
    ),
    "signature.untrusted": Guide(
        "quarantined",
        "the signer does not chain to `DOCJOBS_TRUST_ROOTS`",
        "fix the trust roots or the signing certificate on the workers",
    ),
    "signature.coverage": Guide(
        "quarantined",
        "something was appended after signing",
        "a stage after `sign` changed the file: a bug, escalate",
    ),
    "signature.byte_range": Guide(
        "quarantined",
        "the sign stage's document child prepared a file the worker would not sign (ranges leaving bytes unsigned, "
        "a hole not empty or of the wrong size, the rendered document changed)",
        "a compromised or broken child: keep the attempt's logs, escalate as a security event",
    ),
    "signature.dictionary": Guide(
        "quarantined",
        "the release gate read, in the file prepared for signing, a signature dictionary other than the worker's "
        "(a `/Reason` naming another tenant, no DocMDP P1 certification or FieldMDP lock, another filter, a second "
        "empty signature, a byte range other than the one checked); nothing was signed",
        "a compromised or broken child: keep the attempt's logs, escalate as a security event",
    ),
    "signature.tsa_unavailable": Guide(
        "retried, then failed",
        "transient trouble",
        "look at the worker log of that attempt (codes and exception types only)",
    ),
    "fidelity.page_count": Guide(
        "quarantined",
        "the output breaks its contract (pages, boxes, text, links, watermark, qpdf, second reader)",
        "the failing check is in the code; escalate with the job ID",
    ),
    "fidelity.geometry": Guide(
        "quarantined",
        "the output breaks its contract (pages, boxes, text, links, watermark, qpdf, second reader)",
        "the failing check is in the code; escalate with the job ID",
    ),
    "fidelity.links": Guide(
        "quarantined",
        "the output breaks its contract (pages, boxes, text, links, watermark, qpdf, second reader)",
        "the failing check is in the code; escalate with the job ID",
    ),
    "fidelity.qpdf": Guide(
        "quarantined",
        "the output breaks its contract (pages, boxes, text, links, watermark, qpdf, second reader)",
        "the failing check is in the code; escalate with the job ID",
    ),
    "fidelity.reader": Guide(
        "quarantined",
        "the output breaks its contract (pages, boxes, text, links, watermark, qpdf, second reader)",
        "the failing check is in the code; escalate with the job ID",
    ),
    "fidelity.text": Guide(
        "quarantined",
        "the output breaks its contract (pages, boxes, text, links, watermark, qpdf, second reader)",
        "the failing check is in the code; escalate with the job ID",
    ),
    "fidelity.watermark": Guide(
        "quarantined",
        "the output breaks its contract (pages, boxes, text, links, watermark, qpdf, second reader)",
        "the failing check is in the code; escalate with the job ID",
    ),
    "fidelity.fonts": Guide(
        "failed",
        "the generated PDF uses a font it does not embed",
        "the template or HTML names a font WeasyPrint could not embed: ship the font in the bundle (`@font-face`)",
    ),
    "template.invalid": Guide(
        "failed",
        "the tenant's template cannot be rendered with the job's data; the message names the kind (undefined value, "
        "syntax error, an operation the sandbox refuses, no end within `generate.template_seconds`) and the template's"
        " line",
        "tell the tenant: their template or their data is wrong (the data is never in the message: look at the "
        "template line with them). A sandbox refusal may be an attack: note the tenant",
    ),
    "generate.resource_refused": Guide(
        "failed",
        "the HTML reaches outside the job (http(s), files outside its bundle, attachments) and the policy's "
        "`generate.missing` is `fail`; the message counts by kind",
        'tell the caller to put every resource in the bundle (or inline it as `data:`); with `missing = "ignore"` (the'
        " default) such resources are left out and counted in `generated.refused`",
    ),
    "sanitize.residue": Guide(
        "quarantined",
        "the release gate (before signing) or `verify` found active content in the bytes that would have been "
        "signed or released; nothing was signed or released",
        "a bug or a kind the strip does not know: keep the job ID, do not release the input by hand, escalate with the"
        " policy version (the worker log has no content)",
    ),
    "evidence.unavailable": Guide(
        "quarantined",
        "the signed evidence could not be written",
        "check the signer configuration and the blob store",
    ),
    "ocr.page_timeout": Guide(
        "failed",
        "Tesseract ran out of time on the pages the message names",
        "raise the policy's `tesseract_timeout`; check the worker's CPU load",
    ),
    "ocr.page_unreadable": Guide(
        "failed",
        "the named pages have ink but OCR read no text, even after docjobs' own correction (deskew, despeckle, "
        "contrast, 400 dpi)",
        "look at the page (a photo, a drawing, handwriting, a language not in `languages`?); resubmit with "
        '`ocr.unreadable = "image_only"` to release such pages without text (listed in `pages_unreadable`)',
    ),
    "ocr.invalid_output": Guide(
        "quarantined",
        "OCRmyPDF produced an invalid PDF",
        "keep the job ID; check OCRmyPDF/Ghostscript versions",
    ),
    "ocr.failed": Guide(
        "retried, then failed",
        "transient trouble",
        "look at the worker log of that attempt (codes and exception types only)",
    ),
    "notify.failed": Guide(
        "unchanged (`notification: failed`)",
        "the tenant's callback did not take the terminal event after 6 attempts",
        'the job itself is fine; see "Webhook deliveries failing"',
    ),
    "redaction.leak": Guide(
        "quarantined",
        "after redaction, poppler, pypdf or the document scan still found a matched value, a pattern, or text inside a"
        " region; nothing was released",
        "never release the input by hand; `status` shows the redaction summary (counts, fallback pages), the message "
        "names the kind of leak (`value`, `pattern:…`, `in_region`, `metadata`, …); escalate with the job ID and the "
        "policy version",
    ),
    "redaction.failed": Guide(
        "retried, then failed",
        "a redaction tool failed or timed out",
        "transient; check the worker log for the exception type",
    ),
    "redaction.region_outside": Guide(
        "failed",
        "a `--redact-region` names a page the document does not have",
        "resubmit with the right page number",
    ),
    "redaction.needs_ocr": Guide(
        "failed",
        "patterns were asked for, but the named pages are only images, with no text to search",
        "resubmit with `--ocr` or the `scan` policy (regions need no OCR)",
    ),
    "stage.retries_exhausted": Guide(
        "failed",
        "a stage ran out of time or attempts",
        "check worker capacity and the lease/timeouts settings",
    ),
    "stage.timeout": Guide(
        "failed",
        "a stage ran out of time or attempts",
        "check worker capacity and the lease/timeouts settings",
    ),
    "workflow.terminated": Guide(
        "failed",
        "someone terminated the workflow",
        'find out who; do not terminate jobs to "unstick" them, cancel them',
    ),
    "workflow.timed_out": Guide(
        "failed",
        "Temporal's execution timeout closed the run before the job's deadline: the workflow did not end itself (stuck"
        " workflow tasks, a bug, or a start that did not come from docjobs with a shorter timeout)",
        "`audit JOB_ID`: look for `workflow_task_failed` events and the worker log of the workflow; escalate with the "
        "job ID",
    ),
    "request.invalid": Guide(
        "failed",
        "the workflow was started with an input off the schema, an input (public, or an internal `JobRequest`) whose "
        "tenant is not the workflow ID's prefix, a public input whose `callback` cannot be used, a request for "
        "another job ID than its workflow ID, or an internal request whose source is not `sources/<its sha256>` "
        "(nothing ran, no blob was touched)",
        'a service\'s bug, or someone reached the frontend: see "Refused starts"',
    ),
    "policy.unknown": Guide(
        "failed",
        "a service started a job (public input) naming no configured policy (only `resolve` ran)",
        "tell the service; compare `DOCJOBS_POLICY_FILE` of the workers with what it expects",
    ),
    "policy.invalid": Guide(
        "failed",
        "a service started a job (public input) with overrides that do not validate (only `resolve` ran); the API "
        "and the CLI refuse them before anything is stored",
        "tell the service what the overrides' schema allows (`schemas/`)",
    ),
    "policy.forbidden": Guide(
        "failed (API: 403)",
        'the tenant named a policy it may not use: a trusted-only one (`sanitize.mode = "keep"` or `trusted_only = '
        "true`) it was not given, or one its `policies` list in the tenants file leaves out (only `resolve` ran; the "
        "API stored nothing)",
        "if the tenant should have it: its entry in `DOCJOBS_TENANTS_FILE` lists its policies (`tenant add NAME "
        "--policies A,B` writes it; the file is re-read while the API and workers run); never unmark a `keep` "
        "policy to let one tenant through",
    ),
    "policy.changed": Guide(
        "failed",
        "the job was started for a policy version (`policy_version` of the public input: every document of a batch "
        "names the version its batch pinned) and the named policy with its overrides resolves to another on the "
        "workers: the policy file changed in between (only `resolve` ran)",
        "if the new policy is meant: submit again (a new batch for a batch's documents); else restore the policy "
        "file. Compare `DOCJOBS_POLICY_FILE` of the workers with the API's and the CLI's",
    ),
    "source.outside_store": Guide(
        "failed",
        "the URI names no blob inside `DOCJOBS_STORAGE_URL` (only `resolve` ran)",
        "the service must store the document in the deployment's store first, under the URI it sends",
    ),
    "codec.unsealed": Guide(
        "failed",
        "payload keys are configured and the request was plaintext, sealed for another workflow, or sealed for no "
        "workflow (by a tool that still calls the codec endpoint's removed `/encode`); nothing ran",
        'a forged start, or a client without `DOCJOBS_CODEC_KEYS_FILE`: see "Refused starts"',
    ),
}

GUIDE_MARKERS = ("<!-- failure codes: generated from docjobs/domain/errors.py -->", "<!-- end of failure codes -->")


def failure_code_table() -> str:
    """The failure codes as a Markdown table, between their markers (what `starter.py codes --write` puts in a
    page, and what tests/test_failure_codes.py compares each page against)."""
    guides = ((code, FAILURE_GUIDE[code]) for code in FAILURE_CODES)
    rows = [f"| `{code}` | {guide.state} | {guide.meaning} | {guide.action} |" for code, guide in guides]
    header = ["| code | state | meaning | what to do |", "|---|---|---|---|"]
    return "\n".join([GUIDE_MARKERS[0], *header, *rows, GUIDE_MARKERS[1]])


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
