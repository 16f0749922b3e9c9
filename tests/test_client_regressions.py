"""Regressions found by using docjobs as a newcomer would (issue 14)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import pytest

from docjobs.cli.jobs import cmd_submit
from docjobs.cli.output import Output
from docjobs.domain.models import JobOverrides
from docjobs.settings.policies import PolicyBook
from docjobs.settings.tenants import CLI_TENANT
from docjobs.store.storage import sha256_file
from docjobs.temporal import client as client_module
from docjobs.temporal import job_plan
from docjobs.temporal.client import JobClient, connect
from starter import build_parser
from tests.conftest import Env, run_starter, starter
from tests.fixtures.samples import make_sample_pdf

P = ParamSpec("P")
R = TypeVar("R")


async def test_a_run_serves_only_its_own_job(env: Env, samples: Path, tmp_path: Path) -> None:
    """Another client's job waits on the shared queue, which no worker serves: a `run` on that queue does not
    take it (its in-process worker serves the run's own queue), and still runs its own job to the end."""
    shared = "docjobs-run-shared"
    waiting = tmp_path / "waiting.pdf"
    make_sample_pdf(waiting, pages=2, marker="someone else's")
    code, other, _ = run_starter(env, "submit", str(waiting), "--key", "not-for-run", DOCJOBS_TASK_QUEUE=shared)
    assert code == 0, other
    out = tmp_path / "run.pdf"
    sample = str(samples / "sample.pdf")
    code, payload, _ = run_starter(env, "run", sample, "--out", str(out), DOCJOBS_TASK_QUEUE=shared)
    assert (code, payload["state"]) == (0, "succeeded") and out.is_file(), payload
    audit = starter(env, "audit", other["job_id"])
    events = [json.loads(line)["event"] for line in audit.stdout.splitlines()]
    assert events and "workflow_task_started" not in events, events  # nobody even looked at it
    jobs = JobClient(await connect(env.settings()), env.settings())
    await jobs.handle(other["job_id"]).terminate("test clean-up: no worker serves its queue")


async def test_a_cli_submit_hashes_reads_its_policy_and_derives_its_id_once(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`submit` plans its job once (docjobs.temporal.job_plan.plan_job): the file is hashed once (then only copied
    into the store, the copy checked against that digest), the policy file read once, the ID derived once, and
    the job it starts carries exactly what was computed: the file's digest, under the ID that digest makes."""
    calls: Counter[str] = Counter()

    def counted(name: str, function: Callable[P, R]) -> Callable[P, R]:
        def count(*args: P.args, **kwargs: P.kwargs) -> R:
            calls[name] += 1
            return function(*args, **kwargs)

        return count

    hash_counted = counted("hash", sha256_file)
    monkeypatch.setattr(job_plan, "sha256_file", hash_counted)
    monkeypatch.setattr(client_module, "sha256_file", hash_counted)
    monkeypatch.setattr(job_plan, "derive_job_id", counted("derive", job_plan.derive_job_id))
    load = PolicyBook.load.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(PolicyBook, "load", classmethod(counted("policy file", load)))
    document = tmp_path / "once.pdf"
    make_sample_pdf(document, pages=1, marker="planned once")
    settings = env.settings(DOCJOBS_TASK_QUEUE="docjobs-planned-once")  # no worker: the job only waits
    args = build_parser().parse_args(["--json", "submit", str(document), "--watermark", "ONCE"])

    assert await cmd_submit(args, settings, Output(as_json=True)) == 0
    job_id = json.loads(capsys.readouterr().out.splitlines()[-1])["job_id"]
    assert calls == {"hash": 1, "policy file": 1, "derive": 1}, calls
    digest = hashlib.sha256(document.read_bytes()).hexdigest()
    asked = job_plan.asked_of("standard", JobOverrides(watermark_text="ONCE"))
    assert job_id == job_plan.derive_job_id(CLI_TENANT, None, digest, asked, settings.job_id_key())
    jobs = JobClient(await connect(settings), settings)
    assert await jobs.accepted_as(job_id) == (digest, asked)
    await jobs.handle(job_id).terminate("test clean-up: no worker serves its queue")
