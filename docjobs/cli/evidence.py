"""Evidence commands: write a job's signed envelope, verify one (stored, or copies kept elsewhere)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from docjobs.cli.jobs import job_client
from docjobs.cli.output import (
    EXIT_JOB_NOT_SUCCEEDED,
    EXIT_OK,
    Output,
)
from docjobs.settings.config import ConfigError
from docjobs.temporal.settings import TemporalSettings


async def cmd_evidence(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    status = await (await job_client(settings)).evidence(args.job_id, Path(args.o))
    payload = {"job_id": args.job_id, "path": args.o, "evidence_sha256": status.evidence_sha256}
    out.result(payload, f"wrote {args.o}")
    return EXIT_OK


async def cmd_verify_evidence(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    """A job's stored evidence, or copies kept elsewhere (`--evidence FILE --artifact PDF`)."""
    from docjobs.signing.environment import signer_from_env
    from docjobs.signing.evidence import verify_evidence  # pyHanko is heavy: loaded by the commands that need it

    if args.evidence:
        check = await asyncio.to_thread(  # pyHanko's validation runs its own event loop
            verify_evidence,
            Path(args.evidence).read_bytes(),
            signer_from_env(settings.data_dir),
            artifact=Path(args.artifact) if args.artifact else None,
            source=Path(args.source) if args.source else None,
            ocr_text=Path(args.text) if args.text else None,
            converted=Path(args.converted) if args.converted else None,
            salt=_salt(args.salt),
        )
    elif args.job_id:
        check = await (await job_client(settings)).verify_evidence(args.job_id)
    else:
        raise ConfigError("give a JOB_ID, or --evidence FILE (with --artifact PDF)")
    payload = {"job_id": args.job_id, "ok": check.ok, "broken": check.broken, "problem": check.problem}
    text = "evidence verified: every binding holds" if check.ok else f"evidence broken: {', '.join(check.broken)}"
    out.result(payload, text)
    return EXIT_OK if check.ok else EXIT_JOB_NOT_SUCCEEDED


def _salt(text: str | None) -> bytes | None:
    """`--salt`: the job's `commitment_salt` (64 hex, from its status), to check what the envelope commits to."""
    if text is None:
        return None
    try:
        salt = bytes.fromhex(text)
    except ValueError:
        salt = b""
    if len(salt) != 32:
        raise ConfigError("--salt is the job's commitment_salt: 64 hex digits, as its status shows it")
    return salt


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    evidence = commands.add_parser("evidence", help="write a job's signed evidence envelope")
    evidence.add_argument("job_id")
    evidence.add_argument("-o", required=True, metavar="FILE")
    evidence.set_defaults(handler=cmd_evidence)
    check = commands.add_parser("verify-evidence", help="check an evidence envelope and the digests it binds")
    check.add_argument("job_id", nargs="?")
    check.add_argument("--evidence", metavar="FILE", help="an envelope kept elsewhere")
    check.add_argument("--artifact", metavar="PDF", help="the released PDF the envelope binds")
    check.add_argument("--source", metavar="FILE", help="the input the envelope binds")
    check.add_argument("--text", metavar="FILE", help="the OCR text (text.json) the envelope binds")
    check.add_argument("--converted", metavar="PDF", help="an office input's PDF (converted.pdf) the envelope binds")
    check.add_argument(
        "--salt",
        metavar="HEX",
        help="the job's commitment_salt (its status): checks what the envelope commits to (--source, --converted)",
    )
    check.set_defaults(handler=cmd_verify_evidence)
