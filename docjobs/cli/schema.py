"""`schema` and `codes`: what the project publishes of its contract: the JSON Schemas of the workflow's input,
status and answers (docjobs/domain/contract.py), and the failure codes with what each means
(docjobs/domain/errors.py)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path

from docjobs.cli.output import EXIT_OK, Output
from docjobs.domain.contract import published_schemas
from docjobs.domain.errors import FAILURE_CODES, GUIDE_MARKERS, failure_code_table
from docjobs.temporal.settings import TemporalSettings


def schema_text(schema: Mapping[str, object]) -> str:
    """A schema as it is committed in `schemas/`."""
    return json.dumps(schema, indent=2) + "\n"


async def cmd_schema(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    schemas = published_schemas()
    if args.write:
        folder = Path(args.write)
        folder.mkdir(parents=True, exist_ok=True)
        for name, schema in schemas.items():
            (folder / name).write_text(schema_text(schema))
        out.progress(f"wrote {', '.join(sorted(schemas))} to {folder}")
    out.result({"schemas": schemas}, schema_text(schemas).rstrip())
    return EXIT_OK


def with_code_table(page: str) -> str:
    """`page` with the failure-code table between its markers replaced by the current one."""
    start, end = page.index(GUIDE_MARKERS[0]), page.index(GUIDE_MARKERS[1]) + len(GUIDE_MARKERS[1])
    return page[:start] + failure_code_table() + page[end:]


async def cmd_codes(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    for page in map(Path, args.write or ()):
        page.write_text(with_code_table(page.read_text()))
        out.progress(f"wrote the failure-code table in {page}")
    codes = [
        {"code": code.value, **info._asdict(), "outcome": info.outcome.value} for code, info in FAILURE_CODES.items()
    ]
    out.result({"codes": codes}, "\n".join(f"{code['code']}\t{code['state']}\t{code['message']}" for code in codes))
    return EXIT_OK


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schema = commands.add_parser(
        "schema", help="print the JSON Schemas of the workflow's input, status query and answers (schemas/)"
    )
    schema.add_argument("--write", metavar="DIR", help="also write them, one file each (as committed in schemas/)")
    schema.set_defaults(handler=cmd_schema)
    codes = commands.add_parser("codes", help="list the failure codes: outcome, safe message, meaning, what to do")
    codes.add_argument(
        "--write",
        metavar="PAGE",
        nargs="+",
        help="rewrite the marked table in each page (docs/failure-codes.md, RUNBOOK.md)",
    )
    codes.set_defaults(handler=cmd_codes)
