"""Loopback stand-ins for the providers a worker calls, and a proxy in front of each that counts the calls and can
be switched to answer slowly or not at all.

`bench/rehearsal.py` puts one `SwitchedProxy` in front of S3 (moto's server), one in front of the TSA (certomancer's)
and one in front of a `WebhookReceiver`: the calls are counted where they arrive, whoever makes them, and a provider
slowdown is a switch thrown at run time (`Switch.delay`, `Switch.fail`, `Switch.restore`), with no docjobs setting
changed. The proxy speaks plain HTTP/1.1 (keep-alive, `Content-Length` or chunked bodies) and forwards each request
whole: what the rehearsal's providers need, not a general proxy. It records methods, paths and statuses only (S3
keys are digests and run folders, never a document's name or content).
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"})
UPSTREAM_TIMEOUT = 60.0  # longer than any delay the rehearsal sets: the caller's own timeouts decide


@dataclass
class Switch:
    """How a proxy answers: `pass` forwards, `delay` waits `seconds` then forwards, `fail` answers 503 at once."""

    mode: str = "pass"
    seconds: float = 0.0

    def delay(self, seconds: float) -> None:
        self.seconds, self.mode = seconds, "delay"

    def fail(self) -> None:
        self.mode = "fail"

    def restore(self) -> None:
        self.mode = "pass"


@dataclass(frozen=True)
class Call:
    """One request as the proxy saw it: when it arrived (monotonic), what, and what it was answered."""

    at: float
    method: str
    path: str
    status: int


@dataclass
class Calls:
    """The calls a proxy saw, appended from its handler threads."""

    seen: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, call: Call) -> None:
        with self.lock:
            self.seen.append(call)

    def snapshot(self) -> list[Call]:
        with self.lock:
            return list(self.seen)


def read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request's body, from its `Content-Length` or its chunks (S3 clients may stream uploads chunked)."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        parts: list[bytes] = []
        while True:
            size = int(handler.rfile.readline().split(b";", 1)[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers: not forwarded (S3 checksums travel in headers here)
                return b"".join(parts)
            parts.append(handler.rfile.read(size))
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


class SwitchedProxy(ThreadingHTTPServer):
    """Forwards every request to `upstream` (host, port) as its switch says; a thread a connection."""

    daemon_threads = True

    def __init__(self, upstream: tuple[str, int], switch: Switch | None = None) -> None:
        self.upstream = upstream
        self.switch = switch or Switch()
        self.calls = Calls()
        super().__init__(("127.0.0.1", 0), ProxyHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that drops an idle keep-alive connection is no error; anything else is printed, as before."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as boto3 and httpx expect of S3 and a TSA
    server: SwitchedProxy

    def _forward(self) -> None:
        arrived = time.monotonic()
        body = read_body(self)
        switch = self.server.switch
        if switch.mode == "delay":
            time.sleep(switch.seconds)
        if switch.mode == "fail":
            self._answer(503, {"Content-Type": "text/plain"}, b"provider down (rehearsal)\n")
            self.server.calls.add(Call(arrived, self.command, self.path.split("?", 1)[0], 503))
            return
        headers = {name: value for name, value in self.headers.items() if name.lower() not in HOP_BY_HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=UPSTREAM_TIMEOUT)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            answer = response.read()
            kept = {name: value for name, value in response.getheaders() if name.lower() not in HOP_BY_HOP}
            if self.command == "HEAD":  # the object's size, not the empty body's
                kept["Content-Length"] = response.getheader("Content-Length") or "0"
            self._answer(response.status, kept, answer)
            self.server.calls.add(Call(arrived, self.command, self.path.split("?", 1)[0], response.status))
        finally:
            upstream.close()

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

    def log_message(self, *args: object) -> None:
        pass  # no request lines: paths name blobs


@dataclass(frozen=True)
class Event:
    """One webhook delivery the receiver took: the event's ID, its job and state (the body's own fields)."""

    event_id: str
    job_id: str
    state: str


class WebhookReceiver(ThreadingHTTPServer):
    """A tenant's callback endpoint on loopback: takes every POST with 200 and keeps its event ID, job and state."""

    daemon_threads = True

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), ReceiverHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def taken(self) -> list[Event]:
        with self.lock:
            return list(self.events)


class ReceiverHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: WebhookReceiver

    def do_POST(self) -> None:
        event = json.loads(read_body(self))
        with self.server.lock:
            self.server.events.append(
                Event(self.headers.get("X-Docjobs-Event-Id", ""), str(event["job_id"]), str(event["state"]))
            )
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[None]:
    """`server` answering in a thread of its own until the block ends."""
    thread = threading.Thread(target=server.serve_forever, name=type(server).__name__, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def per_key(calls: list[Call], method: str, suffix: str, status: int) -> Counter[str]:
    """How many `method` calls to paths ending in `suffix` were answered `status`, by path."""
    return Counter(
        call.path for call in calls if call.method == method and call.path.endswith(suffix) and call.status == status
    )
