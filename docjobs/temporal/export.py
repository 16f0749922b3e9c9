"""A job's stored files handed out: copied only with the digest the job recorded, and its evidence re-checked."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from docjobs.domain.canonical import canonical_model
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.job_status import JobStatus
from docjobs.store.storage import CONVERTED_BLOB, TEXT_BLOB, BlobStore, beside, sha256_file, source_key

if TYPE_CHECKING:
    from docjobs.signing.config import SignerConfig
    from docjobs.signing.evidence import EvidenceCheck


def export_blob(store: BlobStore, key: str, sha256: str, out: Path) -> None:
    """Copy a blob to `out` only if it still has the digest the job recorded (never a partial or wrong file)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.NamedTemporaryFile(dir=out.parent, prefix=".fetch-", delete=False) as tmp,
        store.open(key) as blob,
    ):
        shutil.copyfileobj(blob, tmp)
    tmp_path = Path(tmp.name)
    if sha256_file(tmp_path) != sha256:
        tmp_path.unlink()
        raise DocJobError(FailureCode.ARTIFACT_DIGEST_MISMATCH, "the stored file does not match its recorded digest")
    tmp_path.replace(out)


def copy_blob(store: BlobStore, key: str, dest: Path) -> Path:
    with store.open(key) as blob, dest.open("wb") as out:
        shutil.copyfileobj(blob, out)
    return dest


async def verify_stored_evidence(
    store: BlobStore, status: JobStatus, signer: SignerConfig, *, job_id: str, run_id: str | None
) -> EvidenceCheck:
    """Check the job's envelope and recompute every digest and commitment it binds from the stored blobs (the
    commitments with the salt the job's status holds)."""
    from docjobs.signing.evidence import verify_evidence  # pyHanko is heavy: only the commands that verify load it

    assert status.evidence_key is not None
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        envelope = copy_blob(store, status.evidence_key, folder / "evidence.json").read_bytes()
        source = copy_blob(store, source_key(status.input_sha256), folder / "source")
        artifact = None
        if status.output_sha256 and status.artifact_key:
            artifact = copy_blob(store, status.artifact_key, folder / "artifact.pdf")
        text = None
        if status.ocr_text_sha256:  # beside the evidence, in the run's folder (or an older job's)
            text = copy_blob(store, beside(status.evidence_key, TEXT_BLOB), folder / TEXT_BLOB)
        summary = None
        if status.redaction is not None:  # the summary the job reports must be the one the evidence binds
            (summary := folder / "redaction.json").write_bytes(canonical_model(status.redaction))
        converted = None
        if _claims_converted(envelope):  # kept beside the evidence; a missing one is an empty file: it breaks
            converted = folder / CONVERTED_BLOB
            key = beside(status.evidence_key, CONVERTED_BLOB)
            if store.exists(key):
                copy_blob(store, key, converted)
            else:
                converted.write_bytes(b"")
        return await asyncio.to_thread(
            verify_evidence,
            envelope,
            signer,
            job_id=job_id,
            run_id=run_id,
            artifact=artifact,
            source=source,
            ocr_text=text,
            redaction_summary=summary,
            converted=converted,
            salt=bytes.fromhex(status.commitment_salt) if status.commitment_salt else None,
        )


def _claims_converted(envelope: bytes) -> bool:
    """Whether the envelope says it binds an office input's PDF (a claim: `verify_evidence` checks it)."""
    from docjobs.signing.evidence import envelope_evidence

    try:
        evidence = envelope_evidence(envelope)
    except (ValueError, KeyError, TypeError, UnicodeError):
        return False
    return evidence.converted_sha256 is not None or "converted.pdf" in (evidence.commitments or {})
