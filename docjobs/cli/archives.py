"""`archive list|status|renew`: the archives of B-LTA releases (workflows/archive.py) and their renewals."""

from __future__ import annotations

import argparse
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from docjobs.cli.output import EXIT_OK, EXIT_USAGE, Output, fail
from docjobs.domain.archive import ARCHIVE_WORKFLOW, RENEW_SIGNAL, STATUS_QUERY, ArchiveStatus
from docjobs.temporal.client import connect
from docjobs.temporal.settings import TemporalSettings
from workflows import search_attributes as sa


async def cmd_list(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    client = await connect(settings)
    query = f"WorkflowType = '{ARCHIVE_WORKFLOW}' AND ExecutionStatus = 'Running'"
    if args.tenant:
        query += f" AND {sa.TENANT.name} = '{args.tenant.replace(chr(39), '')}'"
    archives: list[dict[str, Any]] = []
    async for execution in client.list_workflows(query, limit=args.limit):
        due = execution.typed_search_attributes.get(sa.NEXT_RENEWAL)
        tenant = execution.typed_search_attributes.get(sa.TENANT)
        archives.append(
            {"archive_id": execution.id, "tenant": tenant, "next_renewal": due.isoformat() if due else None}
        )
    lines = [f"{row['archive_id']}  tenant {row['tenant']}  next renewal {row['next_renewal']}" for row in archives]
    out.result({"archives": archives}, "\n".join(lines) or "no archives")
    return EXIT_OK


async def cmd_status(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    handle = _archive(await connect(settings), args.archive_id)
    try:
        status = await handle.query(STATUS_QUERY, result_type=ArchiveStatus)
    except RPCError as error:
        return _unknown(out, args.archive_id, error)
    newest = status.versions[-1]
    text = (
        f"archive {status.archive_id} (job {status.job_id}): version {newest.number}, sha256 "
        f"{newest.document.sha256}, next renewal {status.renew_by.isoformat()}"
        + (" (renewing now)" if status.renewing else "")
        + (f"; last renewal failed: {status.last_problem}" if status.last_problem else "")
    )
    out.result(status.model_dump(mode="json"), text)
    return EXIT_OK


async def cmd_renew(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    handle = _archive(await connect(settings), args.archive_id)
    try:
        await handle.signal(RENEW_SIGNAL)
    except RPCError as error:
        return _unknown(out, args.archive_id, error)
    out.result({"archive_id": args.archive_id, "renew_requested": True}, f"renewal requested for {args.archive_id}")
    return EXIT_OK


def _archive(client: Client, archive_id: str) -> WorkflowHandle[Any, Any]:
    return client.get_workflow_handle(archive_id)


def _unknown(out: Output, archive_id: str, error: RPCError) -> int:
    if error.status is not RPCStatusCode.NOT_FOUND:
        raise error
    return fail(out, EXIT_USAGE, "archive.unknown", f"no running archive {archive_id}")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    archive = commands.add_parser("archive", help="the archives of B-LTA releases and their renewals")
    actions = archive.add_subparsers(dest="archive_command", required=True)
    listing = actions.add_parser("list", help="the running archives and when each is renewed next")
    listing.add_argument("--tenant", help="only this tenant's")
    listing.add_argument("--limit", type=int, default=1000, help="at most this many (default 1000)")
    listing.set_defaults(handler=cmd_list)
    for name, handler, about in (
        ("status", cmd_status, "an archive's versions and its next renewal"),
        ("renew", cmd_renew, "renew an archive now, whatever is due"),
    ):
        action = actions.add_parser(name, help=about)
        action.add_argument("archive_id", help="archive/{job ID}/{run}: `archive list` names them")
        action.set_defaults(handler=handler)
