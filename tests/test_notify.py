"""Tenant callbacks: a signed event on every terminal state, retried, never changing the outcome."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from docjobs.client import JobClient
from docjobs.config import PolicyBook
from docjobs.states import JobState
from docjobs.tenants import add_tenant, set_callback
from tests.conftest import Env, wait_terminal


class Receiver(ThreadingHTTPServer):
    """A loopback webhook receiver that refuses the first `failures` deliveries with a 500."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.received: list[tuple[dict[str, str], bytes, int]] = []
        super().__init__(("127.0.0.1", 0), ReceiverHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = 500 if len(self.server.received) < self.server.failures else 200
        self.server.received.append((dict(self.headers), body, status))
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver(failures=2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


async def test_event_is_signed_and_survives_two_failed_deliveries(
    jobs: JobClient, env: Env, policies: PolicyBook, samples: Path, receiver: Receiver
) -> None:
    tenants = Path(env.vars["DOCJOBS_DATA_DIR"]) / "tenants.json"
    add_tenant(tenants, "hooked")
    secret = set_callback(tenants, "hooked", receiver.url)
    submitted = await jobs.submit(samples / "sample.pdf", policies.get("standard"), tenant="hooked", key="hook")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED

    final = await jobs.handle(submitted.job_id).result()  # the workflow ends after the delivery
    assert final.notification == "delivered"
    deadline = time.monotonic() + 10
    while len(receiver.received) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [status for _, _, status in receiver.received] == [500, 500, 200]
    headers, body, _ = receiver.received[-1]
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Docjobs-Signature"], expected)
    event = json.loads(body)
    assert event == {
        "job_id": submitted.job_id,
        "tenant": "hooked",
        "state": "succeeded",
        "failure_code": None,
        "cancel_reason": None,
        "input_sha256": status.input_sha256,
        "output_sha256": status.output_sha256,
        "evidence_sha256": final.evidence_sha256,
    }
    assert "PAGEWORD" not in body.decode()  # digests and codes only


async def test_failed_delivery_is_recorded_and_does_not_change_the_outcome(
    jobs: JobClient, env: Env, policies: PolicyBook, samples: Path
) -> None:
    tenants = Path(env.vars["DOCJOBS_DATA_DIR"]) / "tenants.json"
    add_tenant(tenants, "unreachable")
    set_callback(tenants, "unreachable", "http://127.0.0.1:9/closed")  # nothing listens on the discard port
    submitted = await jobs.submit(samples / "sample.pdf", policies.get("standard"), tenant="unreachable", key="x")
    final = await jobs.handle(submitted.job_id).result()
    assert (final.state, final.notification) == (JobState.SUCCEEDED, "failed")
    events = await jobs.audit(submitted.job_id)
    assert [e["failure_code"] for e in events if e["event"] == "activity_task_failed"] == ["notify.failed"]
