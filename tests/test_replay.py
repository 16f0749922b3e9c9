"""Determinism: recorded histories replay against the current workflow code without divergence.

The committed histories in tests/histories/ were recorded from real jobs (succeeded, a pinned policy, failed,
canceled at the deadline, OCR, a B-LTA job and its archive renewed and asleep: `python -m tests.record_histories`
records them again), batches (a run that
continued as new, the last run of one) and `timed-out-wrap-up` (test_workflow_branches' doubles: a render held
past a 1 s deadline, then the evidence step held until the run's 3 s execution timeout closed it mid-task, its
local activity still in flight; that test replays a fresh one of these every run). A change to a workflow that
would break jobs or batches in flight fails here. Histories recorded in this session are replayed too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient
from tests.conftest import wait_terminal
from tests.fixtures.samples import make_garbage
from workflows.archive import ArchiveWorkflow
from workflows.batch_job import DocumentBatchWorkflow
from workflows.document_job import DocumentJobWorkflow

HISTORIES = Path(__file__).with_name("histories")


def replayer() -> Replayer:
    """Replays as the workers run: with the SDK's tracing interceptor, which emits no span while replaying."""
    return Replayer(
        workflows=[DocumentJobWorkflow, DocumentBatchWorkflow, ArchiveWorkflow],
        data_converter=pydantic_data_converter,
        interceptors=[TracingInterceptor()],
    )


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_committed_histories_replay(path: Path) -> None:
    text = path.read_text()
    # Replayed under the workflow ID it ran with: the workflow refuses a request for another job ID.
    workflow_id = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]["workflowId"]
    history = WorkflowHistory.from_json(workflow_id, text)
    await replayer().replay_workflow(history)


async def test_fresh_histories_replay(jobs: JobClient, policies: PolicyBook, samples: Path, tmp_path: Path) -> None:
    make_garbage(tmp_path / "garbage.bin", size=999)
    ok = await jobs.submit(samples / "sample.pdf", "standard", key="replay-ok")
    bad = await jobs.submit(tmp_path / "garbage.bin", "standard", key="replay-bad")
    for job_id in (ok.job_id, bad.job_id):
        await wait_terminal(jobs, job_id)
        history = await jobs.handle(job_id).fetch_history()
        result = await replayer().replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, result.replay_failure
