"""Worker versioning end to end: two real worker builds of one Worker Deployment on the dev server, their
renders held until the test releases them, so each job is caught running on the build that started it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from temporalio.api.enums.v1 import EventType

from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient, connect
from tests.conftest import Env, StartWorker, WorkerProcess, run_starter, wait_terminal
from tests.fault_worker import Hold
from tests.fixtures.policy_files import named
from tests.test_jobs import holding_worker

DEPLOYMENT = "docjobs-versioned"
QUEUE = "docjobs-versioned"
EXIT_NOT_DRAINED = 5
EXIT_USAGE = 2


def deploy(env: Env, *args: str) -> tuple[int, dict[str, object]]:
    code, payload, _ = run_starter(env, "deploy", *args, "--deployment", DEPLOYMENT, timeout=60)
    return code, payload


def promote_when_polled(env: Env, build_id: str) -> None:
    """Promote `build_id` once the server has seen its workers poll (a fresh version registers on its first poll)."""
    deadline = time.monotonic() + 60
    while (result := deploy(env, "promote", build_id))[0] != 0:
        assert time.monotonic() < deadline, result
        time.sleep(1)


async def identities(jobs: JobClient, job_id: str) -> set[str]:
    """The workers that completed the job's workflow tasks and started its stages."""
    history = await jobs.client.get_workflow_handle(job_id).fetch_history()
    who = set()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            who.add(event.workflow_task_completed_event_attributes.identity)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            who.add(event.activity_task_started_event_attributes.identity)
    return who


def identity_of(worker: WorkerProcess) -> str:
    return f"{worker.process.pid}@"


async def test_pinned_jobs_finish_on_their_build_through_promote_ramp_and_rollback(
    env: Env, start_worker: StartWorker, policies: PolicyBook, samples: Path, tmp_path: Path
) -> None:
    holds = {build: tmp_path / build for build in ("v1", "v2")}
    workers = {
        build: holding_worker(start_worker, QUEUE, folder, "--deployment", DEPLOYMENT, "--build-id", build)
        for build, folder in holds.items()
    }
    settings = env.settings(DOCJOBS_TASK_QUEUE=QUEUE)
    jobs = JobClient(await connect(settings), settings)
    sample, policy = samples / "sample.pdf", policies.get("standard")

    async def start_held(key: str, build: str) -> str:
        """Submit a job and see its render held on `build`."""
        job_id = (await jobs.submit(sample, named(jobs, policy), key=key)).job_id
        await asyncio.to_thread(Hold(holds[build], job_id).wait, "held")
        return job_id

    await asyncio.to_thread(promote_when_polled, env, "v1")
    first = await start_held("versioned-1", "v1")

    await asyncio.to_thread(promote_when_polled, env, "v2")
    second = await start_held("versioned-2", "v2")  # new jobs go to v2
    code, status = await asyncio.to_thread(deploy, env, "status")
    assert code == 0 and status["current"] == "v2", status
    running = {version["build_id"]: version["running_jobs"] for version in status["versions"]}  # type: ignore[attr-defined]
    assert running == {"v1": 1, "v2": 1}, status

    Hold(holds["v1"], first).mark("released")  # v1's job goes on, on v1, with v2 current
    code, payload = await asyncio.to_thread(deploy, env, "rollback")
    assert (code, payload["current"]) == (0, "v1"), payload
    third = await start_held("versioned-3", "v1")  # after the rollback new jobs go to v1 again
    assert (await asyncio.to_thread(deploy, env, "drained", "v2"))[0] == EXIT_NOT_DRAINED  # v2's job still runs

    Hold(holds["v2"], second).mark("released")
    Hold(holds["v1"], third).mark("released")
    for job_id, build in ((first, "v1"), (second, "v2"), (third, "v1")):
        ended = await wait_terminal(jobs, job_id, timeout=120)
        assert ended.state is JobState.SUCCEEDED, ended
        assert set(ended.attempts.values()) == {1}, ended.attempts  # nothing ran twice
        who = await identities(jobs, job_id)
        assert who and all(name.startswith(identity_of(workers[build])) for name in who), (job_id, build, who)

    deadline = time.monotonic() + 60
    while (drained := await asyncio.to_thread(deploy, env, "drained", "v2"))[0] != 0:
        assert drained[0] == EXIT_NOT_DRAINED and time.monotonic() < deadline, drained
        await asyncio.sleep(1)
    assert drained[1]["drained"] is True

    code, refused = await asyncio.to_thread(deploy, env, "ramp", "v2", "101")
    assert (code, refused["error"]) == (EXIT_USAGE, "deploy.bad_percent"), refused
    code, ramped = await asyncio.to_thread(deploy, env, "ramp", "v2", "100")
    assert (code, ramped["ramping"], ramped["percent"]) == (0, "v2", 100), ramped
    code, status = await asyncio.to_thread(deploy, env, "status")
    assert (status["current"], status["ramping"], status["ramp_percent"]) == ("v1", "v2", 100), status
    assert {version["build_id"]: version["status"] for version in status["versions"]}["v2"] == "ramping"  # type: ignore[attr-defined]
    fourth = await start_held("versioned-4", "v2")  # a ramp of 100%: every new job starts on v2
    code, payload = await asyncio.to_thread(deploy, env, "rollback")  # during a ramp: ends it
    assert (code, payload["current"]) == (0, "v1"), payload
    code, status = await asyncio.to_thread(deploy, env, "status")
    assert (status["current"], status["ramping"]) == ("v1", None), status
    Hold(holds["v2"], fourth).mark("released")
    ended = await wait_terminal(jobs, fourth, timeout=120)
    assert ended.state is JobState.SUCCEEDED and set(ended.attempts.values()) == {1}, ended
    assert all(name.startswith(identity_of(workers["v2"])) for name in await identities(jobs, fourth))
