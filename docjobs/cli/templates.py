"""Stored templates: add a version of one (a folder, or a zip bundle), list a tenant's templates."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from docjobs.cli.output import EXIT_OK, EXIT_USAGE, Output, fail
from docjobs.pdf.inspect import sniff_kind
from docjobs.settings.config import ConfigError
from docjobs.settings.tenants import CLI_TENANT
from docjobs.store.templates import (
    TEMPLATE_NAME_RULE,
    TemplateStore,
    TemplateVersion,
    is_valid_template_name,
    zip_folder,
)
from docjobs.temporal.settings import TemporalSettings


def _described(version: TemplateVersion) -> dict[str, object]:
    return {
        "name": version.name,
        "version": version.bundle.sha256,
        "size": version.bundle.size,
        "added_at": version.added_at.isoformat(),
    }


def _add(store: TemplateStore, tenant: str, name: str, source: Path) -> TemplateVersion:
    if source.is_file():  # a zip bundle as it is (`generate` checks it, with limits, when a job uses it)
        with source.open("rb") as head:
            if sniff_kind(head.read(4)) != "zip":
                raise ConfigError(f"{source} is neither a folder nor a zip bundle")
        return store.add(tenant, name, source)
    if not (source / "index.html").is_file():
        raise ConfigError(f"{source} has no index.html")
    with tempfile.TemporaryDirectory(prefix="docjobs-template-") as tmp:
        bundle = Path(tmp) / "template.zip"
        zip_folder(source, bundle)
        return store.add(tenant, name, bundle)


async def cmd_template(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
    store = TemplateStore(settings.blob_store())
    if args.action == "list":
        versions = await asyncio.to_thread(store.list, args.tenant)
        lines = [f"{v.name}  {v.bundle.sha256[:12]}  added {v.added_at.isoformat()}" for v in versions]
        out.result({"tenant": args.tenant, "templates": [_described(v) for v in versions]}, "\n".join(lines) or "none")
        return EXIT_OK
    if args.name is None or args.source is None:
        return fail(out, EXIT_USAGE, "request.invalid", "template add NAME DIR")
    if not is_valid_template_name(args.name):
        return fail(out, EXIT_USAGE, "template.invalid_name", f"a template name is {TEMPLATE_NAME_RULE}")
    version = await asyncio.to_thread(_add, store, args.tenant, args.name, Path(args.source))
    out.result(
        {"tenant": args.tenant, **_described(version)},
        f"template {version.name} of {args.tenant}: version {version.bundle.sha256[:12]} is current",
    )
    return EXIT_OK


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    template = commands.add_parser("template", help="stored templates (HTML + CSS + fonts, rendered with JSON data)")
    template.add_argument("action", choices=["add", "list"])
    template.add_argument("name", nargs="?", help="add: the template's name")
    template.add_argument("source", nargs="?", metavar="DIR", help="add: a folder with index.html (or a zip of one)")
    template.add_argument("--tenant", default=CLI_TENANT, help=f"whose template (default: {CLI_TENANT})")
    template.set_defaults(handler=cmd_template)
