"""The retention sweep (docjobs/temporal/retention.py): run it periodically, e.g. hourly from cron."""

from __future__ import annotations

import argparse

from docjobs.cli.jobs import parse_duration
from docjobs.cli.output import (
    EXIT_OK,
    Output,
)
from docjobs.temporal.client import connect
from docjobs.temporal.retention import collect_garbage
from docjobs.temporal.settings import TemporalSettings


async def cmd_gc(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    grace = parse_duration(args.source_grace)
    report = await collect_garbage(
        await connect(settings), settings.blob_store(), dry_run=args.dry_run, source_grace=grace
    )
    verb = "would remove" if report.dry_run else "removed"
    text = (
        f"gc{' (dry run)' if report.dry_run else ''}: {verb} {report.runs_removed} run(s) and "
        f"{report.sources_removed} source(s), {report.blobs_removed} blob(s), {report.bytes_removed} bytes; "
        f"kept {report.runs_kept} run(s)"
    )
    out.result(report.model_dump(), text)
    return EXIT_OK


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gc = commands.add_parser("gc", help="delete the blobs of runs Temporal no longer retains")
    gc.add_argument("--dry-run", action="store_true", help="count what would be removed, remove nothing")
    gc.add_argument(
        "--source-grace",
        default="1h",
        metavar="DURATION",
        help="keep unreferenced sources stored more recently than this (default 1h): jobs being accepted",
    )
    gc.set_defaults(handler=cmd_gc)
