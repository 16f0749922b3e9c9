"""Tenant callbacks: signed, pinned to a public address, never redirected, retried, never changing the outcome.

Every receiver here listens on loopback. A test that needs a public address as the resolved target injects the
resolver and a socket opener that connects to a loopback receiver instead, so nothing else is ever contacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import re
import socket
import ssl
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from temporalio.client import WorkflowExecutionStatus

from docjobs import worker
from docjobs.domain.states import JobState
from docjobs.settings import webhooks
from docjobs.settings.policies import PolicyBook
from docjobs.settings.tenants import add_tenant, callback_of, set_callback
from docjobs.settings.webhooks import (
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    TOLERANCE_SECONDS,
    Callback,
    CallbackInvalid,
    DeliveryFailed,
    IPAddress,
    PinnedHTTPSConnection,
    deliver,
    parse_callback,
    refusal,
    sign,
)
from docjobs.temporal.client import JobClient, connect
from tests.conftest import NOTIFY_RETRY_SECONDS, REPO, Env, run_starter, wait_terminal

PUBLIC_V4 = ipaddress.ip_address("93.184.215.14")  # only ever a resolver's answer: never connected to
SECRET = "test-secret"
BODY = b'{"job_id":"t/1","state":"succeeded"}'


def documented_verify() -> Callable[..., bool]:
    """The receiver's `verify` exactly as docs/http-api.md ("Notifications") shows it."""
    page = (REPO / "docs" / "http-api.md").read_text()
    block = re.search(r"```python\n(# verify_docjobs_signature.*?)```", page, re.DOTALL)
    assert block is not None, "the verification snippet of docs/http-api.md is missing"
    namespace: dict[str, Any] = {}
    exec(block.group(1), namespace)
    verify: Callable[..., bool] = namespace["verify"]
    return verify


class Receiver(ThreadingHTTPServer):
    """A loopback webhook receiver: answers `statuses` first (then 200), optionally redirecting or stalling."""

    daemon_threads = True

    def __init__(self, statuses: tuple[int, ...] = (), location: str | None = None, stall: bool = False) -> None:
        self.statuses = list(statuses)
        self.location = location
        self.release = threading.Event() if stall else None
        self.received: list[tuple[dict[str, str], bytes]] = []
        super().__init__(("127.0.0.1", 0), ReceiverHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append((dict(self.headers), body))
        if self.server.release is not None:
            self.server.release.wait()
        status = self.server.statuses.pop(0) if self.server.statuses else 200
        self.send_response(status)
        if self.server.location is not None:
            self.send_header("Location", self.server.location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.server.received.append((dict(self.headers), b""))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(server: Receiver) -> Iterator[Receiver]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        if server.release is not None:
            server.release.set()
        server.shutdown()
        server.server_close()


def wait_for_requests(server: Receiver, count: int) -> None:
    deadline = time.monotonic() + 30
    while len(server.received) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def loopback_dev(url: str) -> Callback:
    return Callback(url=url, secret=SECRET, allow_http_loopback=True)


# ---- the address policy -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.1.1", "link_local"),
        ("fe80::1", "link_local"),
        ("100.64.0.1", "cgnat"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "reserved"),
        ("2001:db8::1", "reserved"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped
        ("::ffff:169.254.169.254", "metadata"),
        ("::ffff:93.184.215.14", "ipv4_mapped"),  # mapped addresses are never a DNS answer: refused anyway
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("2002:a9fe:a9fe::1", "metadata"),  # 6to4 of 169.254.169.254
        ("2002:c0a8:101::", "private"),  # 6to4 of 192.168.1.1
        ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", "metadata"),  # NAT64 of 169.254.169.254
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "reserved"),  # Teredo
        ("::7f00:1", "reserved"),  # IPv4-compatible (deprecated)
    ],
)
def test_internal_addresses_are_refused(address: str, reason: str) -> None:
    assert refusal(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::1111", "2002:5db8:d70e::1", "64:ff9b::5db8:d70e"])
def test_public_addresses_and_their_6to4_nat64_forms_pass(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


# ---- the callback URL ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "allow_http_loopback"),
    [
        ("http://127.0.0.1:8080/hook", False),  # plain http needs the development flag
        ("http://hooks.example.com/hook", True),  # ... and even then only to loopback
        ("http://10.0.0.1/hook", True),
        ("ftp://hooks.example.com/hook", False),
        ("https://user:password@hooks.example.com/hook", False),
        ("https://@hooks.example.com/hook", False),
        ("https:///hook", False),
        ("https://hooks.example.com:99999/hook", False),
        ("https://hooks.example.com/a b", False),
        ("https://127.0.0.1/hook", True),  # the flag is for plain http only
        ("https://169.254.169.254/latest/meta-data", False),
        ("https://[::ffff:127.0.0.1]/hook", False),
        ("https://[2606:4700::1111/hook", False),
    ],
)
def test_refused_callback_urls(url: str, allow_http_loopback: bool) -> None:
    with pytest.raises(CallbackInvalid):
        parse_callback(url, allow_http_loopback=allow_http_loopback)


@pytest.mark.parametrize(
    ("url", "allow_http_loopback", "host", "port", "path"),
    [
        ("https://hooks.example.com/in?tenant=a", False, "hooks.example.com", 443, "/in?tenant=a"),
        ("https://[2606:4700::1111]:8443", False, "2606:4700::1111", 8443, "/"),
        ("http://127.0.0.1:8080/hook", True, "127.0.0.1", 8080, "/hook"),
        ("http://[::1]/hook", True, "::1", 80, "/hook"),
        ("http://localhost:9/hook", True, "localhost", 9, "/hook"),
    ],
)
def test_accepted_callback_urls(url: str, allow_http_loopback: bool, host: str, port: int, path: str) -> None:
    target = parse_callback(url, allow_http_loopback=allow_http_loopback)
    assert (target.host, target.port, target.path) == (host, port, path)


def test_cli_refuses_a_bad_callback_before_creating_the_tenant(env: Env, tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.json"
    code, refused, _ = run_starter(
        env, "tenant", "add", "plain", "--callback", "http://127.0.0.1:8080/hook", DOCJOBS_TENANTS_FILE=str(tenants)
    )
    assert (code, refused["error"]) == (2, "callback.invalid")
    assert not tenants.exists() or "plain" not in json.loads(tenants.read_text())["tenants"]
    code, added, _ = run_starter(
        env,
        "tenant",
        "add",
        "plain",
        "--callback",
        "http://127.0.0.1:8080/hook",
        "--allow-http-loopback",
        DOCJOBS_TENANTS_FILE=str(tenants),
    )
    assert code == 0 and added["allow_http_loopback"] is True
    assert callback_of(tenants, "plain") == Callback("http://127.0.0.1:8080/hook", added["webhook_secret"], True)


# ---- delivery -----------------------------------------------------------------------------------------------


def test_plain_http_without_the_flag_is_never_sent() -> None:
    with serving(Receiver()) as receiver:
        with pytest.raises(DeliveryFailed, match="callback_invalid"):
            deliver(Callback(receiver.url, SECRET), BODY, "evt_1")
        https_to_loopback = f"https://localhost:{receiver.port}/hook"
        with pytest.raises(DeliveryFailed, match="address_refused"):
            deliver(Callback(https_to_loopback, SECRET, allow_http_loopback=True), BODY, "evt_1")
    assert receiver.received == []


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_a_failed_delivery_and_is_not_followed(status: int) -> None:
    with (
        serving(Receiver()) as elsewhere,
        serving(Receiver((status,), location=elsewhere.url)) as receiver,
        pytest.raises(DeliveryFailed, match="http_3xx"),
    ):
        deliver(loopback_dev(receiver.url), BODY, "evt_1")
    assert len(receiver.received) == 1
    assert elsewhere.received == []


def test_a_receiver_slower_than_the_timeout_is_a_failed_delivery() -> None:
    with serving(Receiver(stall=True)) as receiver:  # answers only when the test is over
        with pytest.raises(DeliveryFailed, match="timeout"):
            deliver(loopback_dev(receiver.url), BODY, "evt_1", timeout=0.5)
        wait_for_requests(receiver, 1)
    assert len(receiver.received) == 1  # it got the event: slow, not unreachable


def test_a_receiver_that_drips_its_answer_is_cut_off_at_the_deadline() -> None:
    """Each byte comes within the per-read timeout, so only the delivery's deadline ends it: an attempt's
    thread is free again within the deadline however slowly a receiver answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\n")
            while not stop.wait(0.2):  # a header that never ends, one byte at a time
                with contextlib.suppress(OSError):
                    connection.sendall(b"x")

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    try:
        began = time.monotonic()
        with pytest.raises(DeliveryFailed, match="timeout"):
            deliver(
                loopback_dev(f"http://127.0.0.1:{listener.getsockname()[1]}/hook"), BODY, "e", timeout=1, deadline=1.5
            )
        assert 1.5 <= time.monotonic() - began < 10
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def test_the_host_is_resolved_once_and_the_request_keeps_its_host_header() -> None:
    lookups: list[str] = []

    def resolver(host: str, port: int) -> list[IPAddress]:
        lookups.append(host)
        return [ipaddress.ip_address("127.0.0.1")]

    with serving(Receiver()) as receiver:
        deliver(loopback_dev(f"http://localhost:{receiver.port}/hook"), BODY, "evt_1", resolver=resolver)
    assert lookups == ["localhost"]
    headers, body = receiver.received[0]
    assert (headers["Host"], body) == (f"localhost:{receiver.port}", BODY)


def rebinding_resolver(*answers: list[str]) -> tuple[Callable[[str, int], list[IPAddress]], list[str]]:
    """A DNS server that answers differently on every lookup; also returns the list of lookups made."""
    lookups: list[str] = []

    def resolver(host: str, port: int) -> list[IPAddress]:
        lookups.append(host)
        return [ipaddress.ip_address(a) for a in answers[min(len(lookups), len(answers)) - 1]]

    return resolver, lookups


def test_rebinding_to_loopback_after_the_check_never_reaches_loopback() -> None:
    resolver, lookups = rebinding_resolver([str(PUBLIC_V4)], ["127.0.0.1"])
    opened: list[tuple[IPAddress, int]] = []

    def opener(address: IPAddress, port: int, timeout: float | None) -> socket.socket:
        opened.append((address, port))
        raise ConnectionRefusedError  # the public address is never really contacted

    with pytest.raises(DeliveryFailed, match="connection_failed"):
        deliver(Callback("https://hooks.example.com/hook", SECRET), BODY, "evt_1", resolver=resolver, opener=opener)
    assert lookups == ["hooks.example.com"]
    assert opened == [(PUBLIC_V4, 443)]


def test_only_the_public_answers_are_used_and_none_at_all_fails() -> None:
    opened: list[IPAddress] = []

    def opener(address: IPAddress, port: int, timeout: float | None) -> socket.socket:
        opened.append(address)
        raise ConnectionRefusedError

    callback = Callback("https://hooks.example.com/hook", SECRET)
    mixed, _ = rebinding_resolver(["10.0.0.1", str(PUBLIC_V4), "169.254.169.254"])
    with pytest.raises(DeliveryFailed, match="connection_failed"):
        deliver(callback, BODY, "evt_1", resolver=mixed, opener=opener)
    assert opened == [PUBLIC_V4]
    nowhere, _ = rebinding_resolver([])
    with pytest.raises(DeliveryFailed, match="unresolved"):
        deliver(callback, BODY, "evt_1", resolver=nowhere, opener=opener)
    internal, _ = rebinding_resolver(["127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a9fe:a9fe"])
    with pytest.raises(DeliveryFailed, match="address_refused"):
        deliver(callback, BODY, "evt_1", resolver=internal, opener=opener)
    assert opened == [PUBLIC_V4]


# ---- https: the pinned address, SNI and certificate verification against the host name ----------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A throwaway self-signed certificate for `hooks.example.com` and its key."""
    folder = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hooks.example.com")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("hooks.example.com")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


@contextmanager
def tls_receiver(tls_files: tuple[Path, Path]) -> Iterator[tuple[Receiver, list[str | None]]]:
    """A loopback HTTPS receiver that records the SNI names it was asked for."""
    server_names: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*tls_files)

    def remember(_sock: ssl.SSLObject | ssl.SSLSocket, name: str | None, _context: ssl.SSLContext) -> None:
        server_names.append(name)

    context.sni_callback = remember
    receiver = Receiver()
    receiver.socket = context.wrap_socket(receiver.socket, server_side=True)
    with serving(receiver):
        yield receiver, server_names


def test_https_delivery_goes_to_the_pinned_address_with_sni_and_a_verified_certificate(
    tls_files: tuple[Path, Path],
) -> None:
    trusting = ssl.create_default_context(cafile=str(tls_files[0]))
    with tls_receiver(tls_files) as (receiver, server_names):
        resolver, lookups = rebinding_resolver([str(PUBLIC_V4)], ["127.0.0.1"])
        opened: list[IPAddress] = []

        def to_the_receiver(address: IPAddress, port: int, timeout: float | None) -> socket.socket:
            """The public address "is" the loopback receiver: nothing else is contacted."""
            opened.append(address)
            return socket.create_connection(("127.0.0.1", receiver.port), timeout)

        url = f"https://hooks.example.com:{receiver.port}/hook"
        deliver(Callback(url, SECRET), BODY, "evt_1", resolver=resolver, opener=to_the_receiver, context=trusting)
        assert (lookups, opened, server_names) == (["hooks.example.com"], [PUBLIC_V4], ["hooks.example.com"])
        headers, body = receiver.received[0]
        assert (headers["Host"], body) == (f"hooks.example.com:{receiver.port}", BODY)

        wrong_name = PinnedHTTPSConnection(
            "other.example.com", receiver.port, [ipaddress.ip_address("127.0.0.1")], timeout=5, context=trusting
        )
        with pytest.raises(ssl.SSLCertVerificationError):
            wrong_name.request("POST", "/hook", body=BODY)
        wrong_name.close()
        untrusted = PinnedHTTPSConnection(
            "hooks.example.com", receiver.port, [ipaddress.ip_address("127.0.0.1")], timeout=5
        )
        with pytest.raises(ssl.SSLCertVerificationError):
            untrusted.request("POST", "/hook", body=BODY)
        untrusted.close()
    assert len(receiver.received) == 1


# ---- the signature, as a receiver checks it with the snippet of docs/http-api.md --------------------------------


def test_the_documented_snippet_verifies_the_signature_within_the_tolerance() -> None:
    verify = documented_verify()
    t = int(time.time())
    header = sign(SECRET, BODY, t)
    assert re.fullmatch(rf"t={t},v1=[0-9a-f]{{64}}", header)
    assert verify(SECRET, header, BODY)
    assert verify(SECRET, header, BODY, now=t + TOLERANCE_SECONDS)
    assert not verify(SECRET, header, BODY + b" ")  # the body changed
    assert not verify(SECRET, header.replace(f"t={t}", f"t={t + 1}"), BODY)  # the time changed
    assert not verify(SECRET, header, BODY, now=t + TOLERANCE_SECONDS + 1)  # replayed too late
    assert not verify(SECRET, header, BODY, now=t - TOLERANCE_SECONDS - 1)
    assert not verify("another-secret", header, BODY)
    assert not verify(SECRET, "v1=" + header.split("v1=")[1], BODY)  # no time at all
    assert not verify(SECRET, f"t=١٢,v1={'0' * 64}", BODY)  # non-ASCII digits


# ---- through the real worker ------------------------------------------------------------------------------------


async def test_event_is_signed_and_keeps_its_id_across_two_failed_deliveries(
    jobs: JobClient, env: Env, policies: PolicyBook, samples: Path
) -> None:
    tenants = Path(env.vars["DOCJOBS_DATA_DIR"]) / "tenants.json"
    add_tenant(tenants, "hooked")
    with serving(Receiver((500, 500))) as receiver:
        secret = set_callback(tenants, "hooked", receiver.url, allow_http_loopback=True)
        submitted = await jobs.submit(samples / "sample.pdf", "standard", tenant="hooked", key="hook")
        status = await wait_terminal(jobs, submitted.job_id)
        assert status.state is JobState.SUCCEEDED
        final = await jobs.handle(submitted.job_id).result()  # the workflow ends after the delivery
        wait_for_requests(receiver, 3)
    assert final.notification == "delivered"
    assert len(receiver.received) == 3
    event_ids = {headers[EVENT_ID_HEADER] for headers, _ in receiver.received}
    assert len(event_ids) == 1 and re.fullmatch(r"evt_[0-9a-f]{32}", event_ids.pop())
    verify = documented_verify()
    for headers, body in receiver.received:
        assert verify(secret, headers[SIGNATURE_HEADER], body)
    event = json.loads(receiver.received[-1][1])
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
    assert "PAGEWORD" not in receiver.received[-1][1].decode()  # digests and codes only


async def test_a_redirecting_callback_fails_without_saying_why_and_does_not_change_the_outcome(
    jobs: JobClient, env: Env, policies: PolicyBook, samples: Path
) -> None:
    tenants = Path(env.vars["DOCJOBS_DATA_DIR"]) / "tenants.json"
    add_tenant(tenants, "redirected")
    with serving(Receiver()) as elsewhere, serving(Receiver((302,) * 6, location=elsewhere.url)) as receiver:
        set_callback(tenants, "redirected", receiver.url, allow_http_loopback=True)
        submitted = await jobs.submit(samples / "sample.pdf", "standard", tenant="redirected", key="x")
        final = await jobs.handle(submitted.job_id).result()
    assert (final.state, final.notification) == (JobState.SUCCEEDED, "failed")
    assert len(receiver.received) == 6 and elsewhere.received == []
    events = await jobs.audit(submitted.job_id)
    failures = [e for e in events if e["event"] == "activity_task_failed"]
    assert [e["failure_code"] for e in failures] == ["notify.failed"]
    told = json.dumps(failures)  # what the tenant could learn: the same code and message whatever went wrong
    assert not re.search(r"3xx|redirect|refused|Location|127\.0\.0\.1|/hook", told)
    # tried again after the deployment's first wait (DOCJOBS_NOTIFY_RETRY_SECONDS), fixed in the job at acceptance
    history = await jobs.handle(submitted.job_id).fetch_history()
    scheduled = [
        event.activity_task_scheduled_event_attributes
        for event in history.events
        if event.activity_task_scheduled_event_attributes.activity_type.name == "notify"
    ]
    assert [attributes.retry_policy.initial_interval.ToTimedelta() for attributes in scheduled] == [
        datetime.timedelta(seconds=NOTIFY_RETRY_SECONDS)
    ]


# ---- notify on threads of its own ------------------------------------------------------------------------------------


def threads_running(code: CodeType) -> list[str]:
    """The names of the threads whose stack is inside `code` right now."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    found = []
    for ident, frame in sys._current_frames().items():
        current: FrameType | None = frame
        while current is not None:
            if current.f_code is code:
                found.append(names.get(ident, "?"))
                break
            current = current.f_back
    return found


async def test_a_held_callback_holds_no_stage_slot(
    env: Env, tmp_path: Path, policies: PolicyBook, samples: Path
) -> None:
    """With one stage slot, a job whose callback does not answer: its delivery runs on a `notify` thread, and
    another job runs every stage to the end meanwhile."""
    tenants = tmp_path / "tenants.json"
    add_tenant(tenants, "hooked-slow")
    settings = env.settings(
        DOCJOBS_TASK_QUEUE=f"notify-own-{uuid.uuid4().hex[:6]}",
        DOCJOBS_ACTIVITY_THREADS="1",
        DOCJOBS_OCR_ACTIVITY_THREADS="1",
        DOCJOBS_TENANTS_FILE=str(tenants),
    )
    client = await connect(settings)
    jobs = JobClient(client, settings)
    with serving(Receiver(stall=True)) as receiver:
        assert receiver.release is not None
        set_callback(tenants, "hooked-slow", receiver.url, allow_http_loopback=True)
        async with worker.serving(client, settings):
            first = await jobs.submit(samples / "sample.pdf", "standard", tenant="hooked-slow")
            await asyncio.to_thread(wait_for_requests, receiver, 1)
            assert receiver.received, "the callback was never called"
            delivering = threads_running(webhooks.deliver.__code__)
            assert delivering and all(name.startswith("notify") for name in delivering), delivering

            second = await jobs.submit(samples / "sample.pdf", "standard", tenant="quiet", key="2nd")
            status = await wait_terminal(jobs, second.job_id, timeout=120)
            assert status.state is JobState.SUCCEEDED
            description = await jobs.handle(first.job_id).describe()
            assert description.status is WorkflowExecutionStatus.RUNNING  # its callback still not answered
            receiver.release.set()
            final = await jobs.handle(first.job_id).result()
    assert (final.state, final.notification) == (JobState.SUCCEEDED, "delivered")
