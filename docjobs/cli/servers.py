"""Long-running commands: the embedded Temporal dev server, the HTTP API, the codec endpoint."""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import TYPE_CHECKING, Any

from docjobs.cli.output import EXIT_OK, EXIT_USAGE, Output, fail
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import ensure_dev_server, stop_dev_server
from docjobs.temporal.logs import LOG_FORMATS, configure_logging, default_log_format
from docjobs.temporal.settings import TemporalSettings

if TYPE_CHECKING:
    import uvicorn

# How long an idle keep-alive connection stays open. Longer than a client keeps one (httpx and others: 5 s, uvicorn's
# own default too): a server that closes at the very moment a client reuses the connection drops that request
# ("server disconnected without sending a response"); a client, or a proxy in front, ends its own idle ones first.
KEEP_ALIVE_SECONDS = 75


async def cmd_server(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    if args.action == "stop":
        stopped = await asyncio.to_thread(stop_dev_server, settings)
        out.result({"stopped": stopped}, "dev server stopped" if stopped else "no dev server was running")
        return EXIT_OK
    server = await asyncio.to_thread(ensure_dev_server, settings)
    payload = {"address": server.address, "ui_url": server.ui_url, "pid": server.pid, "started": server.started}
    out.result(payload, f"Temporal dev server at {server.address}, Web UI {server.ui_url} (pid {server.pid})")
    return EXIT_OK


def http_server(app: Any, args: argparse.Namespace) -> uvicorn.Server:
    """A uvicorn server whose logs (access lines included) go through the process's docjobs logging."""
    import uvicorn

    config = uvicorn.Config(app, host=args.host, port=args.port, log_config=None, timeout_keep_alive=KEEP_ALIVE_SECONDS)
    return uvicorn.Server(config)


async def cmd_serve(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    from docjobs.api.app import create_app

    if args.workers > 1:
        return await serve_processes(args, settings, out)
    configure_logging(args.log_format or default_log_format())  # before connecting: the SDK's logs too
    client = await connect(settings)
    jobs = JobClient(client, settings)
    server = http_server(create_app(settings, jobs), args)
    out.progress(f"docjobs API on http://{args.host}:{args.port} (OpenAPI at /openapi.json)")
    if args.with_worker:
        from docjobs.worker import serving

        async with serving(client, settings):
            await server.serve()
    else:
        await server.serve()
    out.result({"served": True, "host": args.host, "port": args.port}, "API stopped")
    return EXIT_OK


async def serve_processes(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    """`--workers N`: uvicorn's supervisor binds the port once and runs N API processes on it (restarting any
    that dies). Each builds its app from the environment and connects on its own: they share nothing but the
    blob store and Temporal."""
    import uvicorn

    if args.with_worker:
        return fail(out, EXIT_USAGE, "usage", "--with-worker runs in one process: use it without --workers")
    if args.log_format:
        os.environ["DOCJOBS_LOG_FORMAT"] = args.log_format  # the API processes start from this environment
    configure_logging(args.log_format or default_log_format())
    if settings.embedded:  # start it once here, not racing from N processes
        await asyncio.to_thread(ensure_dev_server, settings)
    out.progress(f"docjobs API on http://{args.host}:{args.port}, {args.workers} processes")
    # Blocks this (otherwise idle) loop until SIGINT/SIGTERM has stopped every API process.
    uvicorn.run(
        "docjobs.api.app:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_config=None,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
    out.result({"served": True, "host": args.host, "port": args.port}, "API stopped")
    return EXIT_OK


async def cmd_codec_server(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    from docjobs.api.codec_server import create_codec_app

    configure_logging(args.log_format or default_log_format())
    server = http_server(create_codec_app(settings, cors_origin=args.cors_origin, host=args.host), args)
    out.progress(f"docjobs codec endpoint on http://{args.host}:{args.port} (Web UI origin {args.cors_origin})")
    await server.serve()
    out.result({"served": True, "host": args.host, "port": args.port}, "codec endpoint stopped")
    return EXIT_OK


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    server = commands.add_parser("server", help="the embedded Temporal dev server")
    server.add_argument("action", choices=["start", "stop", "status"])
    server.set_defaults(handler=cmd_server)
    serve = commands.add_parser("serve", help="the HTTP API (needs a worker, or --with-worker)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--with-worker", action="store_true", help="also run a worker in this process")
    serve.add_argument(
        "--workers", type=positive_int, default=1, metavar="N", help="API processes sharing the port (default 1)"
    )
    serve.set_defaults(handler=cmd_serve)
    codec = commands.add_parser("codec-server", help="the remote codec endpoint of the Web UI and CLI")
    codec.add_argument("--host", default="127.0.0.1")
    codec.add_argument("--port", type=int, default=8089)
    codec.add_argument("--cors-origin", default="http://localhost:8233", metavar="URL", help="the Web UI's origin")
    codec.set_defaults(handler=cmd_codec_server)
    for long_running in (serve, codec):
        long_running.add_argument("--log-format", choices=LOG_FORMATS, help="default: DOCJOBS_LOG_FORMAT or text")
