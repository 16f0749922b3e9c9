"""The `evidence` step: a signed envelope binding what a job did, written once per run (create-only).

What it binds on the input's side of the redaction (the job, its input, its policy with the terms, the redaction
summary) it binds by commitments under a salt of the run's own, drawn once and kept in the store beside the
envelope (create-only too, so a retried attempt finds the salt of the envelope an earlier one wrote) and handed
to the job's status: the tenant holds it, the receiver never does."""

from __future__ import annotations

import os
from pathlib import Path

from activities.attempt import StoreStages
from activities.declared import implements
from activities.lease import typed_failures
from activities.runs import marked_run
from docjobs.domain import stage_specs as specs
from docjobs.domain.canonical import canonical_sha256
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import BlobRef, EvidenceInput, EvidenceOutput
from docjobs.signing.environment import signer_from_env
from docjobs.signing.evidence import Evidence, commitment, envelope_evidence, sign_evidence, tool_versions
from docjobs.store.storage import BlobStore, RunScope, commitment_salt_key, converted_key, evidence_key, sha256_file

SALT_BYTES = 32


class EvidenceActivities(StoreStages):
    def __init__(self, store: BlobStore, workdir: Path, data_dir: Path) -> None:
        super().__init__(store, workdir)
        self._data_dir = data_dir

    @implements(specs.EVIDENCE)
    def evidence(self, request: EvidenceInput) -> EvidenceOutput:
        with typed_failures("evidence") as attempt, self._folder("evidence") as folder:
            run = marked_run(self._store)
            converted = None  # render's staged copy is deleted at cleanup: the one the evidence binds stays
            if request.converted is not None:
                converted, _ = self._store.promote(request.converted, converted_key(run))
            salt = self._salt(run, attempt, folder)
            committed = {
                "job": request.job_id,
                "source": request.input_sha256,
                "converted.pdf": converted.sha256 if converted else None,
                "redaction.json": request.redaction_summary_sha256,
                "policy": canonical_sha256(request.policy),
            }
            evidence = Evidence(
                run_id=run.run_id,
                tenant=request.tenant,
                document_class=request.policy.name,
                policy=request.policy.released(),
                # from the policy, not the request: a job accepted by older code recorded a version with its terms
                policy_version=request.policy.version,
                output_sha256=request.output_sha256,
                ocr_text_sha256=request.ocr_text_sha256,
                commitments={name: commitment(salt, name, value) for name, value in committed.items() if value},
                redactions=request.redactions,
                sanitized=request.sanitized,
                signature=request.signature,
                stage_attempts=request.stage_attempts,
                tool_versions=tool_versions(),
                terminal_state=request.terminal_state.value,
                completed_at=request.completed_at,
            )
            path = folder / "evidence.json"
            path.write_bytes(sign_evidence(evidence, signer_from_env(self._data_dir)))
            staged = self._put_staged("evidence", attempt, path, ".json")
            final = evidence_key(run)
            try:
                ref, _ = self._store.promote(staged, final)
            except DocJobError as error:
                if error.code != FailureCode.PUBLISH_CONFLICT:
                    raise
                ref = self._existing(final, run, folder / "existing.json")  # an earlier attempt of this run wrote it
        return EvidenceOutput(evidence=ref, commitment_salt=salt.hex())

    def _salt(self, run: RunScope, attempt: int, folder: Path) -> bytes:
        """The run's commitment salt: drawn at random and stored create-only beside the envelope, so that every
        attempt of the run commits with the one an envelope already written used."""
        key = commitment_salt_key(run)
        path = folder / "salt"
        path.write_bytes(os.urandom(SALT_BYTES))
        staged = self._put_staged("salt", attempt, path, ".bin")
        try:
            self._store.promote(staged, key)
        except DocJobError as error:
            if error.code != FailureCode.PUBLISH_CONFLICT:
                raise
        with self._store.open(key) as blob:
            salt = blob.read(SALT_BYTES + 1)
        if len(salt) != SALT_BYTES:
            raise DocJobError(FailureCode.INTERNAL_ERROR, "the run's commitment salt is unreadable")
        return salt

    def _existing(self, key: str, run: RunScope, path: Path) -> BlobRef:
        """The envelope already at the run's key, if it is this run's (the key says so; the payload must agree):
        the first envelope stands."""
        with self._store.open(key) as blob:
            path.write_bytes(blob.read())
        try:
            written_by = envelope_evidence(path.read_bytes()).run_id
        except (ValueError, KeyError, TypeError, UnicodeError):
            written_by = None
        if written_by != run.run_id:
            raise DocJobError(FailureCode.PUBLISH_CONFLICT)
        return BlobRef(key=key, sha256=sha256_file(path), size=path.stat().st_size)
