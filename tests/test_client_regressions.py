"""Regressions found by using docjobs as a newcomer would (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

from docjobs.temporal.client import JobClient, connect
from tests.conftest import Env, run_starter, starter
from tests.fixtures.samples import make_sample_pdf


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
