"""API tenants: create one with its key, and optionally its signed callback and its own limits; change its limits."""

from __future__ import annotations

import argparse
import asyncio
from functools import partial

from docjobs.cli.output import (
    EXIT_OK,
    EXIT_USAGE,
    Output,
    fail,
)
from docjobs.settings.config import ConfigError
from docjobs.settings.policies import PolicyBook
from docjobs.settings.tenants import TenantBook, TenantExists, add_tenant, set_callback, set_limits
from docjobs.settings.webhooks import CallbackInvalid, parse_callback
from docjobs.temporal.settings import TemporalSettings

LIMIT_FLAGS = {  # flag's dest -> the tenant's limit
    "max_running_jobs": "max_running_jobs",
    "max_bytes_per_day": "max_bytes_per_day",
    "max_batch_bytes": "max_batch_bytes",
}


def given_limits(args: argparse.Namespace) -> dict[str, int]:
    return {limit: getattr(args, dest) for dest, limit in LIMIT_FLAGS.items() if getattr(args, dest) is not None}


async def cmd_tenant_limits(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    """`tenant limits NAME [--max-...]`: set some of the tenant's own limits, and show the ones it has."""
    path = settings.tenants_file
    try:
        own = await asyncio.to_thread(set_limits, path, args.name, given_limits(args))
    except ConfigError as error:
        return fail(out, EXIT_USAGE, "tenant.invalid", str(error), tenant=args.name)
    effective = TenantBook(path).limits(args.name, settings.tenant_limits).model_dump()
    out.result(
        {"tenant": args.name, "limits": effective, "own_limits": own},
        "\n".join(f"{name}: {value}{'' if name in own else ' (default)'}" for name, value in effective.items()),
    )
    return EXIT_OK


async def cmd_tenant(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    if args.action == "limits":
        return await cmd_tenant_limits(args, settings, out)
    path = settings.tenants_file
    if args.allow_http_loopback and not args.callback:
        return fail(out, EXIT_USAGE, "callback.invalid", "--allow-http-loopback needs --callback URL")
    if args.callback:  # checked before the tenant exists: a refused callback leaves nothing half-made
        try:
            parse_callback(args.callback, allow_http_loopback=args.allow_http_loopback)
        except CallbackInvalid as error:
            return fail(out, EXIT_USAGE, "callback.invalid", str(error), tenant=args.name)
    book = PolicyBook.load(settings.policy_file)
    listed = None if args.policies is None else [name.strip() for name in args.policies.split(",") if name.strip()]
    if listed is not None:  # checked before the tenant exists, as the callback is
        unknown = sorted(set(listed) - set(book.policies))
        if unknown or not listed:
            known = ", ".join(sorted(book.policies))
            message = f"unknown policy {', '.join(unknown)} (known: {known})" if unknown else "--policies names none"
            return fail(out, EXIT_USAGE, "policy.unknown", message, tenant=args.name)
    try:
        key = await asyncio.to_thread(partial(add_tenant, policies=listed), path, args.name)
    except TenantExists:
        return fail(out, EXIT_USAGE, "tenant.exists", f"tenant {args.name!r} already exists", tenant=args.name)
    allowed = sorted(book.for_tenant(listed))
    payload = {"tenant": args.name, "api_key": key, "tenants_file": str(path), "policies": allowed}
    text = f"tenant {args.name} created; its API key (shown only this once):\n{key}"
    if given_limits(args):
        payload["limits"] = await asyncio.to_thread(set_limits, path, args.name, given_limits(args))
    text += f"\npolicies it may use: {', '.join(allowed)}" + ("" if listed else " (every policy not trusted-only)")
    if args.callback:
        secret = await asyncio.to_thread(
            partial(set_callback, allow_http_loopback=args.allow_http_loopback), path, args.name, args.callback
        )
        payload |= {
            "callback_url": args.callback,
            "webhook_secret": secret,
            "allow_http_loopback": args.allow_http_loopback,
        }
        text += f"\nterminal-state events go to {args.callback}, signed (HMAC-SHA256) with this secret:\n{secret}"
        if args.allow_http_loopback:
            text += "\n(plain http to loopback allowed: for development and tests only)"
    out.result(payload, text)
    return EXIT_OK


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tenant = commands.add_parser("tenant", help="API tenants and their keys")
    tenant.add_argument("action", choices=["add", "limits"], help="add a tenant; or set (and show) its limits")
    tenant.add_argument("name")
    tenant.add_argument(
        "--policies",
        metavar="A,B",
        help="the policies the tenant may use (default: every policy not trusted-only, now and later)",
    )
    tenant.add_argument("--callback", metavar="URL", help="POST a signed event here on every terminal state (https)")
    tenant.add_argument(
        "--allow-http-loopback",
        action="store_true",
        help="development and tests only: let the callback be plain http to 127.0.0.0/8, ::1 or localhost",
    )
    for flag, what in (
        ("--max-running-jobs", "jobs it may have running at once (default DOCJOBS_TENANT_MAX_RUNNING_JOBS)"),
        ("--max-bytes-per-day", "bytes the API accepts from it per UTC day (default DOCJOBS_TENANT_MAX_BYTES_PER_DAY)"),
        ("--max-batch-bytes", "bytes one batch of it may hold (default DOCJOBS_TENANT_MAX_BATCH_BYTES)"),
    ):
        tenant.add_argument(flag, type=positive, metavar="N", help=what)
    tenant.set_defaults(handler=cmd_tenant)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a whole number of at least 1")
    return value
