"""The `evidence` step: a signed envelope binding what a job did, written once per run (create-only)."""

from __future__ import annotations

from pathlib import Path

from activities.attempt import StoreStages
from activities.declared import implements
from activities.lease import typed_failures
from activities.runs import marked_run
from docjobs.domain import stage_specs as specs
from docjobs.domain.errors import DocJobError
from docjobs.domain.models import BlobRef, EvidenceInput, EvidenceOutput
from docjobs.signing.environment import signer_from_env
from docjobs.signing.evidence import Evidence, envelope_evidence, sign_evidence, tool_versions
from docjobs.store.storage import BlobStore, RunScope, converted_key, evidence_key, sha256_file


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
            evidence = Evidence(
                job_id=request.job_id,
                run_id=run.run_id,
                tenant=request.tenant,
                document_class=request.policy.name,
                policy=request.policy.model_dump(mode="json"),
                policy_version=request.policy_version,
                input_sha256=request.input_sha256,
                output_sha256=request.output_sha256,
                ocr_text_sha256=request.ocr_text_sha256,
                redaction_summary_sha256=request.redaction_summary_sha256,
                converted_sha256=converted.sha256 if converted else None,
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
                if error.code != "publish.conflict":
                    raise
                ref = self._existing(final, run, folder / "existing.json")  # an earlier attempt of this run wrote it
        return EvidenceOutput(evidence=ref)

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
            raise DocJobError("publish.conflict")
        return BlobRef(key=key, sha256=sha256_file(path), size=path.stat().st_size)
