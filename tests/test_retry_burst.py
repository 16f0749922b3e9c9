"""A client's retries of one request through the real HTTP API: one Idempotency-Key sent several times at once, again
while the job runs and again after it ended, makes one job, one workflow run, and each downstream effect once.

tests/test_api.py shows that fifty concurrent uploads with one key are answered with one job; this follows the job
on to what it does outside: a retry that reached the store, the workflow or the callback twice would publish, sign
or notify twice, which an answer's status code does not show. `bench/rehearsal.py` measures the same at load.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from temporalio.api.enums.v1 import EventType

from docjobs.api.app import create_app
from docjobs.domain.states import JobState
from docjobs.settings.tenants import TenantBook, add_tenant, set_callback
from docjobs.settings.webhooks import EVENT_ID_HEADER
from docjobs.temporal.client import JobClient
from tests.conftest import Env, WorkerProcess, serving_app, wait_terminal
from tests.fixtures.samples import make_sample_pdf
from tests.test_notify import Receiver, serving

TENANT = "retrier"
AT_ONCE = 5  # the first sends, all before any answer
AFTER = 3  # sends once the job has ended


@dataclass(frozen=True)
class BurstApi:
    base: str
    key: str
    tenants: Path


@pytest.fixture(scope="module")
def burst_api(env: Env, main_worker: WorkerProcess) -> Iterator[BurstApi]:
    """The API on the session's tenants file, which the main worker reads for the tenant's callback."""
    tenants = Path(env.vars["DOCJOBS_DATA_DIR"]) / "tenants.json"
    key = add_tenant(tenants, TENANT)
    with serving_app(create_app(env.settings(), tenants=TenantBook(tenants)), "burst-api") as port:
        yield BurstApi(f"http://127.0.0.1:{port}", key, tenants)


async def test_retries_with_one_key_make_one_job_whose_effects_happen_once(
    burst_api: BurstApi, jobs: JobClient, tmp_path: Path
) -> None:
    make_sample_pdf(tmp_path / "doc.pdf", pages=1, marker="retry burst")
    body = (tmp_path / "doc.pdf").read_bytes()
    key = f"retry-{uuid.uuid4().hex[:8]}"
    job_id = f"{TENANT}/{key}"
    headers = {"Authorization": f"Bearer {burst_api.key}", "Idempotency-Key": key, "Content-Type": "application/pdf"}
    with serving(Receiver()) as receiver:
        set_callback(burst_api.tenants, TENANT, receiver.url, allow_http_loopback=True)
        async with httpx.AsyncClient(base_url=burst_api.base, timeout=60) as http:

            async def send() -> httpx.Response:
                return await http.post("/v1/jobs", content=body, headers=headers)

            answers = list(await asyncio.gather(*(send() for _ in range(AT_ONCE))))
            run_id = (await jobs.handle(job_id).describe()).run_id
            answers.append(await send())  # a retry whose first try's answer was lost: the job runs, or has ended
            assert (await wait_terminal(jobs, job_id)).state is JobState.SUCCEEDED
            final = await jobs.handle(job_id).result()  # the workflow ends once the callback has its event
            answers += await asyncio.gather(*(send() for _ in range(AFTER)))
    assert sorted(answer.status_code for answer in answers) == [200] * (AT_ONCE + AFTER) + [202], [
        answer.text for answer in answers
    ]
    assert {answer.json()["job_id"] for answer in answers} == {job_id}
    assert (await jobs.handle(job_id).describe()).run_id == run_id  # no retry started a second run

    scheduled: Counter[str] = Counter()
    async for event in jobs.handle(job_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.activity_task_scheduled_event_attributes.activity_type.name] += 1
    assert (scheduled["sign"], scheduled["publish"], scheduled["notify"]) == (1, 1, 1), scheduled
    assert final.notification == "delivered" and final.artifact_key
    assert [headers[EVENT_ID_HEADER] for headers, _ in receiver.received] == [receiver.received[0][0][EVENT_ID_HEADER]]
    deadline = time.monotonic() + 30  # visibility is eventually consistent: wait until it lists the job at all
    while (runs := (await jobs.client.count_workflows(f"WorkflowId = '{job_id}'")).count) == 0:
        assert time.monotonic() < deadline, "visibility never listed the job"
        await asyncio.sleep(0.5)
    assert runs == 1
