"""The `publish` stage (fenced promotion of the winning attempt) and the staging clean-up."""

from __future__ import annotations

import logging

from activities.attempt import StoreStages
from activities.cost import AttemptMeter
from activities.declared import implements
from activities.lease import Lease, typed_failures
from activities.runs import current_run, marked_run
from docjobs.domain import stage_specs as specs
from docjobs.domain.models import CleanupInput, PublishInput, PublishOutput
from docjobs.store.storage import artifact_key, job_prefix, ocr_ranges_prefix, staging_prefix, text_key

log = logging.getLogger("docjobs.activities")


class PublishActivities(StoreStages):
    @implements(specs.PUBLISH)
    def publish(self, request: PublishInput) -> PublishOutput:
        """Promote the staged artifact to the job's final key; create-only, so a stale attempt can't replace it."""
        meter = AttemptMeter()
        with typed_failures("publish", request.shape, meter=meter) as attempt, Lease("publish", meter):
            run = marked_run(self._store)  # a job in flight across the upgrade to run folders has no marker yet
            self._verify_source(request.source)
            text = None
            if request.text is not None:  # the searchable text goes first: an artifact is never without it
                text, _ = self._store.promote(request.text, text_key(run))
            artifact, created = self._store.promote(request.staged, artifact_key(run))
        return PublishOutput(
            artifact=artifact, text=text, attempt=attempt, already_published=not created, cost=meter.total()
        )

    @implements(specs.CLEANUP)
    def cleanup(self, request: CleanupInput) -> int:
        """Delete every staged attempt of the run (the promoted artifact is a separate link and stays)."""
        with typed_failures("cleanup"):
            run = current_run()
            removed = self._store.delete_prefix(staging_prefix(run))
            removed += self._store.delete_prefix(ocr_ranges_prefix(run))  # OCR in page ranges (ocr_chunk)
            # A job in flight across the upgrade to run folders staged its first stages in the job's folder.
            removed += self._store.delete_prefix(f"{job_prefix(run.workflow_id)}/staging")
        log.info("cleanup removed %d staged blob(s)", removed)
        return removed
