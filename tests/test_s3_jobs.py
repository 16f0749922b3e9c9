"""A whole job on the S3 backend: moto's S3 server on loopback, a worker and a client configured by env."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import boto3  # type: ignore[import-untyped]
import pytest

from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.settings.tenants import CLI_TENANT
from docjobs.store.storage import job_prefix, owner_marker_key
from docjobs.temporal.client import JobClient
from tests.conftest import BUCKET, REGION, Env, StartWorker, aws_environment, run_starter, wait_terminal


async def test_job_on_s3_publishes_once_and_leaves_no_staging(
    jobs: JobClient,
    env: Env,
    policies: PolicyBook,
    samples: Path,
    start_worker: StartWorker,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    aws_environment(monkeypatch, moto_endpoint)
    prefix = f"e2e-{uuid.uuid4().hex[:8]}"
    storage = {
        "DOCJOBS_STORAGE_URL": f"s3://{BUCKET}/{prefix}",
        **{name: value for name, value in os.environ.items() if name.startswith("AWS_")},
    }
    queue = "docjobs-s3"
    start_worker(queue, **storage)
    on_s3 = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue, **storage))
    submitted = await on_s3.submit(samples / "sample.pdf", "standard", key="on-s3")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status

    listing = boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/")
    keys = sorted(item["Key"].removeprefix(f"{prefix}/") for item in listing["Contents"])
    run_id = (await jobs.handle(submitted.job_id).describe()).run_id
    folder = f"{job_prefix(submitted.job_id)}/runs/{run_id}"  # the run's own folder, named by Temporal's run ID
    expected = [f"{folder}/{name}" for name in ("artifact.pdf", "commitment.salt", "evidence.json", "run.json")]
    owner = owner_marker_key(status.input_sha256, CLI_TENANT)  # the tenant that stored the source
    assert keys == [*expected, f"sources/{status.input_sha256}", owner]

    out = tmp_path / "from-s3.pdf"
    await on_s3.fetch(submitted.job_id, out)
    assert out.stat().st_size > 0
    code, payload, _ = run_starter(Env({**env.vars, **storage}), "verify-evidence", submitted.job_id)
    assert (code, payload["ok"]) == (0, True)
