"""Prometheus metrics scraped from real worker processes running real jobs; the sample alert rules."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient
from tests.conftest import FAULT_WORKER, REPO, Env, StartWorker, free_port, wait_terminal
from tests.fault_worker import Hold
from tests.fixtures.samples import truncate_pdf
from tests.test_jobs import holding_worker

PROMETHEUS = REPO / "ops" / "prometheus"
SAMPLE_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
DURATION = re.compile(r"^\d+[smhd]$")


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def scrape(port: int) -> list[Sample]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    samples = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            match = SAMPLE_LINE.match(line)
            assert match, line
            labels = dict(LABEL.findall(match["labels"] or ""))
            samples.append(Sample(match["name"], labels, float(match["value"])))
    return samples


def total(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of a metric over every series that has these label values."""
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())


async def scrape_until(port: int, ready: Callable[[list[Sample]], bool], timeout: float = 30) -> list[Sample]:
    deadline = time.monotonic() + timeout
    while True:
        samples = await asyncio.to_thread(scrape, port)
        if ready(samples) or time.monotonic() > deadline:
            return samples
        await asyncio.sleep(0.5)


def assert_no_identity_in_labels(samples: list[Sample], *secrets: str) -> None:
    values = {value for sample in samples for value in sample.labels.values()}
    leaks = {value for value in values for secret in secrets if secret in value}
    assert not leaks, leaks


async def test_worker_serves_sdk_and_job_metrics(
    jobs: JobClient, env: Env, policies: PolicyBook, samples: Path, start_worker: StartWorker, tmp_path: Path
) -> None:
    queue, port = "docjobs-metrics", free_port()
    start_worker(queue, "--metrics-port", str(port), DOCJOBS_METRICS_REFRESH_SECONDS="1")
    on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    truncate_pdf(samples / "sample.pdf", tmp_path / "truncated.pdf")
    good = await on_queue.submit(samples / "sample.pdf", "standard", key="metrics-ok")
    bad = await on_queue.submit(tmp_path / "truncated.pdf", "standard", key="metrics-malformed")
    assert (await wait_terminal(jobs, good.job_id)).state is JobState.SUCCEEDED
    assert (await wait_terminal(jobs, bad.job_id)).failure_code == "input.malformed"

    # A job on a queue that no worker serves: visibility still shows it to this worker's gauges.
    unserved = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE="docjobs-metrics-unserved"))
    waiting = await unserved.submit(samples / "sample.pdf", "standard", key="metrics-waiting")
    try:
        found = await scrape_until(
            port, lambda s: total(s, "docjobs_oldest_active_job_age_seconds", state="queued") > 1
        )
    finally:
        await jobs.handle(waiting.job_id).terminate("test clean-up")

    assert total(found, "temporal_activity_schedule_to_start_latency_count", task_queue=queue) > 0  # the SDK's own
    assert total(found, "docjobs_oldest_active_job_age_seconds", state="queued") > 1
    assert total(found, "docjobs_active_jobs", state="queued") >= 1
    succeeded = {"state": "succeeded", "document_class": "standard", "failure_family": "none"}
    assert total(found, "docjobs_jobs_terminal", **succeeded) == 1
    assert total(found, "docjobs_jobs_terminal", state="failed", failure_family="input") == 1
    for stage in ("render", "sign", "verify", "publish"):
        shape = {"stage": stage, "watermark_mode": "structure", "page_bucket": "2-10"}  # 4 pages
        assert total(found, "docjobs_stage_duration_seconds_count", **shape) == 1, stage
        assert total(found, "docjobs_stage_duration_seconds_sum", **shape) > 0, stage
        assert total(found, "docjobs_activity_attempts", stage=stage, outcome="succeeded") == 1, stage
    assert total(found, "docjobs_activity_attempts", stage="render", outcome="failed") == 1
    for outcome in ("succeeded", "failed"):  # the truncated input fails at render, having cost something
        cpu = {"stage": "render", "watermark_mode": "structure", "outcome": outcome}
        assert total(found, "docjobs_stage_cpu_seconds_count", **cpu) == 1, outcome
        assert total(found, "docjobs_stage_cpu_seconds_sum", **cpu) > 0, outcome
    for state in ("succeeded", "failed"):
        assert total(found, "docjobs_document_cpu_seconds_count", state=state, document_class="standard") == 1
        assert total(found, "docjobs_document_cpu_seconds_sum", state=state) > 0, state
    assert total(found, "docjobs_released_pages", document_class="standard", watermark_mode="structure") == 4
    identities = (good.job_id, bad.job_id, waiting.job_id, good.input_sha256, bad.input_sha256)
    assert_no_identity_in_labels(found, *identities, "sample.pdf", "truncated")


async def test_a_retried_attempt_is_in_the_cost(
    jobs: JobClient, env: Env, policies: PolicyBook, samples: Path, start_worker: StartWorker
) -> None:
    """render's first attempt works, then fails (retried); the job's cost counts both attempts, and so does
    the stage's CPU histogram, by outcome."""
    queue, port = "docjobs-metrics-flaky", free_port()
    start_worker(queue, "--metrics-port", str(port), script=FAULT_WORKER, DOCJOBS_FAULT="flaky-render")
    on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    submitted = await on_queue.submit(samples / "sample.pdf", "standard", key="metrics-flaky")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED and status.attempts["render"] == 2, status
    cost = status.cost
    assert set(cost.stages) == set(status.attempts)  # render, sign, verify, publish
    assert cost.stages["render"].attempts == 2 and cost.total.attempts == 5
    assert all(stage.cpu_seconds > 0 and stage.wall_seconds > 0 for stage in cost.stages.values()), cost
    render = cost.stages["render"]
    assert render.peak_memory_mb > 0 and render.bytes_read >= samples.joinpath("sample.pdf").stat().st_size
    assert cost.total.cpu_seconds == pytest.approx(sum(stage.cpu_seconds for stage in cost.stages.values()))

    found = await asyncio.to_thread(scrape, port)
    for outcome in ("retrying", "succeeded"):
        cpu = {"stage": "render", "outcome": outcome}
        assert total(found, "docjobs_stage_cpu_seconds_count", **cpu) == 1, outcome
    stages_cpu = total(found, "docjobs_stage_cpu_seconds_sum")
    document_cpu = total(found, "docjobs_document_cpu_seconds_sum", state="succeeded")
    assert document_cpu == pytest.approx(cost.total.cpu_seconds) == pytest.approx(stages_cpu, rel=1e-3)


async def test_fidelity_failures_are_counted_by_check(
    jobs: JobClient, env: Env, policies: PolicyBook, samples: Path, start_worker: StartWorker
) -> None:
    queue, port = "docjobs-metrics-faulty", free_port()
    start_worker(queue, "--metrics-port", str(port), script=FAULT_WORKER)
    on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    submitted = await on_queue.submit(samples / "sample.pdf", "standard", key="metrics-faulty")
    assert (await wait_terminal(jobs, submitted.job_id)).failure_code == "fidelity.page_count"
    found = await asyncio.to_thread(scrape, port)
    assert total(found, "docjobs_fidelity_failures", check="page_count") == 1
    assert total(found, "docjobs_jobs_terminal", state="quarantined", failure_family="fidelity") == 1
    # the release gate finds it in `sign`, before anything is signed (verify's readers would, after)
    assert total(found, "docjobs_activity_attempts", stage="sign", outcome="failed") == 1


@pytest.fixture(scope="module")
async def after_lost_lease(
    jobs: JobClient,
    env: Env,
    policies: PolicyBook,
    samples: Path,
    start_worker: StartWorker,
    tmp_path_factory: pytest.TempPathFactory,
) -> list[Sample]:
    """A worker SIGKILLed mid-render; the scrape of the worker that took the stage over and finished the job."""
    queue, port, holds = "docjobs-metrics-kill", free_port(), tmp_path_factory.mktemp("metrics-holds")
    doomed = holding_worker(start_worker, queue, holds)
    on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    submitted = await on_queue.submit(samples / "long.pdf", "standard", key="metrics-kill")
    await asyncio.to_thread(Hold(holds, submitted.job_id).wait, "held")
    doomed.kill()
    start_worker(queue, "--metrics-port", str(port))
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED and status.attempts["render"] >= 2, status
    return await asyncio.to_thread(scrape, port)


def test_a_lost_lease_is_counted_by_the_next_attempt(after_lost_lease: list[Sample]) -> None:
    assert total(after_lost_lease, "docjobs_lease_expirations", stage="render") == 1
    assert total(after_lost_lease, "docjobs_lease_expirations", stage="publish") == 0
    shape = {"stage": "render", "watermark_mode": "structure", "page_bucket": "11-50"}  # 40 pages
    assert total(after_lost_lease, "docjobs_stage_duration_seconds_count", **shape) == 1


def test_alert_rules_are_well_formed_and_use_exported_metrics(after_lost_lease: list[Sample]) -> None:
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    exported = {sample.name for sample in after_lost_lease}
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in alerts} == {"DocjobsJobOverdue", "DocjobsLeaseExpirationsRising"}
    for rule in alerts:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] and rule["annotations"]["summary"], rule
        assert DURATION.match(rule.get("for", "0s")), rule
        used = set(re.findall(r"\bdocjobs_[a-z_]+", rule["expr"]))
        assert used and used <= exported, (rule["alert"], used - exported)

    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    targets = [
        target for job in config["scrape_configs"] for group in job["static_configs"] for target in group["targets"]
    ]
    assert targets == ["docjobs-worker-general:9464", "docjobs-worker-ocr:9464"]
