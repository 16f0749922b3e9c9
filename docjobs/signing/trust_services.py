"""Calls to the trust services a signature needs (a TSA, OCSP responders, CRL locations), with webhooks' rules.

Only the worker makes these calls, never a document child, and only to URLs the operator configured (the
`configured` of each call: `DOCJOBS_TSA_URL` for the TSA): a URL read from a certificate that is not configured is
not fetched. Each call resolves the host once and connects to exactly the addresses it got (no second lookup), follows
no redirect (a 3xx is a failure), reads at most `MAX_ANSWER_BYTES` and gives up after `CALL_DEADLINE_SECONDS`
however slowly the answer drips. The addresses are not screened as a tenant's callback's are: the operator chose
these services, and an internal CA's OCSP responder on a private network is normal.

Why a call failed is a reason code (`TrustServiceUnavailable.reason`) for the worker log; the job sees a stable
failure code (`signature.tsa_unavailable`, `signature.revocation_unavailable`).
"""

from __future__ import annotations

import asyncio
import http.client
import importlib
import ssl
from collections.abc import Collection
from typing import Any, cast
from urllib.parse import urlsplit

from pyhanko.sign.timestamps import TimeStamper, TimestampRequestError

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.settings.webhooks import (
    Opener,
    PinnedHTTPConnection,
    PinnedHTTPSConnection,
    Resolver,
    cut_off_after,
    open_socket,
    system_resolver,
)

tsp: Any = importlib.import_module("asn1crypto.tsp")  # untyped
CALL_TIMEOUT_SECONDS = 10  # per connect, send and read
CALL_DEADLINE_SECONDS = 20  # the whole call
MAX_ANSWER_BYTES = 4 << 20  # a CRL of a large CA is a few MiB; a timestamp or an OCSP response a few KiB


class TrustServiceUnavailable(Exception):
    """A trust service could not be used; `reason` is a code for the log (never shown to a tenant)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def call(
    url: str,
    *,
    configured: Collection[str],
    body: bytes | None = None,
    content_type: str | None = None,
    timeout: float = CALL_TIMEOUT_SECONDS,
    deadline: float = CALL_DEADLINE_SECONDS,
    max_bytes: int = MAX_ANSWER_BYTES,
    resolver: Resolver = system_resolver,
    opener: Opener = open_socket,
    context: ssl.SSLContext | None = None,
) -> bytes:
    """GET `url` (or POST `body` as `content_type`), one of the `configured` URLs, and return the 2xx answer's body.

    Raises TrustServiceUnavailable: `not_configured`, `url_invalid`, `unresolved`, `timeout`, `connection_failed`,
    `tls_failed`, `redirect`, `status_<code>`, `too_large`."""
    if url not in configured:
        raise TrustServiceUnavailable("not_configured")
    connection, path = _connection(url, resolver, opener, timeout=timeout, context=context)
    with cut_off_after(deadline, connection) as expired:
        try:
            headers = {"Content-Type": content_type} if content_type else {}
            connection.request("POST" if body is not None else "GET", path, body=body, headers=headers)
            answer = connection.getresponse()
            status = answer.status
            data = answer.read(max_bytes + 1) if 200 <= status < 300 else b""
        except TimeoutError:
            raise TrustServiceUnavailable("timeout") from None
        except ssl.SSLError:
            raise TrustServiceUnavailable("timeout" if expired.is_set() else "tls_failed") from None
        except (OSError, http.client.HTTPException):
            raise TrustServiceUnavailable("timeout" if expired.is_set() else "connection_failed") from None
    if expired.is_set():
        raise TrustServiceUnavailable("timeout")
    if 300 <= status < 400:
        raise TrustServiceUnavailable("redirect")
    if not 200 <= status < 300:
        raise TrustServiceUnavailable(f"status_{status}")
    if len(data) > max_bytes:
        raise TrustServiceUnavailable("too_large")
    return data


def _connection(
    url: str, resolver: Resolver, opener: Opener, *, timeout: float, context: ssl.SSLContext | None
) -> tuple[PinnedHTTPConnection, str]:
    """A connection pinned to the addresses `url`'s host resolves to now, and the request's path."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise TrustServiceUnavailable("url_invalid") from None
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host or "@" in parts.netloc:
        raise TrustServiceUnavailable("url_invalid")
    addresses = resolver(host, port)
    if not addresses:
        raise TrustServiceUnavailable("unresolved")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if parts.scheme == "https":
        return PinnedHTTPSConnection(host, port, addresses, timeout=timeout, context=context, opener=opener), path
    return PinnedHTTPConnection(host, port, addresses, timeout=timeout, opener=opener), path


class BoundedTimeStamper(TimeStamper):
    """pyHanko's RFC 3161 client over `trust_services.call`: the configured URL only, pinned, no redirect, capped."""

    def __init__(self, url: str) -> None:
        cast(Any, super()).__init__()
        self.url = url

    async def async_request_tsa_response(self, req: Any) -> Any:
        try:
            answer = await asyncio.to_thread(
                call, self.url, configured=(self.url,), body=req.dump(), content_type="application/timestamp-query"
            )
            response = tsp.TimeStampResp.load(answer)
            response.native  # noqa: B018  # parse it all here: a malformed answer is the TSA's failure, not ours
        except TrustServiceUnavailable as failure:
            raise TimestampRequestError(f"the TSA could not be used ({failure.reason})") from None
        except ValueError:
            raise TimestampRequestError("the TSA's answer is not a timestamp response") from None
        return response

    def token(self, digest: bytes) -> bytes:
        """A timestamp token (DER) over the SHA-256 `digest`. Raises DocJobError signature.tsa_unavailable."""
        try:
            return cast(bytes, asyncio.run(self.async_timestamp(digest, "sha256")).dump())
        except TimestampRequestError:
            raise DocJobError(FailureCode.SIGNATURE_TSA_UNAVAILABLE) from None
