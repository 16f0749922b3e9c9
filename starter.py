"""docjobs from the command line: the client SDK in action.

    python starter.py run FILE        one-shot: embedded server, in-process worker, submit, wait, write output
                                      (FILE: a PDF, an image, an .html file or a zip bundle; or --template NAME
                                      --data FILE.json)
    python starter.py submit FILE     accept a document, print its job ID (created or already existing)
    python starter.py wait JOB_ID     the bounded poller
    python starter.py status|cancel|fetch|audit|timeline|evidence|verify-evidence JOB_ID
    python starter.py jobs [--state S] [--older-than DURATION] [--tenant T]
    python starter.py submit-batch DIR|FILE... [--concurrency N] [--key K] [--policy P ...]   one batch of jobs
    python starter.py batch status|wait|cancel BATCH_ID   a batch's progress and outcomes (--json), wait, cancel
    python starter.py server start|stop|status
    python starter.py serve [--host H] [--port P] [--with-worker]   the HTTP API
    python starter.py codec-server [--host H] [--port P] [--cors-origin URL]   decrypts payloads for the Web UI/CLI
    python starter.py tenant add NAME [--callback URL [--allow-http-loopback]]   an API tenant and its key (once)
    python starter.py template add NAME DIR [--tenant T] | template list [--tenant T]   stored templates
    python starter.py gc [--dry-run] [--source-grace DURATION]   delete the blobs of runs past retention
    python starter.py cost [--since DURATION] [--tenant T]   CPU seconds per released document and page
    python starter.py deploy status|promote ID|ramp ID PERCENT|rollback|drained ID [--deployment NAME]
    python starter.py schema [--write DIR]   the JSON Schemas of the workflow's input, status and answers
    python starter.py codes [--write PAGE...]   the failure codes: outcome, message, meaning, what to do

With `--json` every command prints one JSON object as its last line. Exit codes: 0 success (job
succeeded), 1 job ended failed/canceled/quarantined (or has no artifact), 2 bad usage, configuration,
rejected input or unknown job, 3 the caller's wait budget ran out (the job goes on: reconcile later by its
ID), 4 protocol error (the job reported a transition the state machine forbids), 5 `deploy drained`: jobs
pinned to the build still run, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from pydantic import ValidationError
from temporalio.service import RPCError

from docjobs.cli import archives, batches, costs, deploy, evidence, gc, jobs, schema, servers, templates, tenants
from docjobs.cli.jobs import KeyConflict
from docjobs.cli.output import (
    EXIT_INTERRUPTED,
    EXIT_JOB_NOT_SUCCEEDED,
    EXIT_PROTOCOL,
    EXIT_USAGE,
    Command,
    Output,
    fail,
)
from docjobs.domain.errors import DocJobError
from docjobs.domain.idempotency import CLIENT_KEY_RULE, is_valid_client_key
from docjobs.settings.config import ConfigError
from docjobs.store.templates import TemplateNotFound
from docjobs.temporal.batches import BatchNotFound
from docjobs.temporal.client import JobNotFound, NotReleased
from docjobs.temporal.codec import PayloadDecryptionError
from docjobs.temporal.poller import ProtocolError
from docjobs.temporal.settings import TemporalSettings
from docjobs.temporal.tracing import command_span

# In the order `--help` lists them.
COMMAND_GROUPS = (jobs, batches, archives, evidence, costs, servers, tenants, templates, gc, deploy, schema)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="starter.py", description="Durable, auditable PDF document jobs.")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    commands = parser.add_subparsers(dest="command", required=True)
    for group in COMMAND_GROUPS:
        group.add_commands(commands)
    accept_json_after_commands(parser)
    return parser


def accept_json_after_commands(parser: argparse.ArgumentParser) -> None:
    """`--json` is accepted after a command and a subcommand too (`deploy status --json`), not only first."""
    for action in parser._actions:  # argparse lists subcommands nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
                accept_json_after_commands(sub)


SERVERS = {"server", "serve", "codec-server"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Output(args.json)
    job_id = getattr(args, "job_id", None)
    batch_id = getattr(args, "batch_id", None)
    key = getattr(args, "key", None)
    if key is not None and not is_valid_client_key(key):  # the API's rule for Idempotency-Key
        return fail(out, EXIT_USAGE, "idempotency.invalid", f"--key: {CLIENT_KEY_RULE}")
    try:
        settings = TemporalSettings.from_env()
        handler: Command = args.handler
        if args.command in SERVERS:  # long-lived: their requests and jobs are traces of their own
            return asyncio.run(handler(args, settings, out))
        with command_span(args.command):
            return asyncio.run(handler(args, settings, out))
    except KeyboardInterrupt:
        return fail(out, EXIT_INTERRUPTED, "interrupted", "aborted by the caller; the job goes on", job_id=job_id)
    except DocJobError as error:
        return fail(out, EXIT_USAGE, error.code, error.message)
    except (ConfigError, ValidationError) as error:
        return fail(out, EXIT_USAGE, "config", str(error))
    except TemplateNotFound as error:
        return fail(out, EXIT_USAGE, "template.unknown", f"the tenant has no template named {error}")
    except JobNotFound:
        return fail(out, EXIT_USAGE, "job.not_found", "no such job (or it is past the retention window)", job_id=job_id)
    except BatchNotFound:
        message = "no such batch (or it is past the retention window)"
        return fail(out, EXIT_USAGE, "batch.not_found", message, batch_id=batch_id)
    except KeyConflict as error:
        message = "this --key was used with a different document or policy"
        return fail(out, EXIT_USAGE, "idempotency.conflict", message, job_id=error.job_id)
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
