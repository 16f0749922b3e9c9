"""The `notify` step: POST a small signed JSON event to the tenant's callback on every terminal state.

The body is canonical JSON (codes and digests, no content) and its HMAC-SHA256 with the tenant's webhook
secret travels in `X-Docjobs-Signature: sha256=<hex>`. Delivery is retried with backoff by the workflow's
retry policy; its failure never changes the job's outcome, and every attempt is in the job's history.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import urllib.error
import urllib.request
from pathlib import Path

from temporalio import activity

from activities.lease import typed_failures
from docjobs.errors import DocJobError
from docjobs.models import NotifyInput
from docjobs.tenants import callback_of

SIGNATURE_HEADER = "X-Docjobs-Signature"
DELIVERY_TIMEOUT_SECONDS = 10


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class NotifyActivities:
    def __init__(self, tenants_path: Path) -> None:
        self._tenants = tenants_path

    @activity.defn(name="notify")
    def notify(self, event: NotifyInput) -> str:
        with typed_failures("notify"):
            callback = callback_of(self._tenants, event.tenant)
            if callback is None:
                return "no callback"
            url, secret = callback
            body = json.dumps(event.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()
            request = urllib.request.Request(
                url,
                data=body,
                method="POST",
                headers={
                    "Content-Type": "application/json",
                    SIGNATURE_HEADER: signature(secret, body),
                    "X-Docjobs-Event": f"{event.job_id}:{event.state.value}",
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=DELIVERY_TIMEOUT_SECONDS) as answer:
                    return f"delivered (HTTP {answer.status})"
            except (urllib.error.URLError, TimeoutError, OSError):
                raise DocJobError("notify.failed") from None
