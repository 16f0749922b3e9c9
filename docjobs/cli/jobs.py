"""Job commands: run, submit, wait, status, cancel, fetch, audit, jobs, timeline."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from temporalio.client import WorkflowFailureError

from docjobs.cli.output import (
    EXIT_BUDGET,
    EXIT_JOB_NOT_SUCCEEDED,
    EXIT_OK,
    Output,
    describe,
    progress_printer,
    status_payload,
)
from docjobs.domain.idempotency import CLIENT_KEY_RULE
from docjobs.domain.models import InputKind, JobOverrides
from docjobs.domain.policy import BUILTIN_PATTERN_NAMES, OcrMode
from docjobs.domain.states import JobState, parse_state
from docjobs.pdf.inspect import input_kind
from docjobs.settings.config import ConfigError
from docjobs.settings.policies import PolicyBook, job_overrides
from docjobs.settings.tenants import CLI_TENANT
from docjobs.store.templates import TemplateStore
from docjobs.temporal.client import JobClient, Submitted, connect
from docjobs.temporal.job_plan import JobAsk, JobPlan, plan_job
from docjobs.temporal.poller import WaitEnd, WaitResult, wait_for_job
from docjobs.temporal.settings import TemporalSettings

HTML_SUFFIXES = (".html", ".htm")


async def job_client(settings: TemporalSettings) -> JobClient:
    """A job client on a fresh connection (the embedded dev server is started on first use)."""
    return JobClient(await connect(settings), settings)


def asked_overrides(args: argparse.Namespace) -> JobOverrides:
    """The overrides the policy flags ask for, checked before any server is contacted (ConfigError, pydantic's
    ValidationError): the job's `resolve` step applies them."""
    return job_overrides(
        watermark=args.watermark,
        mode=args.mode,
        dpi=args.dpi,
        ocr=args.ocr,
        sign=False if args.no_sign else None,
        redact=args.redact,
        redact_regions=args.redact_region,
    )


def job_ask(args: argparse.Namespace, settings: TemporalSettings) -> JobAsk:
    """What `run` and `submit` ask of their input, refused (ConfigError, pydantic's ValidationError) before
    anything is stored: the named policy (the default if none is named; the policy file is read here, once) with
    the flags' overrides, for the tenant, key and deadline given. The input's kind is set once it is known."""
    return JobAsk(
        named=PolicyBook.load(settings.policy_file).get(args.policy),
        overrides=asked_overrides(args),
        tenant=args.tenant,
        key=args.key,
        deadline_seconds=args.deadline,
    )


@contextmanager
def accepted_input(args: argparse.Namespace, settings: TemporalSettings) -> Iterator[tuple[Path, InputKind]]:
    """The file to submit and what it is: FILE (a PDF or image, a `.html` file, a zip bundle), or for
    `--template NAME --data FILE` the job's manifest (the data is stored by its digest first)."""
    if (args.template is None) == (args.file is None) or (args.template is None) != (args.data is None):
        raise ConfigError("give a FILE, or --template NAME with --data FILE.json")
    if args.template is None:
        source = Path(args.file)
        with source.open("rb") as head:
            kind = input_kind(head.read(1024), declared_html=source.suffix.lower() in HTML_SUFFIXES)
        yield source, kind or InputKind.DOCUMENT  # an unknown kind fails in render, with its code
        return
    templates = TemplateStore(settings.blob_store())
    with tempfile.TemporaryDirectory(prefix="docjobs-manifest-") as folder:
        yield (
            templates.manifest(
                args.tenant, args.template, Path(args.data), Path(folder), max_data_bytes=settings.max_input_bytes
            ),
            InputKind.TEMPLATE,
        )


class KeyConflict(Exception):
    """`--key` names a job accepted with another document or policy: nothing of this input was stored."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id


async def submit_input(jobs: JobClient, plan: JobPlan) -> Submitted:
    """Start (or get) the planned job. Raises KeyConflict when the key's job was accepted with another input or
    ask (the API's 422 `idempotency.conflict`): answering with that job would report, or fetch, another document's
    result."""
    submitted = await jobs.submit_planned(plan)
    if submitted.conflict:
        raise KeyConflict(submitted.job_id)
    return submitted


async def wait_and_report(jobs: JobClient, job_id: str, args: argparse.Namespace, out: Output) -> int:
    result: WaitResult = await wait_for_job(
        lambda: jobs.status(job_id),
        timeout=args.timeout,
        max_polls=args.max_polls,
        on_status=None if out.as_json else progress_printer(out),
    )
    if result.end is not WaitEnd.TERMINAL:
        payload = status_payload(result.status) if result.status else {"job_id": job_id, "state": None}
        payload["wait_end"] = result.end.value
        await jobs.note_wait_ended(job_id, result.end.value)
        out.result(payload, f"still running after the caller's budget ({result.end.value}); job ID: {job_id}")
        return EXIT_BUDGET
    assert result.status is not None
    out.result({**status_payload(result.status), "wait_end": "terminal"}, describe(result.status))
    return EXIT_OK if result.status.state is JobState.SUCCEEDED else EXIT_JOB_NOT_SUCCEEDED


def parse_duration(text: str) -> timedelta:
    """`90s`, `15m`, `2h`, `1d`."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise ConfigError(f"not a duration: {text!r} (use e.g. 90s, 15m, 2h, 1d)")
    return timedelta(seconds=int(text[:-1]) * units[text[-1]])


async def cmd_submit(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    ask = job_ask(args, settings)
    with accepted_input(args, settings) as (source, kind):
        plan = await asyncio.to_thread(plan_job, source, replace(ask, input_kind=kind), settings.job_id_key())
        submitted = await submit_input(await job_client(settings), plan)
    verb = "created" if submitted.created else "already exists"
    out.result({"job_id": submitted.job_id, "created": submitted.created}, f"{submitted.job_id} ({verb})")
    return EXIT_OK


async def cmd_run(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    from docjobs.worker import serving  # the in-process worker of the one-shot run

    # Stage failures are the job's business (reported below), not tracebacks for the person at the terminal.
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    logging.getLogger("docjobs").setLevel(logging.ERROR)
    logging.getLogger("pyhanko").setLevel(logging.CRITICAL)
    ask = job_ask(args, settings)
    with accepted_input(args, settings) as (source, kind):
        named = Path(args.file or args.data)
        target = Path(args.out) if args.out else named.with_name(f"{named.stem}.docjobs.pdf")
        plan = await asyncio.to_thread(plan_job, source, replace(ask, input_kind=kind), settings.job_id_key())
        settings = run_settings(settings, plan.job_id)
        client = await connect(settings)
        jobs = JobClient(client, settings)
        async with serving(client, settings):
            submitted = await submit_input(jobs, plan)
            out.say(f"job {submitted.job_id} ({'created' if submitted.created else 'already exists'})")
            code = await wait_and_report(jobs, submitted.job_id, args, out)
            if code != EXIT_BUDGET:  # the worker stays until the job's wrap-up (evidence, callback) is done too
                with suppress(WorkflowFailureError):
                    await jobs.handle(submitted.job_id).result()
    if code == EXIT_OK:
        await jobs.fetch(submitted.job_id, target)
        out.progress(f"wrote {target}")
    return code


def run_settings(settings: TemporalSettings, job_id: str) -> TemporalSettings:
    """The settings of a one-shot `run`: its in-process worker serves only the run's own job, on a task queue
    (and OCR queue) named after the job, never the shared queue where other clients' jobs wait. Running the same
    command again (same job ID) serves the same queue, so it resumes a job an interrupted run left."""
    own_queue = f"{settings.task_queue}-run-{hashlib.sha256(job_id.encode()).hexdigest()[:16]}"
    return replace(settings, task_queue=own_queue, ocr_task_queue_override=None)


async def cmd_wait(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    return await wait_and_report(await job_client(settings), args.job_id, args, out)


async def cmd_status(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    status = await (await job_client(settings)).status(args.job_id)
    out.result(status_payload(status), describe(status))
    return EXIT_OK


async def cmd_cancel(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    await (await job_client(settings)).cancel(args.job_id)
    out.result({"job_id": args.job_id, "cancel_requested": True}, f"cancel requested for {args.job_id}")
    return EXIT_OK


async def cmd_fetch(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    status = await (await job_client(settings)).fetch(args.job_id, Path(args.o))
    out.result({"job_id": args.job_id, "path": args.o, "output_sha256": status.output_sha256}, f"wrote {args.o}")
    return EXIT_OK


async def cmd_audit(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    """The history as a readable timeline, or with `--json` as JSON lines (one object per event)."""
    for event in await (await job_client(settings)).audit(args.job_id):
        if out.as_json:
            print(json.dumps(event, sort_keys=True))
            continue
        detail = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("event_id", "time", "event"))
        print(f"{event['time']}  #{event['event_id']:<4} {event['event']}  {detail}".rstrip())
    return EXIT_OK


async def cmd_jobs(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    """Jobs through visibility: what is active, what is old, whose."""
    found = await (await job_client(settings)).list_jobs(
        state=parse_state(args.state) if args.state else None,
        tenant=args.tenant,
        older_than=parse_duration(args.older_than) if args.older_than else None,
        limit=args.limit,
    )
    lines = [
        f"{job.job_id}  {job.state or '?'}{f' ({job.stage})' if job.stage else ''}  "
        f"{job.document_class or ''}  started {job.started_at.isoformat() if job.started_at else '?'}"
        for job in found
    ]
    out.result({"jobs": [job.model_dump(mode="json") for job in found]}, "\n".join(lines) or "no jobs")
    return EXIT_OK


async def cmd_timeline(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    story = await (await job_client(settings)).timeline(args.job_id)
    text = "\n".join(entry["text"] for entry in story)
    out.result({"job_id": args.job_id, "timeline": story}, text)
    return EXIT_OK


def add_input_flags(parser: argparse.ArgumentParser) -> None:
    """What one job starts from: a file, or a stored template and its data (run, submit)."""
    parser.add_argument("file", nargs="?", help="a PDF, PNG, JPEG or TIFF; an .html file; a zip bundle (index.html)")
    parser.add_argument(
        "--template", metavar="NAME", help="generate from this stored template (see `template add`), with --data"
    )
    parser.add_argument(
        "--data", metavar="FILE.json", help="the template's data: a JSON object, its keys the template's variables"
    )


def add_policy_flags(
    parser: argparse.ArgumentParser, key_help: str = f"client idempotency key (job ID = TENANT/KEY): {CLIENT_KEY_RULE}"
) -> None:
    """The policy choice and its overrides, the tenant, the key and the deadline (submit, run, submit-batch)."""
    parser.add_argument("--policy", help="policy (document class) name from the policy file")
    parser.add_argument("--watermark", help="override the policy's watermark text")
    parser.add_argument("--mode", choices=["structure", "raster"], help="override the watermark mode")
    parser.add_argument("--dpi", type=int, help="override the raster DPI")
    parser.add_argument(
        "--ocr",
        nargs="?",
        const="skip",
        choices=[mode.value for mode in OcrMode],
        help="OCR the document (default mode: skip = only pages without text)",
    )
    parser.add_argument("--no-sign", action="store_true", help="do not sign this job's output")
    parser.add_argument(
        "--redact",
        action="append",
        default=[],
        metavar="NAME_OR_REGEX",
        help=f"remove every match for real (repeatable): a built-in pattern ({', '.join(BUILTIN_PATTERN_NAMES)}) "
        "or a regular expression",
    )
    parser.add_argument(
        "--redact-region",
        action="append",
        default=[],
        metavar="PAGE:X0,Y0,X1,Y1",
        help="remove everything in this rectangle (repeatable; page from 1, PDF points in the page's unrotated "
        "coordinates, origin bottom-left)",
    )
    parser.add_argument(
        "--tenant", default=CLI_TENANT, help=f"default: {CLI_TENANT} (reserved: no API key can hold that tenant)"
    )
    parser.add_argument("--key", help=key_help)
    parser.add_argument("--deadline", type=int, metavar="SECONDS", help="server-side deadline of the job")


def add_wait_flags(parser: argparse.ArgumentParser, timeout: float) -> None:
    parser.add_argument("--timeout", type=float, default=timeout, metavar="S", help="absolute wait deadline")
    parser.add_argument("--max-polls", type=int, default=10_000, metavar="N", help="poll budget")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser("run", help="one-shot job with an in-process worker")
    add_input_flags(run)
    add_policy_flags(run)
    add_wait_flags(run, 1800)
    run.add_argument("--out", help="output path (default: FILE.docjobs.pdf beside the input)")
    run.set_defaults(handler=cmd_run)
    submit = commands.add_parser("submit", help="accept a document and print its job ID")
    add_input_flags(submit)
    add_policy_flags(submit)
    submit.set_defaults(handler=cmd_submit)
    wait = commands.add_parser("wait", help="wait for a job (bounded)")
    wait.add_argument("job_id")
    add_wait_flags(wait, 300)
    wait.set_defaults(handler=cmd_wait)
    for name, handler in (("status", cmd_status), ("cancel", cmd_cancel), ("audit", cmd_audit)):
        by_id = commands.add_parser(name)
        by_id.add_argument("job_id")
        by_id.set_defaults(handler=handler)
    fetch = commands.add_parser("fetch", help="write a succeeded job's artifact")
    fetch.add_argument("job_id")
    fetch.add_argument("-o", required=True, metavar="PATH")
    fetch.set_defaults(handler=cmd_fetch)
    listing = commands.add_parser("jobs", help="list jobs through Temporal visibility")
    listing.add_argument("--state", choices=[state.value for state in JobState])
    listing.add_argument("--older-than", metavar="DURATION", help="started before now minus e.g. 15m, 2h, 1d")
    listing.add_argument("--tenant")
    listing.add_argument("--limit", type=int, default=100)
    listing.set_defaults(handler=cmd_jobs)
    timeline = commands.add_parser("timeline", help="a job's story in plain words")
    timeline.add_argument("job_id")
    timeline.set_defaults(handler=cmd_timeline)
