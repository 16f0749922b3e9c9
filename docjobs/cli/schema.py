"""`schema`: the published JSON Schemas of the workflow's input, status and answers (docjobs/contract.py)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path

from docjobs.cli.output import EXIT_OK, Output
from docjobs.contract import published_schemas
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


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schema = commands.add_parser(
        "schema", help="print the JSON Schemas of the workflow's input, status query and answers (schemas/)"
    )
    schema.add_argument("--write", metavar="DIR", help="also write them, one file each (as committed in schemas/)")
    schema.set_defaults(handler=cmd_schema)
