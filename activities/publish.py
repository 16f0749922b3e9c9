"""The `publish` stage (fenced promotion of the winning attempt) and the staging clean-up."""

from __future__ import annotations

import logging

from temporalio import activity

from activities.lease import Lease, typed_failures
from docjobs.models import CleanupInput, PublishInput, PublishOutput
from docjobs.storage import BlobStore, artifact_key, job_prefix, text_key

log = logging.getLogger("docjobs.activities")


class PublishActivities:
    def __init__(self, store: BlobStore) -> None:
        self._store = store

    @activity.defn(name="publish")
    def publish(self, request: PublishInput) -> PublishOutput:
        """Promote the staged artifact to the job's final key; create-only, so a stale attempt can't replace it."""
        with typed_failures("publish", request.shape) as attempt, Lease("publish"):
            self._store.verify(request.source, mismatch_code="source.digest_mismatch")
            text = None
            if request.text is not None:  # the searchable text goes first: an artifact is never without it
                text, _ = self._store.promote(request.text, text_key(request.job_id))
            artifact, created = self._store.promote(request.staged, artifact_key(request.job_id))
        return PublishOutput(artifact=artifact, text=text, attempt=attempt, already_published=not created)

    @activity.defn(name="cleanup")
    def cleanup(self, request: CleanupInput) -> int:
        """Delete every staged attempt of the job (the promoted artifact is a separate link and stays)."""
        removed = self._store.delete_prefix(f"{job_prefix(request.job_id)}/staging")
        log.info("cleanup removed %d staged blob(s)", removed)
        return removed
