"""The HTTP servers `serve` and `codec-server` run: a real uvicorn on loopback, read over a raw socket."""

from __future__ import annotations

import argparse
import asyncio
import socket
import time
from typing import Any

import httpx

from docjobs.cli.servers import KEEP_ALIVE_SECONDS, http_server
from tests.conftest import free_port

REQUEST = b"GET / HTTP/1.1\r\nHost: api\r\n\r\n"


async def hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def answer(connection: socket.socket) -> bytes:
    connection.sendall(REQUEST)
    got = b""
    while not got.endswith(b"ok"):
        chunk = connection.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


async def test_an_idle_connection_outlives_the_clients_own_keep_alive() -> None:
    """A client reuses an idle connection until its own expiry (httpx: 5 s). Were the server to close first, a request
    sent at that moment would be dropped unanswered (hostile uploads' status polls were, under load)."""
    client_expiry = httpx.Limits().keepalive_expiry
    assert client_expiry is not None and client_expiry < KEEP_ALIVE_SECONDS
    port = free_port()
    server = http_server(hello, argparse.Namespace(host="127.0.0.1", port=port))
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            assert (await asyncio.to_thread(answer, connection)).startswith(b"HTTP/1.1 200")
            idle_until = time.monotonic() + client_expiry + 0.5
            while time.monotonic() < idle_until:  # idle for longer than the client would keep the connection
                await asyncio.sleep(0.1)
            assert (await asyncio.to_thread(answer, connection)).startswith(b"HTTP/1.1 200")
    finally:
        server.should_exit = True
        await serving
