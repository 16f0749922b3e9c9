"""The release gates: `sign` (PAdES) and `verify` (pyHanko's verdict and the output contract)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from temporalio import activity

from activities.lease import Lease, typed_failures
from docjobs.errors import DocJobError
from docjobs.models import BlobRef, SignInput, SignOutput, VerifyInput, VerifyOutput
from docjobs.pdf.fidelity import check_fidelity
from docjobs.pdf.images import image_to_pdf
from docjobs.pdf.inspect import sniff_kind
from docjobs.pdf.redact_gate import check_redaction
from docjobs.pdf.redact_patterns import compile_patterns
from docjobs.pdf.sanitize import check_no_active_content
from docjobs.signing import SignerConfig, sign_pdf, verify_pdf
from docjobs.storage import BlobStore, staging_key


class ReleaseActivities:
    def __init__(self, store: BlobStore, workdir: Path, data_dir: Path) -> None:
        self._store = store
        self._workdir = workdir
        self._data_dir = data_dir

    def _signer(self) -> SignerConfig:
        """From config; on the embedded default a development CA and signer are created on first use."""
        return SignerConfig.from_env(self._data_dir)

    def _fetch(self, ref: BlobRef, dest: Path, *, mismatch_code: str) -> Path:
        self._store.fetch(ref, dest, mismatch_code=mismatch_code)
        return dest

    @activity.defn(name="sign")
    def sign(self, request: SignInput) -> SignOutput:
        with typed_failures("sign", request.shape) as attempt, Lease("sign"):
            self._store.verify(request.source, mismatch_code="source.digest_mismatch")
            self._workdir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=self._workdir, prefix="sign-") as tmp:
                unsigned = self._fetch(
                    request.staged, Path(tmp) / "unsigned.pdf", mismatch_code="artifact.digest_mismatch"
                )
                signed = Path(tmp) / "signed.pdf"
                config = dataclasses.replace(self._signer(), visible=request.sign.visible)
                info = sign_pdf(unsigned, signed, config, allow_existing_signatures=request.sign.allow_signed_input)
                staged = self._store.put_file(staging_key(request.job_id, "sign", attempt), signed)
        return SignOutput(
            staged=staged,
            level=info.level,
            signer_subject=info.signer_subject,
            certificate_sha256=info.certificate_sha256,
            invalidated_signatures=info.invalidated_signatures,
            attempt=attempt,
        )

    @activity.defn(name="verify")
    def verify(self, request: VerifyInput) -> VerifyOutput:
        """Nothing is released unless the signature (if any) and every fidelity check pass: else quarantine."""
        with typed_failures("verify", request.shape) as attempt, Lease("verify"):
            self._workdir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=self._workdir, prefix="verify-") as tmp:
                source = self._fetch(request.source, Path(tmp) / "input", mismatch_code="source.digest_mismatch")
                with source.open("rb") as head:
                    is_image = sniff_kind(head.read(16)) in ("png", "jpeg", "tiff")
                if is_image:  # compare with the PDF that render made of it (deterministic)
                    image_to_pdf(source, normalized := Path(tmp) / "input.pdf")
                    source = normalized
                output = self._fetch(request.staged, Path(tmp) / "output.pdf", mismatch_code="artifact.digest_mismatch")
                signature = None
                if request.signed:
                    report = verify_pdf(output, self._signer())
                    if report.failure_code is not None:
                        raise DocJobError(report.failure_code)
                    signature = report.model_dump(
                        include={"intact", "valid", "trusted", "bottom_line", "coverage", "level", "signer_subject"}
                    )
                checks = check_fidelity(
                    source,
                    output,
                    text_layer_kept=request.text_layer_kept,
                    watermark_text=request.watermark_text,
                    pages_may_turn=request.pages_may_turn,
                )
                if request.redact is not None:  # on the bytes to be released: no pattern may match any more
                    gate = check_redaction(output, frozenset(), compile_patterns(request.redact), {})
                    if not gate.clean:
                        raise DocJobError("redaction.leak")
                    checks.append("redaction_patterns")
                if request.sanitize is not None:  # on the bytes to be released: no active content came back
                    checks += check_no_active_content(output, request.sanitize)
        return VerifyOutput(signature=signature, fidelity_checks=checks, attempt=attempt)
