"""The `notify` step: POST a small signed JSON event to the tenant's callback on every terminal state.

The body is canonical JSON (RFC 8785, docjobs/domain/canonical.py; codes and digests, no content);
`docjobs.settings.webhooks` signs it, pins the resolved address and refuses internal ones. The event ID derives from
the workflow run, so every retry of one event carries the same ID. Delivery is retried with backoff by the
workflow's retry policy; its failure never changes the job's outcome, and every attempt is in the job's history with
the one code `notify.failed` (why it failed is only in the worker log, as a reason code without the URL).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from temporalio import activity

from activities.declared import implements
from activities.lease import typed_failures
from docjobs.domain import stage_specs as specs
from docjobs.domain.canonical import canonical_json
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import NotifyInput
from docjobs.settings.tenants import callback_of
from docjobs.settings.webhooks import DeliveryFailed, deliver, event_id

log = logging.getLogger("docjobs.activities")


class NotifyActivities:
    def __init__(self, tenants_path: Path) -> None:
        self._tenants = tenants_path

    @implements(specs.NOTIFY)
    def notify(self, event: NotifyInput) -> str:
        with typed_failures("notify"):
            callback = callback_of(self._tenants, event.tenant)
            if callback is None:
                return "no callback"
            if event.callback is not None:  # the job's own URL (checked at resolve), signed with the tenant's secret
                callback = replace(callback, url=event.callback)
            body = canonical_json(event.model_dump(mode="json", exclude={"callback"}))
            run_id = activity.info().workflow_run_id
            assert run_id is not None, "notify runs inside a workflow"
            try:
                deliver(callback, body, event_id(event.job_id, run_id, event.state.value))
            except DeliveryFailed as failure:
                log.warning("notify: delivery failed: %s", failure.reason)
                raise DocJobError(FailureCode.NOTIFY_FAILED) from None
            return "delivered"
