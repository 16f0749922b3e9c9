"""The remote codec endpoint: lets the Temporal Web UI and CLI show encrypted payloads in the clear.

Temporal's remote codec protocol: `POST /decode` takes `{"payloads": [...]}` (protobuf JSON of `Payloads`) and
answers the same shape. There is no `/encode`: a payload it sealed would name no workflow (the protocol does
not say which), and workers refuse such a start input anyway; whoever holds the codec token could otherwise
seal requests of their choosing. The UI calls it from the browser, hence CORS for the UI's
origin with credentials (the UI can forward the user's access token). Whoever may call `/decode` reads
every job's payloads: with DOCJOBS_CODEC_TOKEN set, a request must carry `Authorization: Bearer <token>`,
and the endpoint refuses to listen beyond loopback without one. Bodies are capped (413 beyond the cap).

The protocol names the namespace (`X-Namespace`) but not the workflow, so this endpoint opens a bound
ciphertext with the binding the payload itself names (authenticated by AES-GCM); refusing a ciphertext
moved to another workflow is the workers' and clients' job, which the SDK tells the workflow. Plaintext
payloads (the SDK's own bookkeeping in markers, anything written before encryption) are shown as they are.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated

from fastapi import Depends, FastAPI, Header, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from docjobs.settings.config import ConfigError
from docjobs.temporal.codec import PayloadDecryptionError
from docjobs.temporal.settings import TemporalSettings

DEFAULT_UI_ORIGIN = "http://localhost:8233"
ALLOWED_HEADERS = ["content-type", "x-namespace", "authorization"]
MAX_BODY_BYTES = 4 * 1024 * 1024  # a history page of payloads fits many times over
Transform = Callable[[Sequence[Payload]], Awaitable[list[Payload]]]


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        self.message = message


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status_code=status)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


async def read_capped(request: Request) -> bytes:
    """The body, or _Refused(413) as soon as it exceeds MAX_BODY_BYTES (declared or streamed)."""
    too_large = _Refused(413, "codec.too_large", f"the body exceeds {MAX_BODY_BYTES} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise too_large
    return bytes(body)


def create_codec_app(
    settings: TemporalSettings, *, cors_origin: str = DEFAULT_UI_ORIGIN, host: str = "127.0.0.1"
) -> FastAPI:
    """The codec endpoint for `settings.namespace`, with the keys of `settings`, to listen on `host`.

    ConfigError without keys, or for a non-loopback `host` without DOCJOBS_CODEC_TOKEN."""
    codec = settings.payload_codec(pass_plaintext=True)
    if codec is None:
        raise ConfigError("the codec server needs DOCJOBS_CODEC_KEYS_FILE or DOCJOBS_CODEC_KEYS")
    token = settings.codec_token
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"the codec server decrypts every job's payloads: listening on {host} needs DOCJOBS_CODEC_TOKEN "
            "(or DOCJOBS_CODEC_TOKEN_FILE)"
        )

    def authorized(
        authorization: Annotated[str | None, Header()] = None,
        x_namespace: Annotated[str | None, Header()] = None,
    ) -> None:
        if token is not None and not hmac.compare_digest((authorization or "").encode(), f"Bearer {token}".encode()):
            raise _Refused(403, "codec.forbidden", "a valid bearer token is required")
        if x_namespace is not None and x_namespace != settings.namespace:
            raise _Refused(403, "codec.namespace", "this codec serves another namespace")

    app = FastAPI(title="docjobs codec", version="1", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(
        CORSMiddleware,
        allow_origins=[cors_origin],
        allow_credentials=True,
        allow_methods=["POST"],
        allow_headers=ALLOWED_HEADERS,
    )

    @app.exception_handler(_Refused)
    async def refused(_: Request, error: _Refused) -> JSONResponse:
        return _error(error.status, error.code, error.message)

    async def apply(transform: Transform, request: Request) -> Response:
        body = await read_capped(request)
        try:
            payloads = json_format.Parse(body, Payloads())
        except (json_format.ParseError, UnicodeDecodeError):
            return _error(400, "codec.bad_request", 'the body must be {"payloads": [...]} in protobuf JSON')
        try:
            result = Payloads(payloads=await transform(payloads.payloads))
        except PayloadDecryptionError as error:
            return _error(400, "codec.undecryptable", str(error))
        return Response(json_format.MessageToJson(result), media_type="application/json")

    @app.post("/decode", dependencies=[Depends(authorized)])
    async def decode(request: Request) -> Response:
        return await apply(codec.decode, request)

    return app
