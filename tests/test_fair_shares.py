"""Fair shares that hold: a repeated Idempotency-Key with other bytes stores nothing, every stored byte is charged,
and a tenant's batches hold no more of its running jobs than its limit, however many it sends at once.

Through a real uvicorn socket on loopback, against the session's dev server and a worker of this module whose
`render` holds every job until the test releases it (tests/fault_worker.py `hold-render`): "running" and "started"
are states the test waits for, never a guess about how fast the machine is. The worker has more stage threads
than tenant A may fill, so a job of tenant B can only wait behind A's if A holds more than its share.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from docjobs.api.app import create_app
from docjobs.api.deps import ADMISSION_GRACE_SECONDS, Admissions
from docjobs.domain.batching import BatchManifest
from docjobs.domain.canonical import canonical_model
from docjobs.domain.models import BlobRef
from docjobs.settings.quotas import DailyBytes
from docjobs.settings.tenants import TenantBook, add_tenant, set_limits
from docjobs.store.storage import owner_marker_key, source_key
from docjobs.store.templates import zip_folder
from docjobs.temporal.batches import BatchClient
from docjobs.temporal.client import JobClient, connect
from tests.conftest import FAULT_WORKER, Env, StartWorker, serving_app
from tests.fault_worker import Hold
from tests.fixtures.generate_samples import invoice_data, invoice_template
from tests.test_api import pdf_bytes
from tests.test_quotas import sha256

A_LIMIT = 3  # tenant A's running jobs
BATCHES = 10  # sent by A at once
# The worker's general stage threads: more than A may hold with the other tests' held jobs, so B never waits for
# A's unless A holds more than its share (ten batches of concurrency 2 unchecked: 20).
STAGE_THREADS = 10
HELD_TIMEOUT = 120.0  # an upper bound only: every wait ends on a state, this only turns a hang into a failure


@dataclass
class FairApi:
    base: str
    keys: dict[str, str]
    names: dict[str, str]
    jobs: JobClient
    holds: Path
    batches: list[str] = field(default_factory=list)  # to cancel when the module ends
    started: list[str] = field(default_factory=list)

    def auth(self, tenant: str, **headers: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}", **headers}

    def hold(self, job_id: str) -> Hold:
        return Hold(self.holds, job_id)

    def held(self, tenant: str) -> set[str]:
        """The tenant's jobs whose render holds right now (started, and neither released nor canceled)."""
        prefix = self.names[tenant] + "~"
        return {
            path.name.removesuffix(".held")
            for path in self.holds.glob(f"{prefix}*.held")
            if not Path(str(path).removesuffix(".held") + ".released").exists()
            and not Path(str(path).removesuffix(".held") + ".canceled").exists()
        }


@pytest.fixture(scope="module")
async def fair(env: Env, start_worker: StartWorker, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[FairApi]:
    holds = tmp_path_factory.mktemp("fair-holds")
    queue = f"docjobs-fair-{uuid.uuid4().hex[:6]}"
    start_worker(
        queue,
        script=FAULT_WORKER,
        DOCJOBS_FAULT="hold-render",
        DOCJOBS_HOLD_DIR=str(holds),
        DOCJOBS_ACTIVITY_THREADS=str(STAGE_THREADS),
    )
    tenants = tmp_path_factory.mktemp("fair") / "tenants.json"
    suffix = uuid.uuid4().hex[:6]
    names = {name: f"fair{name}-{suffix}" for name in ("a", "b", "keys")}
    keys = {name: add_tenant(tenants, full) for name, full in names.items()}
    set_limits(tenants, names["a"], {"max_running_jobs": A_LIMIT})
    settings = env.settings(DOCJOBS_TASK_QUEUE=queue)
    app = create_app(settings, tenants=TenantBook(tenants), upload_limit=512 * 1024)
    with serving_app(app, "fair-api") as port:
        jobs = JobClient(await connect(settings), settings)
        api = FairApi(f"http://127.0.0.1:{port}", keys, names, jobs, holds)
        yield api
        batches = BatchClient(jobs)
        for batch_id in api.batches:  # nothing held outlives the module
            await batches.handle(batch_id).cancel()
        for job_id in api.started:
            await jobs.cancel_running(job_id)


@pytest.fixture
async def client(fair: FairApi) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=fair.base, timeout=HELD_TIMEOUT) as http:
        yield http


def stored(api: FairApi, data: bytes, tenant: str) -> tuple[bool, bool]:
    """(the blob of these bytes is in the store, the tenant is recorded as one of its owners)."""
    digest = sha256(data)
    return api.jobs.store.exists(source_key(digest)), api.jobs.store.exists(owner_marker_key(digest, tenant))


async def test_a_repeated_key_with_other_bytes_stores_nothing(
    fair: FairApi, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    tenant = fair.names["keys"]
    ledger = DailyBytes(fair.jobs.settings.usage_dir)
    first, other = pdf_bytes(tmp_path, "keyed first"), pdf_bytes(tmp_path, "keyed other")
    accepted = await client.post("/v1/jobs", content=first, headers=fair.auth("keys", **{"Idempotency-Key": "k"}))
    assert accepted.status_code == 202, accepted.text
    fair.started.append(job_id := accepted.json()["job_id"])
    used = ledger.used(tenant)
    assert used == len(first)

    conflict = await client.post("/v1/jobs", content=other, headers=fair.auth("keys", **{"Idempotency-Key": "k"}))
    assert (conflict.status_code, conflict.json()["code"]) == (422, "idempotency.conflict"), conflict.text
    assert stored(fair, other, tenant) == (False, False)  # no blob of the new digest, no owner marker
    assert ledger.used(tenant) == used
    repeat = await client.post("/v1/jobs", content=first, headers=fair.auth("keys", **{"Idempotency-Key": "k"}))
    assert (repeat.status_code, repeat.json()["job_id"]) == (200, job_id)
    assert ledger.used(tenant) == used  # a true repeat counts nothing

    # A template job: its manifest's digest (template version and data digest) is compared, before the data is
    # stored; the manifest is charged with the data.
    zip_folder(invoice_template(tmp_path / "invoice"), tmp_path / "invoice.zip")
    put = await client.put(
        "/v1/templates/inv", content=(tmp_path / "invoice.zip").read_bytes(), headers=fair.auth("keys")
    )
    assert put.status_code == 200, put.text
    used = ledger.used(tenant)
    data, other_data = (json.dumps(invoice_data(1, number=f"INV-{n}-{uuid.uuid4().hex[:6]}")).encode() for n in (1, 2))
    templated = fair.auth("keys", **{"Idempotency-Key": "t"})
    as_template = await client.post(
        "/v1/jobs", files={"data": ("d.json", data, "application/json")}, data={"template": "inv"}, headers=templated
    )
    assert as_template.status_code == 202, as_template.text
    fair.started.append(as_template.json()["job_id"])
    assert len(data) < ledger.used(tenant) - used < len(data) + 1024  # the data and its small manifest
    used = ledger.used(tenant)
    clash = await client.post(
        "/v1/jobs",
        files={"data": ("d.json", other_data, "application/json")},
        data={"template": "inv"},
        headers=templated,
    )
    assert (clash.status_code, clash.json()["code"]) == (422, "idempotency.conflict"), clash.text
    assert stored(fair, other_data, tenant) == (False, False)
    again = await client.post(
        "/v1/jobs", files={"data": ("d.json", data, "application/json")}, data={"template": "inv"}, headers=templated
    )
    assert (again.status_code, again.json()["job_id"]) == (200, as_template.json()["job_id"])
    assert ledger.used(tenant) == used

    # A multipart batch: the same, per document.
    one, two = pdf_bytes(tmp_path, "batch one"), pdf_bytes(tmp_path, "batch two")
    batch_key = fair.auth("keys", **{"Idempotency-Key": "b"})
    batch = await client.post("/v1/batches", files=[("file", ("1", one))], headers=batch_key)
    assert batch.status_code == 202, batch.text
    fair.batches.append(batch.json()["batch_id"])
    assert ledger.used(tenant) == used + len(one) + manifest_size([one])  # the document and its manifest
    used = ledger.used(tenant)
    clash = await client.post("/v1/batches", files=[("file", ("1", one)), ("file", ("2", two))], headers=batch_key)
    assert (clash.status_code, clash.json()["code"]) == (422, "idempotency.conflict"), clash.text
    assert stored(fair, two, tenant) == (False, False)
    again = await client.post("/v1/batches", files=[("file", ("1", one))], headers=batch_key)
    assert (again.status_code, again.json()["batch_id"]) == (200, batch.json()["batch_id"])
    assert ledger.used(tenant) == used

    # A JSON batch of sources the tenant stored (and was charged for): only the manifest it stores is charged,
    # and a source named many times is looked up once.
    named = await client.post(
        "/v1/batches", json={"sources": [sha256(first)] * 500 + [sha256(one)]}, headers=fair.auth("keys")
    )
    assert named.status_code == 202, named.text
    fair.batches.append(named.json()["batch_id"])
    assert named.json()["total"] == 2
    assert ledger.used(tenant) == used + manifest_size([first, one])

    batches = BatchClient(fair.jobs)  # what this test holds lets go of the worker's threads before the next
    for batch_id in fair.batches:
        await batches.handle(batch_id).cancel()
    for job_id in fair.started:
        await fair.jobs.cancel_running(job_id)
    fair.batches.clear()
    fair.started.clear()
    await wait_for(lambda: not fair.held("keys"), "every held job of this test canceled")


def manifest_size(documents: list[bytes]) -> int:
    """The size of the manifest a batch of these documents stores."""
    sources = [BlobRef(key=source_key(sha256(data)), sha256=sha256(data), size=len(data)) for data in documents]
    return len(canonical_model(BatchManifest(sources=sources)))


async def test_fair_shares(fair: FairApi, client: httpx.AsyncClient, tmp_path: Path) -> None:
    """Tenant A sends ten batches at once; tenant B's single job starts while A holds all it may, and A's running
    jobs never pass its limit."""
    peak = 0
    batches = BatchClient(fair.jobs)
    admitted: list[str] = []
    stop = asyncio.Event()

    async def watch() -> None:  # A's jobs in a render, and its batches' running jobs, sampled throughout
        nonlocal peak
        while not stop.is_set():
            running = 0
            for batch_id in list(admitted):
                running += (await batches.status(batch_id, outcomes=False)).running
            peak = max(peak, len(fair.held("a")), running)
            await asyncio.sleep(0.05)

    documents = [[pdf_bytes(tmp_path, f"A {number} {n}") for n in range(2)] for number in range(BATCHES)]

    async def send(number: int) -> httpx.Response:
        files = [("file", (str(n), data)) for n, data in enumerate(documents[number])]
        key = fair.auth("a", **{"Idempotency-Key": f"fair-{number}"})
        return await client.post("/v1/batches?concurrency=2", files=files, headers=key)

    watcher = asyncio.create_task(watch())
    try:
        answers = await asyncio.gather(*(send(number) for number in range(BATCHES)))  # all at once
        for answer in answers:
            if answer.status_code == 202:
                admitted.append(answer.json()["batch_id"])
                fair.batches.append(answer.json()["batch_id"])
            else:
                assert (answer.status_code, answer.json().get("limit")) == (429, "running_jobs"), answer.text
        granted = [(await batches.status(batch_id, outcomes=False)).concurrency for batch_id in admitted]
        assert admitted and sum(granted) == A_LIMIT, granted  # what was admitted is exactly A's share

        await wait_for(lambda: len(fair.held("a")) == A_LIMIT, "A holds its whole share")

        # B's single job starts (its render holds) while A holds all it may.
        job = await client.post("/v1/jobs", content=pdf_bytes(tmp_path, "B alone"), headers=fair.auth("b"))
        assert job.status_code == 202, job.text
        fair.started.append(b_job := job.json()["job_id"])
        await asyncio.to_thread(fair.hold(b_job).wait, "held", HELD_TIMEOUT)
        assert len(fair.held("a")) == A_LIMIT

        # A job of A ends: its batch starts its next document, and A still holds no more than its share.
        waiting = [b for b in admitted if (await batches.status(b, outcomes=False)).not_started > 0]
        assert waiting, "a batch with a document still to start"  # 3 slots, 2 documents per batch
        prefix = waiting[0].replace("/batch-", "~") + "."
        before = fair.held("a")
        first = next(job for job in sorted(before) if job.startswith(prefix))
        Hold(fair.holds, first.replace("~", "/")).mark("released")
        await wait_for(lambda: len(fair.held("a") - before) == 1, "A's batch started its next document")
        assert len(fair.held("a")) <= A_LIMIT
        refused = await client.post("/v1/jobs", content=pdf_bytes(tmp_path, "A more"), headers=fair.auth("a"))
        assert (refused.status_code, refused.json().get("limit")) == (429, "running_jobs"), refused.text
    finally:
        stop.set()
        await watcher
    assert peak <= A_LIMIT, peak


async def wait_for(condition: object, what: str) -> None:
    """Wait until `condition()` holds (a state of the held worker), HELD_TIMEOUT at most."""
    assert callable(condition)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HELD_TIMEOUT
    while not condition():
        assert loop.time() < deadline, f"not reached: {what}"
        await asyncio.sleep(0.05)


def test_the_admission_ledger_shares_one_start_and_forgets_after_its_grace() -> None:
    now = [0.0]
    admissions = Admissions(clock=lambda: now[0])
    first = admissions.reserve("t", "t/job", 1)
    assert admissions.shared("t/job") is first  # a concurrent request for the same job takes no second slot
    assert admissions.shared("t/other") is None
    admissions.release(first)  # one holder left: still counted
    assert [held.slots for held in admissions.unseen("t")] == [1]
    admissions.started(first)
    admissions.release(first)  # started: counted until visibility has it, or its grace ends
    assert admissions.unseen("t") == [first] and admissions.unseen("u") == []
    refused = admissions.reserve("t", "t/batch-b", 4)
    admissions.release(refused)  # nothing started under it: gone at once
    assert admissions.unseen("t") == [first]
    now[0] = ADMISSION_GRACE_SECONDS + 1
    assert admissions.unseen("t") == []
