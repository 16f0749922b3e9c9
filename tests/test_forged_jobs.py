"""The Temporal port is not a back door: a `DocumentJob` started by hand, not by docjobs' client, with a
request for another job, an unreadable input, or (in a sealed deployment) a plaintext payload, ends at once
`failed` with a stable code, before any activity runs, and reads like any other finished job. So does an
internal request naming another tenant or a blob that is not a source, and (sealed) an input sealed for no
workflow."""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter

from docjobs.domain.contract import WORKFLOW_TYPE
from docjobs.domain.job_status import JobStatus
from docjobs.domain.models import BlobRef, JobRequest
from docjobs.domain.policy import SanitizeMode, SanitizePolicy
from docjobs.domain.sealing import CodecKey
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.codec import EncryptionCodec
from docjobs.temporal.settings import TemporalSettings
from tests.conftest import Env, StartWorker, wait_terminal
from tests.test_replay import replayer

KEY = CodecKey("forge-test", bytes(range(100, 132)))
KEYS = f"{KEY.key_id}:{base64.b64encode(KEY.secret).decode()}"
NO_INPUT: list[Any] = []


def unique(name: str) -> str:
    return f"evil/{name}-{os.getpid()}"


async def keyless_client(settings: TemporalSettings) -> Client:
    """A client of whoever reaches the frontend: docjobs' models, but no payload key."""
    return await Client.connect(settings.address, namespace=settings.namespace, data_converter=pydantic_data_converter)


def request_for(job_id: str, policies: PolicyBook, *, tenant: str = "acme") -> JobRequest:
    policy = policies.get("standard")
    return JobRequest(
        job_id=job_id,
        tenant=tenant,
        source=BlobRef(key="sources/" + "ab" * 32, sha256="ab" * 32, size=1000),
        page_count=1,
        policy=policy,
        policy_version=policy.version,
        deadline_seconds=300,
        accepted_at=datetime.now(UTC),
    )


async def activity_types(handle: WorkflowHandle[Any, Any]) -> list[str]:
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def assert_refused(handle: WorkflowHandle[Any, Any], jobs: JobClient, code: str) -> None:
    """Ended (not stuck in a retried workflow task), with `code`, without a single activity, and `status` says so."""
    result: JobStatus = await asyncio.wait_for(handle.result(), timeout=60)
    assert (result.state, result.failure_code) == (JobState.FAILED, code)
    assert await activity_types(handle) == []
    status = await jobs.status(handle.id)
    assert (status.job_id, status.state, status.failure_code) == (handle.id, JobState.FAILED, code)
    assert (status.tenant, status.input_sha256, status.artifact_key) == ("", "", None)  # nothing the request claimed
    assert [record.state for record in status.transitions] == [JobState.QUEUED, JobState.FAILED]


@pytest.mark.parametrize(
    ("case", "args"),
    [
        ("another-job", None),  # a well-formed request naming a victim's job ID: its storage keys
        ("garbage", ["not a request"]),
        ("no-input", NO_INPUT),
        ("unknown-encoding", [RawValue(Payload(metadata={"encoding": b"binary/whatever"}, data=b"\x00"))]),
    ],
)
async def test_forged_starts_end_at_once_with_request_invalid(
    jobs: JobClient, env: Env, policies: PolicyBook, case: str, args: list[Any] | None
) -> None:
    forger = await keyless_client(env.settings())
    workflow_id = unique(case)
    if args is None:
        args = [request_for("acme/victim-invoice", policies).model_dump(mode="json")]
    handle = await forger.start_workflow(
        WORKFLOW_TYPE, args=args, id=workflow_id, task_queue=jobs.settings.task_queue, result_type=JobStatus
    )
    await assert_refused(handle, jobs, "request.invalid")


@pytest.mark.parametrize(
    "case", ["foreign-tenant", "artifact-source", "template-source", "keeps-active-content", "own"]
)
async def test_a_new_run_refuses_the_internal_request_however_well_formed(
    jobs: JobClient, env: Env, policies: PolicyBook, case: str
) -> None:
    """`JobRequest` pins a whole policy no `resolve` checked: a policy its tenant may not name (one that keeps
    active content), or none in the policy file at all. Only runs of old histories were started with it; a new
    run refuses it at once, before any activity, whatever it names: another tenant, another job's artifact or a
    template's zip as its source, or its own tenant and a source. The refusal is behind a patch: runs started
    before it replay as they ran (tests/histories: internal requests among them), and so does this one."""
    forger = await keyless_client(env.settings())
    workflow_id = unique(case)
    request = request_for(workflow_id, policies, tenant="evil")
    digest = "cd" * 32
    if case == "foreign-tenant":  # its own workflow ID, another tenant's name (the tenant its stages act for)
        request = request.model_copy(update={"tenant": "acme"})
    elif case == "artifact-source":
        key = f"jobs/{'ef' * 16}/runs/{uuid.uuid4()}/artifact.pdf"
        request = request.model_copy(update={"source": BlobRef(key=key, sha256=digest, size=1000)})
    elif case == "template-source":
        key = f"templates/{'ef' * 16}/invoice/versions/{digest}.zip"
        request = request.model_copy(update={"source": BlobRef(key=key, sha256=digest, size=1000)})
    elif case == "keeps-content":  # trusted-only: no tenant without it in its list may name it
        keeping = request.policy.model_copy(update={"sanitize": SanitizePolicy(mode=SanitizeMode.KEEP)})
        request = request.model_copy(update={"policy": keeping, "policy_version": keeping.version})
    handle = await forger.start_workflow(
        WORKFLOW_TYPE,
        request.model_dump(mode="json"),
        id=workflow_id,
        task_queue=jobs.settings.task_queue,
        result_type=JobStatus,
    )
    await assert_refused(handle, jobs, "request.invalid")
    history = await jobs.handle(workflow_id).fetch_history()
    replay = await replayer().replay_workflow(history, raise_on_replay_failure=False)
    assert replay.replay_failure is None, replay.replay_failure


async def test_a_sealed_deployment_refuses_plaintext(
    env: Env, start_worker: StartWorker, policies: PolicyBook, samples: Path
) -> None:
    queue = f"sealed-{os.getpid()}"
    sealed = {"DOCJOBS_CODEC_KEYS": KEYS, "DOCJOBS_TASK_QUEUE": queue}
    settings = env.settings(**sealed)
    jobs = JobClient(await connect(settings), settings)
    forger = await keyless_client(settings)

    # Queued before any worker serves the queue, so the plaintext signal surely reaches a running job.
    genuine = await jobs.submit(samples / "sample.pdf", "standard", key=f"sealed-{os.getpid()}")
    await forger.get_workflow_handle(genuine.job_id).signal("caller_wait_ended", "budget")
    workflow_id = unique("unsealed")
    forged = await forger.start_workflow(
        WORKFLOW_TYPE,
        request_for(workflow_id, policies).model_dump(mode="json"),  # well-formed, for its own ID: only unsealed
        id=workflow_id,
        task_queue=queue,
        result_type=JobStatus,
    )
    # Sealed with the key but for no workflow (as the codec endpoint's former `/encode` sealed): refused too.
    unbound_id = unique("unbound")
    [unbound] = await EncryptionCodec([KEY]).encode(
        [pydantic_data_converter.payload_converter.to_payloads([request_for(unbound_id, policies, tenant="evil")])[0]]
    )
    unbound_start = await forger.start_workflow(
        WORKFLOW_TYPE, RawValue(unbound), id=unbound_id, task_queue=queue, result_type=JobStatus
    )
    start_worker(queue, **sealed)

    await assert_refused(jobs.handle(forged.id), jobs, "codec.unsealed")
    await assert_refused(jobs.handle(unbound_start.id), jobs, "codec.unsealed")
    status = await wait_terminal(jobs, genuine.job_id)
    assert status.state is JobState.SUCCEEDED, status.failure_code  # the dropped plaintext signal did no harm
