"""Batch commands: submit-batch, and batch status|wait|cancel (docs/batches.md)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docjobs.cli.jobs import add_policy_flags, asked_overrides, job_client
from docjobs.cli.output import EXIT_BUDGET, EXIT_JOB_NOT_SUCCEEDED, EXIT_OK, EXIT_USAGE, Output, fail
from docjobs.domain.batching import DEFAULT_CONCURRENCY, MAX_CONCURRENCY, BatchState, BatchStatus
from docjobs.domain.idempotency import BATCH_KEY_RULE, is_valid_batch_key
from docjobs.domain.states import JobState
from docjobs.settings.config import ConfigError
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.batches import BatchClient
from docjobs.temporal.settings import TemporalSettings


def batch_files(names: list[str]) -> list[Path]:
    """Files as given; a directory gives its regular files (not hidden, not recursing), sorted by name."""
    paths: list[Path] = []
    for name in names:
        path = Path(name)
        if path.is_dir():
            paths.extend(sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")))
        elif path.is_file():
            paths.append(path)
        else:
            raise ConfigError(f"not a file or directory: {name}")
    if not paths:
        raise ConfigError("no documents to submit")
    return paths


def batch_payload(status: BatchStatus) -> dict[str, Any]:
    return status.model_dump(mode="json", exclude={"segments"})


def progress_line(status: BatchStatus) -> str:
    """`[####....] 23/50 ended: 20 succeeded, 2 failed, 1 quarantined, 0 canceled; 5 running`."""
    filled = 20 * status.ended // status.total if status.total else 20
    return (
        f"  [{'#' * filled:<20}] {status.ended}/{status.total} ended: {status.succeeded} succeeded, "
        f"{status.failed} failed, {status.quarantined} quarantined, {status.canceled} canceled; "
        f"{status.running} running"
    )


def describe_batch(status: BatchStatus) -> str:
    code = f" ({status.failure_code})" if status.failure_code else ""  # a batch whose policy could not be pinned
    lines = [f"batch {status.batch_id}: {status.state.value}{code}", progress_line(status)]
    if status.not_started:
        lines.append(f"  not started: {status.not_started}")
    for outcome in status.outcomes:
        if outcome.state is not JobState.SUCCEEDED:
            code = f" ({outcome.failure_code})" if outcome.failure_code else ""
            lines.append(f"  #{outcome.index} {outcome.job_id}: {outcome.state.value}{code}")
    return "\n".join(lines)


def progress_printer(out: Output) -> Callable[[BatchStatus], None]:
    """Prints the progress bar to stderr whenever it changes."""
    last = [""]

    def show(status: BatchStatus) -> None:
        line = progress_line(status)
        if line != last[0]:
            last[0] = line
            out.progress(line)

    return show


async def batch_client(settings: TemporalSettings) -> BatchClient:
    return BatchClient(await job_client(settings))


async def cmd_submit_batch(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    if args.key is not None and not is_valid_batch_key(args.key):
        return fail(out, EXIT_USAGE, "idempotency.invalid", f"--key: {BATCH_KEY_RULE}")
    overrides = asked_overrides(args)  # an invalid override is refused before any document is stored
    # The name the batch asks for (the policy file's default if none): its first step resolves and pins it, on a worker.
    policy = PolicyBook.load(settings.policy_file).get(args.policy).name
    paths = batch_files(args.paths)
    batches = await batch_client(settings)
    sources = await batches.accept_files(paths, tenant=args.tenant)
    submitted = await batches.submit(
        sources,
        policy,
        overrides=overrides,
        tenant=args.tenant,
        key=args.key,
        concurrency=args.concurrency,
        deadline_seconds=args.deadline,
    )
    if submitted.conflict:
        message = "this key names a batch of other documents or another policy"
        return fail(out, EXIT_USAGE, "idempotency.conflict", message, batch_id=submitted.batch_id)
    verb = "created" if submitted.created else "already exists"
    payload = {"batch_id": submitted.batch_id, "created": submitted.created, "total": submitted.total}
    out.result(payload, f"{submitted.batch_id} ({verb}, {submitted.total} documents)")
    return EXIT_OK


async def cmd_batch_status(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    status = await (await batch_client(settings)).status(args.batch_id)
    out.result(batch_payload(status), describe_batch(status))
    return EXIT_OK


async def cmd_batch_wait(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    batches = await batch_client(settings)
    status = await batches.wait(args.batch_id, timeout=args.timeout, on_progress=progress_printer(out))
    if status.state is BatchState.RUNNING:
        payload = {**batch_payload(status), "wait_end": "timeout"}
        out.result(payload, f"still running after the caller's budget; batch ID: {args.batch_id}")
        return EXIT_BUDGET
    out.result({**batch_payload(status), "wait_end": "terminal"}, describe_batch(status))
    everything_succeeded = status.state is BatchState.COMPLETED and status.succeeded == status.total
    return EXIT_OK if everything_succeeded else EXIT_JOB_NOT_SUCCEEDED


async def cmd_batch_cancel(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    batches = await batch_client(settings)
    status = await batches.status(args.batch_id, outcomes=False)
    if status.state is not BatchState.RUNNING:
        return fail(out, EXIT_USAGE, "batch.ended", f"the batch has already ended ({status.state.value})")
    await batches.cancel(args.batch_id)
    out.result({"batch_id": args.batch_id, "cancel_requested": True}, f"cancel requested for {args.batch_id}")
    return EXIT_OK


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    submit = commands.add_parser("submit-batch", help="accept documents as one batch and print its batch ID")
    submit.add_argument("paths", nargs="+", metavar="DIR|FILE", help="files, or directories of files")
    add_policy_flags(submit, key_help=f"batch key (batch ID = TENANT/batch-KEY): {BATCH_KEY_RULE}")
    submit.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        choices=range(1, MAX_CONCURRENCY + 1),
        metavar="N",
        help=f"jobs of the batch running at once (1-{MAX_CONCURRENCY}, default {DEFAULT_CONCURRENCY})",
    )
    submit.set_defaults(handler=cmd_submit_batch)
    batch = commands.add_parser("batch", help="a batch's progress and outcomes, wait for it, cancel it")
    actions = batch.add_subparsers(dest="batch_command", required=True)
    status = actions.add_parser("status", help="progress; once ended, every job's outcome (--json)")
    wait = actions.add_parser("wait", help="wait with a progress bar until the batch has ended")
    wait.add_argument("--timeout", type=float, default=3600, metavar="S", help="absolute wait deadline")
    cancel = actions.add_parser("cancel", help="cancel the running jobs and start no more")
    for parser, handler in ((status, cmd_batch_status), (wait, cmd_batch_wait), (cancel, cmd_batch_cancel)):
        parser.add_argument("batch_id")
        parser.set_defaults(handler=handler)
