"""An idempotency key outlives its retention safely: a key reused after its run is gone makes a fresh job.

The run disappears as retention makes it disappear (Temporal deletes the execution); `starter.py gc` then
removes that run's blobs and its unreferenced source, and nothing of the new run nor of a job still running.
Each backend gets its own store (a folder, or a prefix in moto's S3) and a worker that serves only the
general queue of the test, so a job whose policy OCRs stays running in `ocr` with its run folder written.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import uuid
from pathlib import Path

import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from docjobs.domain.states import JobState, Stage
from docjobs.settings.policies import PolicyBook
from docjobs.settings.tenants import CLI_TENANT
from docjobs.signing.evidence import envelope_evidence
from docjobs.store.storage import StoredBlob, job_prefix, owner_marker_key, record_owner, source_key
from docjobs.temporal.client import JobClient
from tests.conftest import BUCKET, Env, StartWorker, aws_environment, run_starter, wait_terminal
from tests.fixtures.policy_files import named
from tests.fixtures.samples import make_sample_pdf


@pytest.fixture(params=["file", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of a store of the test's own."""
    if request.param == "file":
        return {"DOCJOBS_STORAGE_URL": (tmp_path / "blobs").as_uri()}
    aws_environment(monkeypatch, request.getfixturevalue("moto_endpoint"))
    return {
        "DOCJOBS_STORAGE_URL": f"s3://{BUCKET}/retention-{uuid.uuid4().hex[:8]}",
        **{name: value for name, value in os.environ.items() if name.startswith("AWS_")},
    }


def document(path: Path, pages: int) -> Path:
    """A PDF no other test stores (its sources must be this test's alone)."""
    make_sample_pdf(path, pages=pages, marker=f"retention {uuid.uuid4()}")
    return path


def blobs_of(jobs: JobClient) -> dict[str, StoredBlob]:
    """Every blob of the store, by key."""
    return {blob.key: blob for prefix in ("jobs", "sources") for blob in jobs.store.list_blobs(prefix)}


async def run_id_of(client: Client, job_id: str) -> str:
    return (await client.get_workflow_handle(job_id).describe()).run_id or ""


async def delete_run(client: Client, job_id: str, run_id: str) -> None:
    """What the namespace's retention does to a closed run: Temporal deletes it (then it answers NOT_FOUND)."""
    execution = WorkflowExecution(workflow_id=job_id, run_id=run_id)
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(namespace=client.namespace, workflow_execution=execution)
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            await client.get_workflow_handle(job_id, run_id=run_id).describe()
        except RPCError as error:
            if error.status is RPCStatusCode.NOT_FOUND:
                break
            raise
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the deleted run is still there")
    query = f'WorkflowId = "{job_id}" AND RunId = "{run_id}"'
    while time.monotonic() < deadline:  # visibility follows (the sweep's source references come from it)
        if not [execution async for execution in client.list_workflows(query)]:
            return
        await asyncio.sleep(0.2)
    raise AssertionError("visibility still lists the deleted run")


async def wait_for_stage(jobs: JobClient, job_id: str, stage: Stage, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while (status := await jobs.status(job_id)).stage is not stage:
        assert time.monotonic() < deadline and status.state in (JobState.QUEUED, JobState.PROCESSING), status
        await asyncio.sleep(0.2)


def keys_under(blobs: dict[str, StoredBlob], folder: str) -> list[str]:
    return sorted(key.removeprefix(f"{folder}/") for key in blobs if key.startswith(f"{folder}/"))


async def test_a_key_reused_after_its_run_is_gone_makes_a_fresh_job(
    jobs: JobClient,
    env: Env,
    policies: PolicyBook,
    start_worker: StartWorker,
    storage: dict[str, str],
    tmp_path: Path,
) -> None:
    queue = f"docjobs-retention-{uuid.uuid4().hex[:6]}"
    start_worker(queue, "--queue", "general", **storage)  # the OCR queue is nobody's: OCR stages wait forever
    store_env = Env({**env.vars, **storage})
    on_store = store_env.settings(DOCJOBS_TASK_QUEUE=queue)
    mine = JobClient(jobs.client, on_store)
    client = jobs.client
    key = f"reused-{uuid.uuid4().hex[:6]}"

    first = await mine.submit(document(tmp_path / "first.pdf", 2), "standard", key=key)
    old = await wait_terminal(mine, first.job_id)
    assert old.state is JobState.SUCCEEDED, old
    old_run = await run_id_of(client, first.job_id)
    old_folder = f"{job_prefix(first.job_id)}/runs/{old_run}"
    assert keys_under(blobs_of(mine), old_folder) == ["artifact.pdf", "commitment.salt", "evidence.json", "run.json"]

    # A job still running, with blobs: rendered, then waiting for an OCR worker that never comes.
    scan = policies.get("scan")
    running = await mine.submit(
        document(tmp_path / "running.pdf", 1), named(mine, scan), key=f"running-{uuid.uuid4().hex[:6]}"
    )
    await wait_for_stage(mine, running.job_id, Stage.OCR)
    running_folder = f"{job_prefix(running.job_id)}/runs/{await run_id_of(client, running.job_id)}"

    await delete_run(client, first.job_id, old_run)
    second = await mine.submit(document(tmp_path / "second.pdf", 3), "standard", key=key)
    assert second.created and second.job_id == first.job_id and second.input_sha256 != first.input_sha256
    new = await wait_terminal(mine, second.job_id)
    assert new.state is JobState.SUCCEEDED and new.failure_code is None, new
    new_run = await run_id_of(client, second.job_id)
    new_folder = f"{job_prefix(second.job_id)}/runs/{new_run}"
    assert new_run != old_run and new.artifact_key == f"{new_folder}/artifact.pdf"
    assert new.evidence_key == f"{new_folder}/evidence.json" and new.evidence_key != old.evidence_key

    # The new job's artifact and evidence are its own.
    fetched, envelope = tmp_path / "fetched.pdf", tmp_path / "evidence.json"
    await mine.fetch(second.job_id, fetched)
    assert hashlib.sha256(fetched.read_bytes()).hexdigest() == new.output_sha256 != old.output_sha256
    await mine.evidence(second.job_id, envelope)
    evidence = envelope_evidence(envelope.read_bytes())
    salt = bytes.fromhex(new.commitment_salt or "")
    assert evidence.binds("job", second.job_id, salt) and evidence.run_id == new_run
    assert evidence.binds("source", second.input_sha256, salt) and evidence.output_sha256 == new.output_sha256
    code, check, _ = run_starter(store_env, "verify-evidence", second.job_id)
    assert (code, check["ok"], check["broken"]) == (0, True, []), check

    orphan = "1" * 64  # an ownership marker whose source is gone (a sweep cut short): it goes too
    record_owner(mine.store, orphan, "someone")
    before = blobs_of(mine)
    gone = [blob for key, blob in before.items() if key.startswith(f"{old_folder}/")]
    old_source = before[source_key(first.input_sha256)]
    old_owner = before[owner_marker_key(first.input_sha256, CLI_TENANT)]  # who stored it goes with it
    code, dry, errors = run_starter(store_env, "gc", "--dry-run", "--source-grace", "0s")
    assert code == 0 and (dry["dry_run"], dry["runs_removed"], dry["sources_removed"]) == (True, 1, 1), errors
    assert blobs_of(mine) == before  # a dry run only counts

    code, report, _ = run_starter(store_env, "gc", "--source-grace", "0s")
    assert code == 0, report
    assert (report["runs_removed"], report["sources_removed"], report["runs_kept"]) == (1, 1, 2), report
    assert report["blobs_removed"] == len(gone) + 3 == dry["blobs_removed"]
    assert report["bytes_removed"] == sum(blob.size for blob in gone) + old_source.size == dry["bytes_removed"]
    after = blobs_of(mine)
    orphan_marker = owner_marker_key(orphan, "someone")
    assert orphan_marker in before
    assert set(after) == set(before) - {blob.key for blob in gone} - {old_source.key, old_owner.key, orphan_marker}
    assert keys_under(after, new_folder) == ["artifact.pdf", "commitment.salt", "evidence.json", "run.json"]
    staged = keys_under(after, running_folder)
    assert staged[0] == "run.json" and len(staged) == 2 and staged[1].startswith("staging/render-a1-"), staged
    assert {source_key(second.input_sha256), source_key(running.input_sha256)} <= set(after)
    kept = {owner_marker_key(digest, CLI_TENANT) for digest in (second.input_sha256, running.input_sha256)}
    assert kept <= set(after)

    # A sweep with the default grace (1 h) keeps even an unreferenced source stored a moment ago.
    await mine.cancel(running.job_id)
    assert (await wait_terminal(mine, running.job_id)).state is JobState.CANCELED
    mine.store.put_file(source_key("0" * 64), document(tmp_path / "orphan.pdf", 1))
    code, report, _ = run_starter(store_env, "gc")
    assert (code, report["runs_removed"], report["sources_removed"], report["runs_kept"]) == (0, 0, 0, 2), report
    assert mine.store.exists(source_key("0" * 64))
    await mine.fetch(second.job_id, tmp_path / "again.pdf")  # the new job is whole after every sweep
    assert run_starter(store_env, "verify-evidence", second.job_id)[0] == 0
