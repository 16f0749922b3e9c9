"""`deploy`: roll a new worker build out, ramp it, roll it back, and know when an old build has drained
(docjobs/temporal/deployments.py; Temporal's Worker Deployments do the routing)."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Coroutine
from dataclasses import asdict
from typing import Any

from docjobs.cli.output import EXIT_OK, EXIT_USAGE, Command, Output, fail
from docjobs.temporal.client import connect
from docjobs.temporal.deployments import Deployments
from docjobs.temporal.settings import TemporalSettings

EXIT_NOT_DRAINED = 5  # `deploy drained`: jobs pinned to the build are still running

DeploymentCommand = Callable[[argparse.Namespace, Deployments, Output], Coroutine[Any, Any, int]]


def _with_deployment(command: DeploymentCommand) -> Command:
    """Every `deploy` action acts on one named Worker Deployment: resolve it (and connect) once, here."""

    @functools.wraps(command)
    async def handler(args: argparse.Namespace, settings: TemporalSettings, out: Output) -> int:
        name = args.deployment or settings.deployment
        if not name:
            message = "name the deployment: --deployment or DOCJOBS_DEPLOYMENT"
            return fail(out, EXIT_USAGE, "deploy.no_deployment", message)
        return await command(args, Deployments(await connect(settings), name), out)

    return handler


@_with_deployment
async def cmd_status(args: argparse.Namespace, deployments: Deployments, out: Output) -> int:
    state = await deployments.state()
    lines = [f"deployment {state.name}: current {state.current or '-'}"]
    if state.ramping:
        lines[0] += f", ramping {state.ramping} at {state.ramp_percent:g}%"
    lines += [f"  {v.build_id}: {v.status}, {v.running_jobs} running job(s)" for v in state.versions]
    out.result(asdict(state), "\n".join(lines))
    return EXIT_OK


@_with_deployment
async def cmd_promote(args: argparse.Namespace, deployments: Deployments, out: Output) -> int:
    previous = await deployments.promote(args.build_id)
    out.result(
        {"deployment": deployments.name, "current": args.build_id, "previous": previous},
        f"{deployments.name}: new jobs start on {args.build_id} (was {previous or '-'})",
    )
    return EXIT_OK


@_with_deployment
async def cmd_ramp(args: argparse.Namespace, deployments: Deployments, out: Output) -> int:
    if not 0 <= args.percent <= 100:
        return fail(out, EXIT_USAGE, "deploy.bad_percent", "PERCENT must be between 0 and 100")
    await deployments.ramp(args.build_id, args.percent)
    out.result(
        {"deployment": deployments.name, "ramping": args.build_id, "percent": args.percent},
        f"{deployments.name}: {args.percent:g}% of new jobs start on {args.build_id}",
    )
    return EXIT_OK


@_with_deployment
async def cmd_rollback(args: argparse.Namespace, deployments: Deployments, out: Output) -> int:
    current = await deployments.rollback()
    out.result(
        {"deployment": deployments.name, "current": current},
        f"{deployments.name}: new jobs start on {current} again; pinned jobs finish where they started",
    )
    return EXIT_OK


@_with_deployment
async def cmd_drained(args: argparse.Namespace, deployments: Deployments, out: Output) -> int:
    running = await deployments.running_jobs(args.build_id)
    out.result(
        {"deployment": deployments.name, "build_id": args.build_id, "running_jobs": running, "drained": not running},
        f"{args.build_id}: " + ("drained" if not running else f"{running} running job(s) pinned to it"),
    )
    return EXIT_OK if not running else EXIT_NOT_DRAINED


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    deploy = commands.add_parser("deploy", help="worker builds: status, promote, ramp, rollback, drained")
    actions = deploy.add_subparsers(dest="action", required=True)
    status = actions.add_parser("status", help="versions, which is current/ramping, running jobs per version")
    status.set_defaults(handler=cmd_status)
    promote = actions.add_parser("promote", help="new jobs start on this build")
    promote.add_argument("build_id", metavar="ID")
    promote.set_defaults(handler=cmd_promote)
    ramp = actions.add_parser("ramp", help="send PERCENT of new jobs to this build, the rest to the current one")
    ramp.add_argument("build_id", metavar="ID")
    ramp.add_argument("percent", metavar="PERCENT", type=float)
    ramp.set_defaults(handler=cmd_ramp)
    rollback = actions.add_parser("rollback", help="end a ramp, else make the previous current build current again")
    rollback.set_defaults(handler=cmd_rollback)
    drained = actions.add_parser(
        "drained", help=f"exit 0 when no running job is pinned to this build, else {EXIT_NOT_DRAINED}"
    )
    drained.add_argument("build_id", metavar="ID")
    drained.set_defaults(handler=cmd_drained)
    for action in actions.choices.values():
        action.add_argument("--deployment", help="the Worker Deployment (default: DOCJOBS_DEPLOYMENT)")
