"""Tenants' documents stay theirs: a source may be named by its digest only by a tenant that stored it.

Through the real API (uvicorn on loopback), the session's dev server and worker: a JSON batch naming another
tenant's digest, and a template job whose manifest names another tenant's data, get exactly the answer a
digest nobody stored gets, and no job runs. (The public input naming a foreign source through a plain
Temporal client is in tests/test_workflow_api.py, which imports nothing of docjobs.)
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from docjobs.canonical import canonical_model
from docjobs.models import BlobRef, InputKind
from docjobs.policies import PolicyBook
from docjobs.states import JobState
from docjobs.storage import owned_source, owner_marker_key, source_key
from docjobs.templates import TemplateManifest, zip_folder
from docjobs.temporal.client import JobClient
from docjobs.tenants import add_tenant
from tests.conftest import Env, WorkerProcess, wait_terminal
from tests.fixtures.generate_samples import invoice_data, invoice_template, write_json
from tests.fixtures.samples import make_sample_pdf
from tests.test_api import Api, serve_api


@pytest.fixture(scope="module")
def api(env: Env, main_worker: WorkerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    tenants_path = tmp_path_factory.mktemp("tenancy") / "tenants.json"
    keys = {name: add_tenant(tenants_path, name) for name in ("acme", "globex")}
    yield from serve_api(env.settings(), tenants_path, keys)


@pytest.fixture
async def http(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api.base, timeout=60) as client:
        yield client


def document(folder: Path, label: str) -> bytes:
    """A PDF no other test stores."""
    path = folder / f"{label}.pdf"
    make_sample_pdf(path, pages=1, marker=f"tenancy {label} {uuid.uuid4()}")
    return path.read_bytes()


async def batches_of(jobs: JobClient, tenant: str) -> list[str]:
    query = f'WorkflowType = "DocumentBatch" AND DocjobsTenant = "{tenant}"'
    return [execution.id async for execution in jobs.client.list_workflows(query)]


async def test_a_json_batch_names_only_the_tenants_own_sources(
    api: Api, http: httpx.AsyncClient, jobs: JobClient, tmp_path: Path
) -> None:
    acme, globex = api.auth("acme"), api.auth("globex")
    letter = document(tmp_path, "letter")
    digest = hashlib.sha256(letter).hexdigest()
    uploaded = await http.post("/v1/jobs?policy=standard", content=letter, headers=acme)
    assert uploaded.status_code == 202, uploaded.text
    assert owned_source(jobs.store, digest, "acme") is not None and owned_source(jobs.store, digest, "globex") is None

    # globex knows acme's digest (from evidence acme handed out): the answer is that of a digest nobody stored.
    unknown = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    answers = []
    for sources in ([digest], [unknown], [unknown, digest], [digest, unknown]):
        body = {"sources": sources, "policy": {"name": "standard"}}
        answer = await http.post("/v1/batches", json=body, headers=globex)
        answers.append((answer.status_code, answer.json()))
    assert answers == [(422, {"code": "source.missing", "message": "a listed source is not in the store"})] * 4
    assert await batches_of(jobs, "globex") == []  # nothing was started
    assert not jobs.store.exists(owner_marker_key(digest, "globex"))  # asking recorded nothing

    # acme names its own digest: accepted. globex uploads the same bytes itself (stored once, invisibly): then
    # its batch of that digest is accepted as well, as a batch of its own.
    own = await http.post("/v1/batches", json={"sources": [digest], "policy": {"name": "standard"}}, headers=acme)
    assert own.status_code == 202 and own.json()["batch_id"].startswith("acme/batch-auto-"), own.text
    again = await http.post("/v1/jobs?policy=standard", content=letter, headers=globex)
    assert again.status_code == 202 and again.json()["job_id"].startswith("globex/"), again.text
    theirs = await http.post("/v1/batches", json={"sources": [digest], "policy": {"name": "standard"}}, headers=globex)
    assert theirs.status_code == 202 and theirs.json()["batch_id"].startswith("globex/batch-auto-"), theirs.text
    for batch, auth in ((own.json(), acme), (theirs.json(), globex)):
        await jobs.client.get_workflow_handle(batch["batch_id"]).result()
        status = (await http.get(batch["status_url"], headers=auth)).json()
        assert (status["state"], status["succeeded"]) == ("completed", 1), status


async def test_a_template_job_names_only_the_tenants_own_data(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    victim, thief = f"victim-{uuid.uuid4().hex[:6]}", f"thief-{uuid.uuid4().hex[:6]}"
    zip_folder(invoice_template(tmp_path / "invoice"), tmp_path / "invoice.zip")
    for tenant in (victim, thief):
        jobs.templates.add(tenant, "invoice", tmp_path / "invoice.zip")
    data = write_json(tmp_path / "victim.json", invoice_data(2, number="INV-VICTIM", customer="Victim Clinic"))
    victims = TemplateManifest.model_validate_json(
        jobs.templates.manifest(victim, "invoice", data, tmp_path, max_data_bytes=1 << 20).read_bytes()
    )
    unknown_bytes = b'{"unknown": true}'
    unknown = hashlib.sha256(unknown_bytes).hexdigest()
    own_bundle = jobs.templates.current(thief, "invoice").bundle
    own_data = write_json(tmp_path / "thief.json", invoice_data(1, number="INV-THIEF", customer="Thief Ltd"))
    thiefs = TemplateManifest.model_validate_json(
        jobs.templates.manifest(thief, "invoice", own_data, tmp_path, max_data_bytes=1 << 20).read_bytes()
    )
    policy = policies.get("standard")
    cases = {
        "foreign data": TemplateManifest(template="invoice", bundle=own_bundle, data=victims.data),
        "unknown data": TemplateManifest(
            template="invoice",
            bundle=own_bundle,
            data=BlobRef(key=source_key(unknown), sha256=unknown, size=len(unknown_bytes)),
        ),
        "foreign template": TemplateManifest(template="invoice", bundle=victims.bundle, data=thiefs.data),
    }
    for case, manifest in cases.items():
        path = tmp_path / f"{uuid.uuid4().hex}.json"
        path.write_bytes(canonical_model(manifest))
        submitted = await jobs.submit(path, policy, input_kind=InputKind.TEMPLATE, tenant=thief)
        status = await wait_terminal(jobs, submitted.job_id)
        assert (status.state, status.failure_code) == (JobState.FAILED, "source.missing"), case
        assert status.output_sha256 is None and status.generated is None, case

    # The victim's own job with the same manifest runs.
    path = tmp_path / "own.json"
    path.write_bytes(canonical_model(victims))
    submitted = await jobs.submit(path, policy, input_kind=InputKind.TEMPLATE, tenant=victim)
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
