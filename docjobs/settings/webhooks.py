"""Webhook delivery to a tenant's callback that cannot be aimed inside our network.

A callback URL is chosen by the tenant, so it is treated like any other untrusted input: `https` only, the
host is resolved once, every address that is not plainly public (loopback, private, link-local, CGNAT,
multicast, cloud metadata, and the IPv4-mapped/6to4/NAT64 forms of those) is refused, and the request goes to
exactly the address that passed (no second lookup for a rebinding DNS server to answer), with the original
`Host` header and, for https, SNI and certificate verification against the host name. Redirects are never
followed: a 3xx is a failed delivery. No proxy is used (it would resolve the name again).

The body is signed in the Stripe style, `t=<unix time>,v1=<hex HMAC-SHA256 of "t.body">`, so a receiver can
refuse replays outside `TOLERANCE_SECONDS`; `X-Docjobs-Event-Id` is the same on every retry of one event.
Why a delivery failed is only a reason code for the worker log: the tenant sees `delivered` or `failed`.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

SIGNATURE_HEADER = "X-Docjobs-Signature"
EVENT_ID_HEADER = "X-Docjobs-Event-Id"
TOLERANCE_SECONDS = 300  # a receiver refuses a signature whose `t` is further than this from its clock
DELIVERY_TIMEOUT_SECONDS = 10  # per connect, send and read
# The whole delivery, however the receiver drips its answer: under the notify activity's start-to-close (30 s),
# so an attempt's thread is free again before Temporal gives up on the attempt.
DELIVERY_DEADLINE_SECONDS = 25

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], list[IPAddress]]
Opener = Callable[[IPAddress, int, float | None], socket.socket]

_network = ipaddress.ip_network
Networks = tuple[tuple[str, tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]], ...]

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address) for address in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)

# reason code -> networks, checked in order; the first match names the reason.
REFUSED_V4: Networks = (
    ("unspecified", (_network("0.0.0.0/8"),)),
    ("loopback", (_network("127.0.0.0/8"),)),
    ("private", (_network("10.0.0.0/8"), _network("172.16.0.0/12"), _network("192.168.0.0/16"))),
    ("link_local", (_network("169.254.0.0/16"),)),
    ("cgnat", (_network("100.64.0.0/10"),)),
    ("multicast", (_network("224.0.0.0/4"),)),
    ("broadcast", (_network("255.255.255.255/32"),)),
    (
        "reserved",
        (
            _network("192.0.0.0/24"),
            _network("192.0.2.0/24"),
            _network("192.88.99.0/24"),
            _network("198.18.0.0/15"),
            _network("198.51.100.0/24"),
            _network("203.0.113.0/24"),
            _network("240.0.0.0/4"),
        ),
    ),
)
REFUSED_V6: Networks = (
    ("unspecified", (_network("::/128"),)),
    ("loopback", (_network("::1/128"),)),
    ("private", (_network("fc00::/7"),)),
    ("link_local", (_network("fe80::/10"),)),
    ("multicast", (_network("ff00::/8"),)),
    (
        "reserved",
        (
            _network("::/96"),  # IPv4-compatible (deprecated)
            _network("100::/64"),  # discard
            _network("2001::/32"),  # Teredo: the client's address is obfuscated, refuse the whole tunnel
            _network("2001:db8::/32"),
            _network("64:ff9b:1::/48"),  # local-use NAT64
            _network("fec0::/10"),  # site-local (deprecated)
        ),
    ),
)
NAT64 = _network("64:ff9b::/96")
SIX_TO_FOUR = _network("2002::/16")


class CallbackInvalid(ValueError):
    """A callback URL that can never be delivered to (the message says why; it is shown to the operator)."""


class DeliveryFailed(Exception):
    """A delivery that did not end with a 2xx; `reason` is a code for the worker log, never shown to the tenant."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Callback:
    """A tenant's registered callback: where, the HMAC secret, and the development-only plain-http flag."""

    url: str
    secret: str
    allow_http_loopback: bool = False


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str


def parse_callback(url: str, *, allow_http_loopback: bool = False) -> Target:
    """Check a callback URL without resolving it (at registration and before every delivery)."""
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in url):
        raise CallbackInvalid("a callback URL must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        raise CallbackInvalid("a callback URL that cannot be parsed") from None
    if parts.scheme not in ("https", "http"):
        raise CallbackInvalid("a callback URL must be https://")
    if parts.scheme == "http" and not allow_http_loopback:
        raise CallbackInvalid("a callback URL must be https:// (plain http to loopback needs --allow-http-loopback)")
    if "@" in parts.netloc:
        raise CallbackInvalid("a callback URL must not carry a user name or password")
    host = parts.hostname
    if not host:
        raise CallbackInvalid("a callback URL needs a host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise CallbackInvalid("a callback URL has an invalid port") from None
    literal = _literal(host)
    if parts.scheme == "http" and host != "localhost" and (literal is None or not literal.is_loopback):
        raise CallbackInvalid("plain http callbacks may only go to 127.0.0.0/8, ::1 or localhost")
    if parts.scheme == "https" and literal is not None and refusal(literal) is not None:
        raise CallbackInvalid("a callback URL must not name a loopback, private, link-local or reserved address")
    path = parts.path or "/"
    return Target(parts.scheme, host, port, f"{path}?{parts.query}" if parts.query else path)


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _embedded_v4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a 6to4 or NAT64 address leads to."""
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal(address: IPAddress) -> str | None:
    """Why a callback must not connect to `address` (a reason code), or None for a plainly public address."""
    if address in METADATA_ADDRESSES:
        return "metadata"
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # no DNS answer is ever one: refused whatever it embeds
            return refusal(address.ipv4_mapped) or "ipv4_mapped"
        embedded = _embedded_v4(address)
        if embedded is not None:
            return refusal(embedded)
    table = REFUSED_V4 if isinstance(address, ipaddress.IPv4Address) else REFUSED_V6
    for reason, networks in table:
        if any(address in network for network in networks):
            return reason
    return None if address.is_global else "reserved"


def permitted(target: Target, address: IPAddress) -> bool:
    """Plain http (registered with the development flag) goes to loopback only; https to public addresses only."""
    if target.scheme == "http":
        return address.is_loopback
    return refusal(address) is None


def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The host's addresses, in the system's preference order, from one lookup (none when it does not resolve)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return []
    addresses: list[IPAddress] = []
    for *_, sockaddr in found:
        address = ipaddress.ip_address(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


def open_socket(address: IPAddress, port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to exactly this address (a numeric address: nothing is looked up again)."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect((str(address), port))
    except BaseException:
        sock.close()
        raise
    return sock


class PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection whose socket goes to addresses resolved beforehand; `Host` stays the URL's host."""

    def __init__(
        self, host: str, port: int, addresses: list[IPAddress], *, timeout: float, opener: Opener = open_socket
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self.addresses = addresses
        self.opener = opener

    def connect(self) -> None:
        failure: OSError = ConnectionError("no address")
        for address in self.addresses:
            try:
                self.sock = self.opener(address, self.port, self.timeout)
                return
            except OSError as error:
                failure = error
        raise failure


class PinnedHTTPSConnection(PinnedHTTPConnection):
    """The same over TLS: SNI and certificate verification against the host name, not the pinned address."""

    default_port = 443

    def __init__(
        self,
        host: str,
        port: int,
        addresses: list[IPAddress],
        *,
        timeout: float,
        context: ssl.SSLContext | None = None,
        opener: Opener = open_socket,
    ) -> None:
        super().__init__(host, port, addresses, timeout=timeout, opener=opener)
        self.context = context or ssl.create_default_context()

    def connect(self) -> None:
        super().connect()
        self.sock = self.context.wrap_socket(self.sock, server_hostname=self.host)


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The `X-Docjobs-Signature` value: `t=<unix time>,v1=<hex HMAC-SHA256 of "t.body">`."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def event_id(job_id: str, run_id: str, state: str) -> str:
    """One ID per terminal event of one run: the same on every retry, so receivers can drop duplicates."""
    return "evt_" + hashlib.sha256(f"{job_id}\n{run_id}\n{state}".encode()).hexdigest()[:32]


def _pinned_connection(
    target: Target, resolver: Resolver, opener: Opener, *, timeout: float, context: ssl.SSLContext | None
) -> PinnedHTTPConnection:
    """A connection to the callback's host, pinned to the addresses it resolves to now that `permitted` lets it reach
    (DeliveryFailed `unresolved`, `address_refused`): no later lookup can send it elsewhere."""
    resolved = resolver(target.host, target.port)
    if not resolved:
        raise DeliveryFailed("unresolved")
    addresses = [address for address in resolved if permitted(target, address)]
    if not addresses:
        raise DeliveryFailed("address_refused")
    if target.scheme == "https":
        return PinnedHTTPSConnection(
            target.host, target.port, addresses, timeout=timeout, context=context, opener=opener
        )
    return PinnedHTTPConnection(target.host, target.port, addresses, timeout=timeout, opener=opener)


@contextlib.contextmanager
def cut_off_after(deadline: float, connection: http.client.HTTPConnection) -> Iterator[threading.Event]:
    """Shut `connection`'s socket `deadline` seconds from now, so that a blocked send or read returns at once however
    slowly the other side drips; yields the event set when it did. The connection is closed when the block ends."""
    expired = threading.Event()

    def cut_off() -> None:
        expired.set()
        sock = connection.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(deadline, cut_off)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield expired
    finally:
        watchdog.cancel()
        connection.close()


def deliver(
    callback: Callback,
    body: bytes,
    event: str,
    *,
    timeout: float = DELIVERY_TIMEOUT_SECONDS,
    deadline: float = DELIVERY_DEADLINE_SECONDS,
    resolver: Resolver = system_resolver,
    opener: Opener = open_socket,
    context: ssl.SSLContext | None = None,
) -> None:
    """POST the JSON `body` of event `event` (its ID), signed now; raises `DeliveryFailed` unless it answered 2xx."""
    try:
        target = parse_callback(callback.url, allow_http_loopback=callback.allow_http_loopback)
    except CallbackInvalid:
        raise DeliveryFailed("callback_invalid") from None
    connection = _pinned_connection(target, resolver, opener, timeout=timeout, context=context)
    signed = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: sign(callback.secret, body, int(time.time())),
        EVENT_ID_HEADER: event,
    }
    with cut_off_after(deadline, connection) as expired:
        try:
            connection.request("POST", target.path, body=body, headers=signed)
            status = connection.getresponse().status
        except TimeoutError:
            raise DeliveryFailed("timeout") from None
        except ssl.SSLError:
            raise DeliveryFailed("timeout" if expired.is_set() else "tls_failed") from None
        except (OSError, http.client.HTTPException):
            raise DeliveryFailed("timeout" if expired.is_set() else "connection_failed") from None
    if expired.is_set():  # an answer cut short may still parse (its headers end where the socket was shut)
        raise DeliveryFailed("timeout")
    if not 200 <= status < 300:
        raise DeliveryFailed(f"http_{status // 100}xx")
