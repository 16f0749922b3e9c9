"""Tenants' documents stay theirs: a source may be named by its digest only by a tenant that stored it, and a
tenant may use only the policies it was given.

Through the real API (uvicorn on loopback), the session's dev server and worker: a JSON batch naming another
tenant's digest, and a template job whose manifest names another tenant's data, get exactly the answer a
digest nobody stored gets, and no job runs. (The public input naming a foreign source through a plain
Temporal client is in tests/test_workflow_api.py, which imports nothing of docjobs.)
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from activities.attempt import StoreStages
from docjobs.domain.canonical import canonical_model
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import BlobRef, InputKind
from docjobs.domain.states import JobState
from docjobs.settings.config import ConfigError
from docjobs.settings.policies import PolicyBook
from docjobs.settings.tenants import add_tenant, policies_of
from docjobs.store.storage import owned_source, owner_marker_key, source_key
from docjobs.store.templates import TemplateManifest, zip_folder
from docjobs.temporal.client import JobClient
from tests.conftest import REPO, Env, StartWorker, WorkerProcess, run_starter, wait_terminal
from tests.fixtures.generate_samples import invoice_data, invoice_template, write_json
from tests.fixtures.policy_files import named
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
        submitted = await jobs.submit(path, named(jobs, policy), input_kind=InputKind.TEMPLATE, tenant=thief)
        status = await wait_terminal(jobs, submitted.job_id)
        assert (status.state, status.failure_code) == (JobState.FAILED, "source.missing"), case
        assert status.output_sha256 is None and status.generated is None, case

    # The victim's own job with the same manifest runs.
    path = tmp_path / "own.json"
    path.write_bytes(canonical_model(victims))
    submitted = await jobs.submit(path, named(jobs, policy), input_kind=InputKind.TEMPLATE, tenant=victim)
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)


# --- Policies per tenant --------------------------------------------------------------------------------------

EXTRA_POLICIES = """
[policies.trusted]
# keeps active content: trusted-only without any flag
deadline_seconds = 900
max_pages = 100
[policies.trusted.sign]
enabled = false
[policies.trusted.sanitize]
mode = "keep"
[policies.trusted.watermark]
text = "TRUSTED"
mode = "structure"

[policies.flagged]
trusted_only = true
deadline_seconds = 900
max_pages = 100
[policies.flagged.watermark]
text = "FLAGGED"
mode = "structure"
"""


def write_policies(folder: Path) -> Path:
    path = folder / "policies.toml"
    path.write_text((REPO / "docjobs" / "settings" / "policies.toml").read_text() + EXTRA_POLICIES)
    return path


def test_a_policy_that_keeps_active_content_or_is_flagged_is_trusted_only(tmp_path: Path) -> None:
    book = PolicyBook.load(write_policies(tmp_path))
    shipped = PolicyBook.load(REPO / "docjobs" / "settings" / "policies.toml")
    assert shipped.trusted_only == frozenset() and shipped.for_tenant(None) == frozenset(shipped.policies)
    assert book.trusted_only == {"trusted", "flagged"}
    assert book.for_tenant(None) == frozenset(shipped.policies)
    assert book.for_tenant(["standard", "trusted", "gone"]) == {"standard", "trusted"}
    book.check_allowed("trusted", ["trusted"])
    for name, listed in (("trusted", None), ("flagged", None), ("preview", ["standard", "trusted"])):
        with pytest.raises(DocJobError) as refused:
            book.check_allowed(name, listed)
        assert refused.value.code == "policy.forbidden"
    # The flag says who may name a policy, not what it does: it is no setting of the policy (nor of its version).
    assert "trusted_only" not in book.get("flagged").model_dump()
    bad = tmp_path / "bad.toml"
    bad.write_text(EXTRA_POLICIES.replace("trusted_only = true", 'trusted_only = "yes"') + 'default = "trusted"\n')
    with pytest.raises(ConfigError, match="trusted_only"):
        PolicyBook.load(bad)


def test_tenant_add_records_the_policies_it_may_use(env: Env, tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    files = Env({**env.vars, "DOCJOBS_POLICY_FILE": str(write_policies(tmp_path)), "DOCJOBS_TENANTS_FILE": str(path)})
    code, plain, _ = run_starter(files, "tenant", "add", "plain")
    assert code == 0 and "trusted" not in plain["policies"] and "flagged" not in plain["policies"], plain
    assert {"standard", "preview", "scan", "external"} <= set(plain["policies"])
    code, vip, _ = run_starter(files, "tenant", "add", "vip", "--policies", "standard, trusted")
    assert (code, vip["policies"]) == (0, ["standard", "trusted"]), vip
    code, refused, _ = run_starter(files, "tenant", "add", "typo", "--policies", "standard,nope")
    assert (code, refused["error"]) == (2, "policy.unknown"), refused
    assert "nope" in refused["message"]
    assert (policies_of(path, "plain"), policies_of(path, "vip"), policies_of(path, "typo")) == (
        None,
        ("standard", "trusted"),
        None,
    )
    assert "typo" not in json.loads(path.read_text())["tenants"]  # refused before the tenant existed


@dataclass
class PolicyDeployment:
    api: Api
    jobs: JobClient  # on the deployment's own queue, with its policy file


@pytest.fixture(scope="module")
async def deployment(
    env: Env, jobs: JobClient, start_worker: StartWorker, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[PolicyDeployment]:
    """A worker and an API with the trusted-only policies and their own tenants file: acme (the default
    policies) and vip (standard and trusted)."""
    folder = tmp_path_factory.mktemp("policies")
    tenants = folder / "tenants.json"
    keys = {"acme": add_tenant(tenants, "acme"), "vip": add_tenant(tenants, "vip", policies=["standard", "trusted"])}
    queue = f"docjobs-policies-{uuid.uuid4().hex[:6]}"
    files = {"DOCJOBS_POLICY_FILE": str(write_policies(folder)), "DOCJOBS_TENANTS_FILE": str(tenants)}
    start_worker(queue, **files)
    settings = env.settings(DOCJOBS_TASK_QUEUE=queue, **files)
    for api in serve_api(settings, tenants, keys):
        yield PolicyDeployment(api, JobClient(jobs.client, settings))


async def test_the_api_refuses_a_policy_the_tenant_may_not_use(deployment: PolicyDeployment, tmp_path: Path) -> None:
    api, jobs = deployment.api, deployment.jobs
    acme, vip = api.auth("acme"), api.auth("vip")
    letter = document(tmp_path, "policy")
    digest = hashlib.sha256(letter).hexdigest()
    forbidden = (403, {"code": "policy.forbidden", "message": "this tenant may not use that policy"})
    data = json.dumps(invoice_data(1, number="INV-POLICY")).encode()
    async with httpx.AsyncClient(base_url=api.base, timeout=60) as http:

        async def answer(response: httpx.Response) -> tuple[int, object]:
            return response.status_code, response.json()

        for name in ("trusted", "flagged"):
            policy = {"name": name}
            assert await answer(await http.post(f"/v1/jobs?policy={name}", content=letter, headers=acme)) == forbidden
            part = {"policy": json.dumps(policy)}
            multipart = {"file": ("a.pdf", letter, "application/pdf")}
            assert await answer(await http.post("/v1/jobs", files=multipart, data=part, headers=acme)) == forbidden
            template = {"data": ("data.json", data, "application/json")}
            refused = await http.post("/v1/jobs", files=template, data={"template": "invoice", **part}, headers=acme)
            assert await answer(refused) == forbidden
            batch = [("file", ("a.pdf", letter, "application/pdf"))]
            assert await answer(await http.post(f"/v1/batches?policy={name}", files=batch, headers=acme)) == forbidden
            stored = {"sources": [digest], "policy": policy}
            assert await answer(await http.post("/v1/batches", json=stored, headers=acme)) == forbidden
        assert not jobs.store.exists(source_key(digest))  # refused before anything was stored
        # vip's list names `trusted` and leaves out `preview`; an unknown name stays `policy.unknown`.
        assert await answer(await http.post("/v1/jobs?policy=preview", content=letter, headers=vip)) == forbidden
        unknown = await http.post("/v1/jobs?policy=nope", content=letter, headers=vip)
        assert (unknown.status_code, unknown.json()["code"]) == (422, "policy.unknown")
        accepted = await http.post("/v1/jobs?policy=trusted", content=letter, headers=vip)
        assert accepted.status_code == 202, accepted.text
    status = await wait_terminal(jobs, accepted.json()["job_id"])
    assert (status.state, status.document_class) == (JobState.SUCCEEDED, "trusted"), status.failure_code


async def test_resolve_refuses_a_policy_the_tenant_may_not_use(deployment: PolicyDeployment, tmp_path: Path) -> None:
    """A public input started straight on Temporal (as a service does): `resolve` checks what the API does.
    A tenant the tenants file does not have (a service's, or `default` of the command line) gets the default."""
    jobs = deployment.jobs
    path = tmp_path / "letter.pdf"
    path.write_bytes(document(tmp_path, "resolve"))
    for tenant, policy in (("acme", "trusted"), ("acme", "flagged"), ("service", "trusted"), ("vip", "preview")):
        submitted = await jobs.submit(path, policy, tenant=tenant)
        status = await wait_terminal(jobs, submitted.job_id)
        assert (status.state, status.failure_code) == (JobState.FAILED, "policy.forbidden"), (tenant, policy)
        history = [event async for event in jobs.handle(submitted.job_id).fetch_history_events()]
        scheduled = [
            event.activity_task_scheduled_event_attributes.activity_type.name
            for event in history
            if event.HasField("activity_task_scheduled_event_attributes")
        ]
        assert scheduled == ["resolve"], (tenant, policy)
    allowed = await jobs.submit(path, "trusted", tenant="vip")
    assert (await wait_terminal(jobs, allowed.job_id)).state is JobState.SUCCEEDED


async def test_a_stage_reads_only_a_source_its_jobs_tenant_stored(jobs: JobClient, tmp_path: Path) -> None:
    """The first reading stage (generate, render) fetches the job's input only if the tenant of its job ID stored
    it, as `resolve` demands of the input: another tenant's digest answers as a source nobody stored does. (No new
    job reaches a stage without `resolve`: the check stands for the runs of old histories started without it.)"""
    path = tmp_path / "letter.pdf"
    path.write_bytes(document(tmp_path, "internal"))
    victim, thief = f"victim-{uuid.uuid4().hex[:6]}", f"thief-{uuid.uuid4().hex[:6]}"
    stored = await jobs.accept(path, tenant=victim)
    unknown = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    nobodys = BlobRef(key=source_key(unknown), sha256=unknown, size=10)
    stages = StoreStages(jobs.store, tmp_path / "work")
    outcomes: dict[tuple[str, str], FailureCode | bool] = {}
    for tenant, source in ((thief, stored), (thief, nobodys), (victim, stored)):
        dest = tmp_path / f"{tenant}-{source.sha256[:8]}.pdf"
        try:
            stages._fetch_job_input(f"{tenant}/internal", source, dest)
            outcomes[(tenant, source.sha256)] = dest.read_bytes() == path.read_bytes()
        except DocJobError as error:
            outcomes[(tenant, source.sha256)] = error.code
    assert outcomes == {
        (thief, stored.sha256): FailureCode.SOURCE_MISSING,
        (thief, unknown): FailureCode.SOURCE_MISSING,
        (victim, stored.sha256): True,
    }
