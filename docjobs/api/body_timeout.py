"""A body-read timeout: a request whose body stops arriving is answered `408 request.timeout` and its connection
closed, instead of holding a spool file, a server task and a tenant's share for as long as the client likes.

Uvicorn bounds the wait for the next request on a kept-alive connection, not the wait for a body. This ASGI
middleware bounds every wait for the next piece of a request's body (`DOCJOBS_BODY_READ_TIMEOUT_SECONDS`, default
30 s): a client that sends its headers and then stalls is cut off after that many seconds. Once the body is
complete, waits are not bounded (a streamed response waits for the client's disconnect for as long as it runs).
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from docjobs.api.errors import ApiError


class BodyReadTimedOut(ApiError):
    def __init__(self, seconds: float) -> None:
        super().__init__(
            408,
            "request.timeout",
            f"no part of the request body arrived for {seconds:g} seconds",
            {"Connection": "close"},
        )


class BodyReadTimeout:
    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        complete = False

        async def timed_receive() -> Message:
            nonlocal complete
            if complete:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.seconds)
            except TimeoutError:
                complete = True  # nothing more is read of this body: the answer ends the exchange
                raise BodyReadTimedOut(self.seconds) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                complete = True
            return message

        await self.app(scope, timed_receive, send)
