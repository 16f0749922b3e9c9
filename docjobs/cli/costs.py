"""`cost`: what released documents cost, from the status of every job that ended (docjobs/domain/costs.py adds it
up)."""

from __future__ import annotations

import argparse
import asyncio

from docjobs.cli.jobs import job_client, parse_duration
from docjobs.cli.output import EXIT_OK, Output
from docjobs.domain.costs import CostReport, cost_report
from docjobs.domain.job_status import JobStatus
from docjobs.domain.states import TERMINAL_STATES
from docjobs.temporal.client import JobClient
from docjobs.temporal.settings import TemporalSettings

STATUS_READS_AT_ONCE = 8


async def cmd_cost(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    jobs = await job_client(settings)
    since = parse_duration(args.since) if args.since else None
    ended = await jobs.list_jobs(tenant=args.tenant, closed_within=since, limit=None)
    terminal = {state.value for state in TERMINAL_STATES}
    report = cost_report(await _statuses(jobs, [job.job_id for job in ended if job.state in terminal]))
    window = f"in the last {args.since}" if args.since else "retained"
    out.result({"since": args.since, "tenant": args.tenant, **report.model_dump(mode="json")}, describe(report, window))
    return EXIT_OK


async def _statuses(jobs: JobClient, job_ids: list[str]) -> list[JobStatus]:
    """Every job's status (its result, for a job that ended by itself), a few at a time."""
    gate = asyncio.Semaphore(STATUS_READS_AT_ONCE)

    async def one(job_id: str) -> JobStatus:
        async with gate:
            return await jobs.status(job_id)

    return list(await asyncio.gather(*(one(job_id) for job_id in job_ids)))


def describe(report: CostReport, window: str) -> str:
    def per_page(value: float | None) -> str:
        return f"{value:.3f} CPU s/page" if value is not None else "no page released"

    lines = [
        f"released {window}: {report.released_documents} document(s), {report.released_pages} page(s), "
        f"{report.released_cpu_seconds:.3f} CPU s, {per_page(report.cpu_seconds_per_released_page)}"
    ]
    for name, mode in report.modes.items():
        lines.append(
            f"  {name:<24} {mode.documents:>5} doc(s) {mode.pages:>7} page(s) {mode.cpu_seconds:>10.3f} CPU s  "
            f"{per_page(mode.cpu_seconds_per_page)}"
        )
    for state, spent in report.unreleased.items():
        lines.append(f"on top, {state}: {spent.documents} job(s), {spent.cpu_seconds:.3f} CPU s")
    lines.append(
        f"all in: {report.total_cpu_seconds:.3f} CPU s, {per_page(report.cpu_seconds_per_released_page_all_in)}"
    )
    return "\n".join(lines)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cost = commands.add_parser("cost", help="CPU seconds per released document and page, and what failures cost")
    cost.add_argument("--since", metavar="DURATION", help="jobs that ended in the last e.g. 15m, 2h, 1d (default: all)")
    cost.add_argument("--tenant")
    cost.set_defaults(handler=cmd_cost)
