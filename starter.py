"""docjobs from the command line: the client SDK in action.

    python starter.py run FILE        one-shot: embedded server, in-process worker, submit, wait, write output
    python starter.py submit FILE     accept a document, print its job ID (created or already existing)
    python starter.py wait JOB_ID     the bounded poller
    python starter.py status|cancel|fetch|audit|timeline|evidence|verify-evidence JOB_ID
    python starter.py jobs [--state S] [--older-than DURATION] [--tenant T]
    python starter.py server start|stop|status
    python starter.py serve [--host H] [--port P] [--with-worker]   the HTTP API
    python starter.py codec-server [--host H] [--port P] [--cors-origin URL]   decrypts payloads for the Web UI/CLI
    python starter.py tenant add NAME [--callback URL [--allow-http-loopback]]   an API tenant and its key (once)
    python starter.py gc [--dry-run] [--source-grace DURATION]   delete the blobs of runs past retention

With `--json` every command prints one JSON object as its last line. Exit codes: 0 success (job
succeeded), 1 job ended failed/canceled/quarantined (or has no artifact), 2 bad usage, configuration,
rejected input or unknown job, 3 the caller's wait budget ran out (the job goes on: reconcile later by its
ID), 4 protocol error (the job reported a transition the state machine forbids), 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from temporalio.service import RPCError

from docjobs.config import ConfigError
from docjobs.errors import DocJobError
from docjobs.idempotency import CLIENT_KEY_RULE, is_valid_client_key
from docjobs.models import BUILTIN_PATTERN_NAMES, JobStatus, OcrMode, Policy, RedactionSummary
from docjobs.policies import PolicyBook
from docjobs.poller import ProtocolError, WaitEnd, WaitResult, wait_for_job
from docjobs.states import JobState, parse_state
from docjobs.temporal.client import JobClient, JobNotFound, NotReleased, connect
from docjobs.temporal.codec import PayloadDecryptionError
from docjobs.temporal.devserver import ensure_dev_server, stop_dev_server
from docjobs.temporal.logs import LOG_FORMATS, configure_logging, default_log_format
from docjobs.temporal.retention import collect_garbage
from docjobs.temporal.settings import TemporalSettings
from docjobs.tenants import CLI_TENANT, TenantExists, add_tenant, set_callback, tenants_file
from docjobs.webhooks import CallbackInvalid, parse_callback

if TYPE_CHECKING:
    import uvicorn

EXIT_OK, EXIT_JOB_NOT_SUCCEEDED, EXIT_USAGE, EXIT_BUDGET, EXIT_PROTOCOL, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130


class Output:
    """Speaks to a person, or prints exactly one JSON object last with `--json`."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def say(self, text: str) -> None:
        if not self.as_json:
            print(text, flush=True)

    def progress(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def result(self, payload: dict[str, Any], text: str) -> None:
        if self.as_json:
            print(json.dumps(payload, sort_keys=True), flush=True)
        else:
            print(text, flush=True)


def status_payload(status: JobStatus) -> dict[str, Any]:
    return status.model_dump(mode="json")


def describe(status: JobStatus) -> str:
    lines = [f"job {status.job_id}: {status.state.value}" + (f" (stage {status.stage.value})" if status.stage else "")]
    if status.failure_code:
        lines.append(f"  failure: {status.failure_code}: {status.failure_message}")
    if status.cancel_reason:
        lines.append(f"  cancel reason: {status.cancel_reason}")
    lines.append(f"  input sha256:  {status.input_sha256}")
    if status.output_sha256:
        lines.append(f"  output sha256: {status.output_sha256}")
    lines.append(f"  policy {status.policy_version}, {status.watermark_mode.value} mode, {status.page_count} page(s)")
    if status.ocr_text_sha256:
        ocred = ", ".join(str(page) for page in status.pages_ocred) or "none (text already there)"
        lines.append(f"  OCR: pages {ocred}; text sha256 {status.ocr_text_sha256}")
    if status.sanitized:
        removed = ", ".join(f"{kind} x{count}" for kind, count in sorted(status.sanitized.items()))
        lines.append(f"  active content removed: {removed}")
    if status.redaction:
        lines.append(f"  redaction: {redaction_line(status.redaction)}")
    if status.signature:
        verdict = "valid" if status.signature.get("bottom_line") else "NOT valid"
        lines.append(f"  signature: {verdict}, coverage {status.signature.get('coverage')}")
    if status.fidelity_checks:
        lines.append(f"  checked: {', '.join(status.fidelity_checks)}")
    if status.evidence_sha256:
        lines.append(f"  evidence sha256: {status.evidence_sha256}")
    for record in status.transitions:
        stage = f" ({record.stage.value})" if record.stage else ""
        lines.append(f"  {record.at.isoformat()}  {record.state.value}{stage}")
    return "\n".join(lines)


def redaction_line(summary: RedactionSummary) -> str:
    """Counts per pattern, pages and fallbacks in one line (the values themselves are never known here)."""
    totals: dict[str, int] = {}
    for page in summary.pages:
        for pattern, count in page.matches.items():
            totals[pattern] = totals.get(pattern, 0) + count
    found = ", ".join(f"{pattern} x{count}" for pattern, count in sorted(totals.items())) or "no pattern matches"
    line = f"{found} on {len(summary.pages)} page(s)"
    if summary.document:
        line += "; document-level: " + ", ".join(f"{kind} x{count}" for kind, count in sorted(summary.document.items()))
    if summary.fallback_pages:
        line += f"; burned in (raster fallback): pages {', '.join(map(str, summary.fallback_pages))}"
    return line + f"; gate: {' + '.join(summary.gate)} found nothing"


def progress_printer(out: Output) -> Callable[[JobStatus], None]:
    """Prints a line to stderr whenever the state, stage or page progress changes."""
    last = [""]

    def show(status: JobStatus) -> None:
        stage = f" {status.stage.value}" if status.stage and status.state is JobState.PROCESSING else ""
        progress = status.progress or {}
        pages = ""
        total = progress.get("pages_total")
        if isinstance(total, int) and total > 0:
            done = int(progress.get("pages_done") or 0)
            pages = f" [{'#' * (20 * done // total):<20}] page {done}/{total}"
        line = f"  {status.state.value}{stage}{pages}"
        if line != last[0]:
            last[0] = line
            out.progress(line)

    return show


def choose_policy(args: argparse.Namespace, settings: TemporalSettings) -> Policy:
    return PolicyBook.load(settings.policy_file).resolve(
        args.policy,
        watermark=args.watermark,
        mode=args.mode,
        dpi=args.dpi,
        ocr=args.ocr,
        sign=False if args.no_sign else None,
        redact=args.redact,
        redact_regions=args.redact_region,
    )


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


async def cmd_submit(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    policy = choose_policy(args, settings)  # an invalid override is refused before any server is contacted
    jobs = JobClient(await connect(settings), settings)
    submitted = await jobs.submit(
        Path(args.file), policy, tenant=args.tenant, key=args.key, deadline_seconds=args.deadline
    )
    verb = "created" if submitted.created else "already exists"
    out.result({"job_id": submitted.job_id, "created": submitted.created}, f"{submitted.job_id} ({verb})")
    return EXIT_OK


async def cmd_run(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    from worker import serving  # the in-process worker of the one-shot run

    # Stage failures are the job's business (reported below), not tracebacks for the person at the terminal.
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    logging.getLogger("docjobs").setLevel(logging.ERROR)
    logging.getLogger("pyhanko").setLevel(logging.CRITICAL)
    policy = choose_policy(args, settings)
    client = await connect(settings)
    jobs = JobClient(client, settings)
    source = Path(args.file)
    target = Path(args.out) if args.out else source.with_name(f"{source.stem}.docjobs.pdf")
    async with serving(client, settings):
        submitted = await jobs.submit(
            source, policy, tenant=args.tenant, key=args.key, deadline_seconds=args.deadline
        )
        out.say(f"job {submitted.job_id} ({'created' if submitted.created else 'already exists'})")
        code = await wait_and_report(jobs, submitted.job_id, args, out)
    if code == EXIT_OK:
        await jobs.fetch(submitted.job_id, target)
        out.progress(f"wrote {target}")
    return code


async def cmd_wait(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    return await wait_and_report(JobClient(await connect(settings), settings), args.job_id, args, out)


async def cmd_status(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    status = await JobClient(await connect(settings), settings).status(args.job_id)
    out.result(status_payload(status), describe(status))
    return EXIT_OK


async def cmd_cancel(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    await JobClient(await connect(settings), settings).cancel(args.job_id)
    out.result({"job_id": args.job_id, "cancel_requested": True}, f"cancel requested for {args.job_id}")
    return EXIT_OK


async def cmd_fetch(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    status = await JobClient(await connect(settings), settings).fetch(args.job_id, Path(args.o))
    out.result({"job_id": args.job_id, "path": args.o, "output_sha256": status.output_sha256}, f"wrote {args.o}")
    return EXIT_OK


async def cmd_evidence(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    status = await JobClient(await connect(settings), settings).evidence(args.job_id, Path(args.o))
    payload = {"job_id": args.job_id, "path": args.o, "evidence_sha256": status.evidence_sha256}
    out.result(payload, f"wrote {args.o}")
    return EXIT_OK


async def cmd_verify_evidence(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    """A job's stored evidence, or copies kept elsewhere (`--evidence FILE --artifact PDF`)."""
    from docjobs.evidence import verify_evidence  # pyHanko is heavy: loaded by the commands that need it
    from docjobs.signing.config import SignerConfig

    if args.evidence:
        check = await asyncio.to_thread(  # pyHanko's validation runs its own event loop
            verify_evidence,
            Path(args.evidence).read_bytes(),
            SignerConfig.from_env(settings.data_dir),
            artifact=Path(args.artifact) if args.artifact else None,
            source=Path(args.source) if args.source else None,
            ocr_text=Path(args.text) if args.text else None,
        )
    elif args.job_id:
        check = await JobClient(await connect(settings), settings).verify_evidence(args.job_id)
    else:
        raise ConfigError("give a JOB_ID, or --evidence FILE (with --artifact PDF)")
    payload = {"job_id": args.job_id, "ok": check.ok, "broken": check.broken, "problem": check.problem}
    text = "evidence verified: every binding holds" if check.ok else f"evidence broken: {', '.join(check.broken)}"
    out.result(payload, text)
    return EXIT_OK if check.ok else EXIT_JOB_NOT_SUCCEEDED


async def cmd_audit(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    """The history as a readable timeline, or with `--json` as JSON lines (one object per event)."""
    for event in await JobClient(await connect(settings), settings).audit(args.job_id):
        if out.as_json:
            print(json.dumps(event, sort_keys=True))
            continue
        detail = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("event_id", "time", "event"))
        print(f"{event['time']}  #{event['event_id']:<4} {event['event']}  {detail}".rstrip())
    return EXIT_OK


async def cmd_jobs(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    """Jobs through visibility: what is active, what is old, whose."""
    found = await JobClient(await connect(settings), settings).list_jobs(
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
    story = await JobClient(await connect(settings), settings).timeline(args.job_id)
    text = "\n".join(entry["text"] for entry in story)
    out.result({"job_id": args.job_id, "timeline": story}, text)
    return EXIT_OK


def parse_duration(text: str) -> timedelta:
    """`90s`, `15m`, `2h`, `1d`."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise ConfigError(f"not a duration: {text!r} (use e.g. 90s, 15m, 2h, 1d)")
    return timedelta(seconds=int(text[:-1]) * units[text[-1]])


async def cmd_gc(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    """The retention sweep (docjobs/temporal/retention.py): run it periodically, e.g. hourly from cron."""
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

    return uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_config=None))


async def cmd_serve(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    from docjobs.api.app import create_app

    configure_logging(args.log_format or default_log_format())  # before connecting: the SDK's logs too
    client = await connect(settings)
    jobs = JobClient(client, settings)
    server = http_server(create_app(settings, jobs), args)
    out.progress(f"docjobs API on http://{args.host}:{args.port} (OpenAPI at /openapi.json)")
    if args.with_worker:
        from worker import serving

        async with serving(client, settings):
            await server.serve()
    else:
        await server.serve()
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


async def cmd_tenant(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    path = tenants_file(settings)
    if args.allow_http_loopback and not args.callback:
        return fail(out, EXIT_USAGE, "callback.invalid", "--allow-http-loopback needs --callback URL")
    if args.callback:  # checked before the tenant exists: a refused callback leaves nothing half-made
        try:
            parse_callback(args.callback, allow_http_loopback=args.allow_http_loopback)
        except CallbackInvalid as error:
            return fail(out, EXIT_USAGE, "callback.invalid", str(error), tenant=args.name)
    try:
        key = await asyncio.to_thread(add_tenant, path, args.name)
    except TenantExists:
        return fail(out, EXIT_USAGE, "tenant.exists", f"tenant {args.name!r} already exists", tenant=args.name)
    payload = {"tenant": args.name, "api_key": key, "tenants_file": str(path)}
    text = f"tenant {args.name} created; its API key (shown only this once):\n{key}"
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


def add_policy_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file")
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
    parser.add_argument("--key", help=f"client idempotency key (job ID = TENANT/KEY): {CLIENT_KEY_RULE}")
    parser.add_argument("--deadline", type=int, metavar="SECONDS", help="server-side deadline of the job")


def add_wait_flags(parser: argparse.ArgumentParser, timeout: float) -> None:
    parser.add_argument("--timeout", type=float, default=timeout, metavar="S", help="absolute wait deadline")
    parser.add_argument("--max-polls", type=int, default=10_000, metavar="N", help="poll budget")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="starter.py", description="Durable, auditable PDF document jobs.")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="one-shot job with an in-process worker")
    add_policy_flags(run)
    add_wait_flags(run, 1800)
    run.add_argument("--out", help="output path (default: FILE.docjobs.pdf beside the input)")
    add_policy_flags(commands.add_parser("submit", help="accept a document and print its job ID"))
    wait = commands.add_parser("wait", help="wait for a job (bounded)")
    wait.add_argument("job_id")
    add_wait_flags(wait, 300)
    for name in ("status", "cancel", "audit"):
        commands.add_parser(name).add_argument("job_id")
    fetch = commands.add_parser("fetch", help="write a succeeded job's artifact")
    fetch.add_argument("job_id")
    fetch.add_argument("-o", required=True, metavar="PATH")
    listing = commands.add_parser("jobs", help="list jobs through Temporal visibility")
    listing.add_argument("--state", choices=[state.value for state in JobState])
    listing.add_argument("--older-than", metavar="DURATION", help="started before now minus e.g. 15m, 2h, 1d")
    listing.add_argument("--tenant")
    listing.add_argument("--limit", type=int, default=100)
    commands.add_parser("timeline", help="a job's story in plain words").add_argument("job_id")
    evidence = commands.add_parser("evidence", help="write a job's signed evidence envelope")
    evidence.add_argument("job_id")
    evidence.add_argument("-o", required=True, metavar="FILE")
    check = commands.add_parser("verify-evidence", help="check an evidence envelope and the digests it binds")
    check.add_argument("job_id", nargs="?")
    check.add_argument("--evidence", metavar="FILE", help="an envelope kept elsewhere")
    check.add_argument("--artifact", metavar="PDF", help="the released PDF the envelope binds")
    check.add_argument("--source", metavar="FILE", help="the input the envelope binds")
    check.add_argument("--text", metavar="FILE", help="the OCR text (text.json) the envelope binds")
    server = commands.add_parser("server", help="the embedded Temporal dev server")
    server.add_argument("action", choices=["start", "stop", "status"])
    serve = commands.add_parser("serve", help="the HTTP API (needs a worker, or --with-worker)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--with-worker", action="store_true", help="also run a worker in this process")
    codec = commands.add_parser("codec-server", help="the remote codec endpoint of the Web UI and CLI")
    codec.add_argument("--host", default="127.0.0.1")
    codec.add_argument("--port", type=int, default=8089)
    codec.add_argument("--cors-origin", default="http://localhost:8233", metavar="URL", help="the Web UI's origin")
    for long_running in (serve, codec):
        long_running.add_argument("--log-format", choices=LOG_FORMATS, help="default: DOCJOBS_LOG_FORMAT or text")
    tenant = commands.add_parser("tenant", help="API tenants and their keys")
    tenant.add_argument("action", choices=["add"])
    tenant.add_argument("name")
    tenant.add_argument("--callback", metavar="URL", help="POST a signed event here on every terminal state (https)")
    tenant.add_argument(
        "--allow-http-loopback",
        action="store_true",
        help="development and tests only: let the callback be plain http to 127.0.0.0/8, ::1 or localhost",
    )
    gc = commands.add_parser("gc", help="delete the blobs of runs Temporal no longer retains")
    gc.add_argument("--dry-run", action="store_true", help="count what would be removed, remove nothing")
    gc.add_argument(
        "--source-grace",
        default="1h",
        metavar="DURATION",
        help="keep unreferenced sources stored more recently than this (default 1h): jobs being accepted",
    )
    for sub in commands.choices.values():  # `--json` is accepted after the command too
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    return parser


COMMANDS = {
    "run": cmd_run,
    "submit": cmd_submit,
    "wait": cmd_wait,
    "status": cmd_status,
    "cancel": cmd_cancel,
    "fetch": cmd_fetch,
    "audit": cmd_audit,
    "evidence": cmd_evidence,
    "jobs": cmd_jobs,
    "timeline": cmd_timeline,
    "verify-evidence": cmd_verify_evidence,
    "server": cmd_server,
    "serve": cmd_serve,
    "codec-server": cmd_codec_server,
    "tenant": cmd_tenant,
    "gc": cmd_gc,
}


def fail(out: Output, code: int, error: str, message: str, **extra: Any) -> int:
    job = f" (job {extra['job_id']})" if extra.get("job_id") else ""
    out.result({"error": error, "message": message, **extra}, f"error: {error}: {message}{job}")
    return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Output(args.json)
    job_id = getattr(args, "job_id", None)
    key = getattr(args, "key", None)
    if key is not None and not is_valid_client_key(key):  # the API's rule for Idempotency-Key
        return fail(out, EXIT_USAGE, "idempotency.invalid", f"--key: {CLIENT_KEY_RULE}")
    try:
        settings = TemporalSettings.from_env()
        return asyncio.run(COMMANDS[args.command](args, settings, out))
    except KeyboardInterrupt:
        return fail(out, EXIT_INTERRUPTED, "interrupted", "aborted by the caller; the job goes on", job_id=job_id)
    except DocJobError as error:
        return fail(out, EXIT_USAGE, error.code, error.message)
    except (ConfigError, ValidationError) as error:
        return fail(out, EXIT_USAGE, "config", str(error))
    except JobNotFound:
        return fail(out, EXIT_USAGE, "job.not_found", "no such job (or it is past the retention window)", job_id=job_id)
    except NotReleased as error:
        return fail(out, EXIT_JOB_NOT_SUCCEEDED, "job.not_released", str(error), job_id=job_id)
    except ProtocolError as error:
        return fail(out, EXIT_PROTOCOL, "protocol", str(error), job_id=job_id)
    except PayloadDecryptionError as error:  # this process lacks the key that sealed the job's payloads
        return fail(out, EXIT_USAGE, "codec.undecryptable", str(error), job_id=job_id)
    except (RPCError, RuntimeError, OSError) as error:
        return fail(out, EXIT_USAGE, "unavailable", f"{type(error).__name__}: {error}", job_id=job_id)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The Temporal client's runtime can abort at interpreter shutdown (temporalio/sdk-python#300); leave
    # without running finalizers so that a crash there can never turn a result into a wrong exit code.
    os._exit(code)
