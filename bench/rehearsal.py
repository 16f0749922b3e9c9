"""The workload rehearsal (issue 42, item 5): normal traffic, a retry burst and a provider slowdown, on the real stack.

    .venv/bin/python bench/rehearsal.py [--quick] [--rate R] [--seed 42] [--jobs 150] [--keys 60]
        [--capacity-jobs 24] [--delay 2] [--warm-seconds 15] [--slow-seconds 60] [--fail-seconds 60]
        [--slowdown-load 0.5] [--drain-timeout 900] [--cases normal,burst,slowdown] [--keep DIR]

Starts a throwaway Temporal dev server, one `worker.py` (its own process, metrics on a free port, JSON logs),
`starter.py serve` (its own process), moto's S3 server, certomancer's TSA (tests/fixtures/test_pki.py; the worker
signs PAdES B-T with that PKI's signer) and a webhook receiver (the tenant's callback, plain http on loopback),
all on loopback. Each provider is reached through a `bench/providers.py` proxy that counts the calls: the API's
S3, the worker's S3, the TSA and the webhook. The worker's three can be switched to answer slowly or with 503;
the API's S3 never is, so uploads keep being accepted during a slowdown and a backlog forms. Every job is a
1-page PDF of its own (a distinct source) under the `standard` policy (watermark, sign, verify), with its own
Idempotency-Key unless the case says otherwise.

* capacity: `--capacity-jobs` jobs by 4 closed-loop clients, after one warm-up job: jobs/s (or take `--rate`);
* normal: `--jobs` jobs arriving open-loop (Poisson, seeded) at 0.8 of capacity;
* retry burst: `--keys` logical requests at the same rate, each sent 3 times with one Idempotency-Key: all
  three at once, or two at once and one after a short delay (seeded); exactly one job a key, and no more
  downstream calls per released document than in the normal case;
* provider slowdown: arrivals at `--slowdown-load` of the normal rate for `--warm-seconds`, then the worker's
  S3, TSA and webhook answer `--delay` s late for `--slow-seconds`, then 503 for `--fail-seconds`, then
  recover; arrivals stop at the recovery and the backlog drains (at most `--drain-timeout`). Reports what
  ended how, released unsigned (each released artifact's signature validated with pyHanko against the PKI's
  root), released twice (artifact creations and succeeded events per job), lease expirations, the time to
  drain, and the alerts of ops/prometheus/alerts.yml evaluated over the worker's metrics as scraped every
  5 s (promtool is not installed here: each rule's expression and `for` are evaluated on those samples);
* operator investigation: during the slowdown, for one slow job and one job stuck retrying against the
  failing provider, the RUNBOOK's commands from its job ID to the cause, run for real: the count, and their
  wall time.

`--quick` shrinks every size and phase for development (not for figures); `--cases` runs some of the cases only,
`--keep DIR` keeps the run's files (the worker's log, each investigation command's output). Prints one table, a
row a case: jobs/s, p50/p99 latency (upload answered to terminal), upload answers p50/p99, duplicates suppressed
(`200` answers: a repeat of an existing job), downstream calls per released document and stuck jobs.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3  # type: ignore[import-untyped]
import httpx
from harness import api_answers, dev_server_env, environ, free_port, print_table, wait_for
from providers import Call, Switch, SwitchedProxy, WebhookReceiver, per_key, serving
from pyhanko.keys import load_cert_from_pemder
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign.validation import async_validate_pdf_signature
from pyhanko_certvalidator import ValidationContext
from temporalio.client import Client
from temporalio.service import RPCError

from docjobs.domain.job_status import JobStatus
from docjobs.settings.tenants import add_tenant, set_callback
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import ensure_dev_server, stop_dev_server
from docjobs.temporal.settings import TemporalSettings
from tests.conftest import REGION, moto_server
from tests.fixtures.samples import make_sample_pdf
from tests.fixtures.test_pki import TestPki, serving_test_pki

REPO = Path(__file__).resolve().parent.parent
BUCKET = "rehearsal"
TENANT = "rehearsal"
TERMINAL = frozenset({"succeeded", "failed", "canceled", "quarantined"})
CAPACITY_CLIENTS = 4
LOAD = 0.8  # of the capacity, the normal arrival rate
SENDS = 3  # a retry burst's sends of one request
SCRAPE_SECONDS = 5.0
OVERDUE_SECONDS, OVERDUE_FOR = 1800.0, 300.0  # ops/prometheus/alerts.yml, DocjobsJobOverdue
LEASE_WINDOW, LEASE_FOR = 600.0, 900.0  # DocjobsLeaseExpirationsRising: rate(...[10m]) > 0 for 15m
METRIC_LINE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


# --- the stack ---------------------------------------------------------------------------------------------------


@dataclass
class Stack:
    """What a case drives: the API, the job client, the proxies and receiver that count, the worker's switch."""

    base: str
    key: str
    jobs: JobClient
    env: dict[str, str]
    switch: Switch
    s3_api: SwitchedProxy
    s3_worker: SwitchedProxy
    tsa: SwitchedProxy
    webhook: SwitchedProxy
    receiver: WebhookReceiver
    metrics_url: str
    worker_log: Path
    pki: TestPki
    moto: str
    documents: Iterator[bytes]


def aws_env(endpoint: str) -> dict[str, str]:
    """boto3 pointed at `endpoint` through the environment only, away from the host's AWS configuration."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


def documents(folder: Path) -> Iterator[bytes]:
    """1-page PDFs, each of its own bytes (so each upload stores a source, as distinct documents do)."""
    path = folder / "doc.pdf"
    while True:
        make_sample_pdf(path, pages=1, marker=f"rehearsal {uuid.uuid4().hex}")
        yield path.read_bytes()


@contextmanager
def stack(folder: Path) -> Iterator[Stack]:
    """Everything up, on loopback; everything stopped again after the block."""
    with ExitStack() as stop:
        moto, moto_url = moto_server(BUCKET)
        stop.callback(moto.stop)
        pki = stop.enter_context(serving_test_pki(folder / "pki"))
        switch = Switch()
        receiver = WebhookReceiver()
        stop.enter_context(serving(receiver))
        moto_address = ("127.0.0.1", int(urlsplit(moto_url).port or 0))
        pki_address = ("127.0.0.1", int(urlsplit(pki.base_url).port or 0))
        s3_api, s3_worker = SwitchedProxy(moto_address), SwitchedProxy(moto_address, switch)
        tsa = SwitchedProxy(pki_address, switch)
        webhook = SwitchedProxy(("127.0.0.1", receiver.port), switch)
        for proxy in (s3_api, s3_worker, tsa, webhook):
            stop.enter_context(serving(proxy))
        tenants = folder / "tenants.json"
        env = {
            **os.environ,
            **dev_server_env(folder, "docjobs-rehearsal"),
            "DOCJOBS_TENANTS_FILE": str(tenants),
            "DOCJOBS_STORAGE_URL": f"s3://{BUCKET}/docjobs",
            "DOCJOBS_TENANT_MAX_RUNNING_JOBS": "100000",  # a backlog is what the slowdown measures, not the quota
            **aws_env(s3_api.url),
        }
        key = add_tenant(tenants, TENANT)
        set_callback(tenants, TENANT, f"{webhook.url}/hook", allow_http_loopback=True)
        with environ(env):
            settings = TemporalSettings.from_env()
        ensure_dev_server(settings)
        stop.callback(stop_dev_server, settings)
        metrics_port = free_port()
        signing = pki.worker_env()
        signing.pop("DOCJOBS_REVOCATION_URLS")  # B-T only: no revocation fetches, so every TSA call is counted
        signing["DOCJOBS_TSA_URL"] = tsa.url + urlsplit(pki.tsa_url).path
        worker_env = {**env, **aws_env(s3_worker.url), **signing}
        log = folder / "worker.log"
        worker = subprocess.Popen(
            [sys.executable, str(REPO / "worker.py"), "--metrics-port", str(metrics_port), "--log-format", "json"],
            cwd=REPO,
            env=worker_env,
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        stop.callback(ended, worker, signal.SIGTERM)
        port = free_port()
        api = subprocess.Popen(
            [sys.executable, str(REPO / "starter.py"), "serve", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        stop.callback(ended, api, signal.SIGINT)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: b"worker ready" in log.read_bytes(), worker, "the worker")
        wait_for(lambda: api_answers(base), api, "the API")
        with environ(env):
            jobs = JobClient(asyncio.run(connect(settings)), settings)
        yield Stack(
            base,
            key,
            jobs,
            env,
            switch,
            s3_api,
            s3_worker,
            tsa,
            webhook,
            receiver,
            f"http://127.0.0.1:{metrics_port}/metrics",
            log,
            pki,
            moto_url,
            documents(folder),
        )


def ended(process: subprocess.Popen[bytes], how: signal.Signals) -> None:
    if process.poll() is None:
        process.send_signal(how)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- one request, one job ----------------------------------------------------------------------------------------


@dataclass
class Answer:
    """One upload's answer: its status code, the job it names, how long it took (ms), when it came (monotonic)."""

    code: int
    job_id: str
    ms: float
    at: float


@dataclass
class Job:
    """One logical request: its answers (a burst has several) and how its job ended."""

    key: str
    answers: list[Answer] = field(default_factory=list)
    state: str = "not ended"
    failure_code: str | None = None
    notification: str | None = None
    ended_at: float | None = None
    status: JobStatus | None = None
    run_id: str = ""
    closed_as: str | None = None  # how Temporal closed a run the workflow did not end itself (`workflow.*` codes)

    @property
    def job_id(self) -> str:
        return self.answers[0].job_id if self.answers else ""

    @property
    def accepted_at(self) -> float:
        return min(answer.at for answer in self.answers)


async def upload(http: httpx.AsyncClient, stack: Stack, key: str, body: bytes) -> Answer:
    headers = {"Authorization": f"Bearer {stack.key}", "Idempotency-Key": key, "Content-Type": "application/pdf"}
    started = time.perf_counter()
    while True:
        response = await http.post("/v1/jobs", content=body, headers=headers)
        if response.status_code != 503:  # Temporal busy for a moment: the API says retry
            break
        await asyncio.sleep(float(response.headers.get("Retry-After", "1")))
    took = (time.perf_counter() - started) * 1000
    if response.status_code not in (200, 202):
        raise RuntimeError(f"upload answered {response.status_code} ({response.json().get('code')})")
    return Answer(response.status_code, str(response.json()["job_id"]), took, time.monotonic())


async def follow(stack: Stack, job: Job, deadline: float) -> None:
    """Until the job ends (a long poll on its workflow's result, no status polling) or `deadline` passes."""
    while True:
        try:
            status = await asyncio.wait_for(stack.jobs.ended(job.job_id), max(1.0, deadline - time.monotonic()))
            break
        except (TimeoutError, RPCError):  # the SDK may answer the wait's cancellation with an RPCError
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(1)
    job.ended_at = time.monotonic()
    job.status = status
    job.state, job.failure_code, job.notification = status.state.value, status.failure_code, status.notification
    described = await stack.jobs.handle(job.job_id).describe()
    job.run_id = described.run_id or ""
    if job.failure_code and job.failure_code.startswith("workflow.") and described.status:
        job.closed_as = described.status.name


def arrivals(rate: float, count: int, rng: random.Random) -> list[float]:
    """Poisson arrival offsets (s) of `count` requests at `rate` a second."""
    offsets, at = [], 0.0
    for _ in range(count):
        offsets.append(at)
        at += rng.expovariate(rate)
    return offsets


async def open_loop(offsets: list[float], one: Callable[[int], Coroutine[object, object, None]]) -> None:
    """Start `one(i)` at each offset from now, whatever the earlier ones are doing (open loop)."""
    started = time.monotonic()
    tasks: list[asyncio.Task[None]] = []
    for index, offset in enumerate(offsets):
        await asyncio.sleep(max(0.0, started + offset - time.monotonic()))
        tasks.append(asyncio.create_task(one(index)))
    await asyncio.gather(*tasks)


def client(stack: Stack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=stack.base, timeout=300, limits=httpx.Limits(max_connections=64))


# --- the cases ---------------------------------------------------------------------------------------------------


@dataclass
class Case:
    """What a case did, and the calls the proxies saw while it ran."""

    name: str
    jobs: list[Job]
    started: float
    finished: float
    calls: dict[str, list[Call]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def released(self) -> list[Job]:
        return [job for job in self.jobs if job.state == "succeeded"]


def calls_between(stack: Stack, since: float, until: float) -> dict[str, list[Call]]:
    proxies = {"s3_api": stack.s3_api, "s3_worker": stack.s3_worker, "tsa": stack.tsa, "webhook": stack.webhook}
    return {name: [c for c in proxy.calls.snapshot() if since <= c.at <= until] for name, proxy in proxies.items()}


async def capacity(stack: Stack, count: int) -> float:
    """Jobs/s of `count` jobs by CAPACITY_CLIENTS closed-loop clients (each uploads, waits for the end, again)."""
    async with client(stack) as http:
        warm = Job(f"warm-{uuid.uuid4().hex[:8]}")
        warm.answers.append(await upload(http, stack, warm.key, next(stack.documents)))
        await follow(stack, warm, time.monotonic() + 300)
        remaining = list(range(count))

        async def loop() -> None:
            while remaining:
                remaining.pop()
                job = Job(f"cap-{uuid.uuid4().hex[:12]}")
                job.answers.append(await upload(http, stack, job.key, next(stack.documents)))
                await follow(stack, job, time.monotonic() + 300)

        started = time.monotonic()
        await asyncio.gather(*(loop() for _ in range(CAPACITY_CLIENTS)))
        return count / (time.monotonic() - started)


async def normal(stack: Stack, rate: float, count: int, rng: random.Random, wait: float) -> Case:
    jobs = [Job(f"normal-{index}-{uuid.uuid4().hex[:8]}") for index in range(count)]
    bodies = [next(stack.documents) for _ in jobs]
    started = time.monotonic()
    async with client(stack) as http:

        async def one(index: int) -> None:
            job = jobs[index]
            job.answers.append(await upload(http, stack, job.key, bodies[index]))
            await follow(stack, job, time.monotonic() + wait)

        await open_loop(arrivals(rate, count, rng), one)
    finished = time.monotonic()
    return Case("normal traffic", jobs, started, finished, calls_between(stack, started, finished))


async def retry_burst(stack: Stack, rate: float, count: int, rng: random.Random, wait: float) -> Case:
    """Each logical request sent SENDS times with one key: all at once, or all but one at once and the last after
    a short delay (the client timed out and tried again)."""
    jobs = [Job(f"burst-{index}-{uuid.uuid4().hex[:8]}") for index in range(count)]
    bodies = [next(stack.documents) for _ in jobs]
    late = [rng.random() < 0.5 for _ in jobs]
    delays = [rng.uniform(0.05, 1.0) for _ in jobs]
    started = time.monotonic()
    async with client(stack) as http:

        async def late_send(index: int) -> Answer:
            await asyncio.sleep(delays[index])
            return await upload(http, stack, jobs[index].key, bodies[index])

        async def one(index: int) -> None:
            job = jobs[index]
            at_once = SENDS - 1 if late[index] else SENDS
            sends = [upload(http, stack, job.key, bodies[index]) for _ in range(at_once)]
            if late[index]:
                sends.append(late_send(index))
            job.answers.extend(await asyncio.gather(*sends))
            await follow(stack, job, time.monotonic() + wait)

        await open_loop(arrivals(rate, count, rng), one)
    finished = time.monotonic()
    case = Case("retry burst (x3, one key)", jobs, started, finished, calls_between(stack, started, finished))
    runs = await runs_per_job(stack.jobs.client, [job.job_id for job in jobs])
    one_job = all(
        len({a.job_id for a in job.answers}) == 1 and sum(a.code == 202 for a in job.answers) == 1 for job in jobs
    )
    case.notes.append(
        f"exactly one job a key: {'yes' if one_job else 'NO'} (answers: one 202 and {SENDS - 1} x 200 a key); "
        f"workflow runs a job ID (visibility): {dict(sorted(Counter(runs.values()).items()))}; "
        f"{sum(late)} keys had one send late"
    )
    return case


async def runs_per_job(temporal: Client, job_ids: list[str]) -> dict[str, int]:
    """How many workflow runs visibility lists for each job ID (waited for until each has at least one)."""
    wanted = set(job_ids)
    deadline = time.monotonic() + 30
    while True:
        runs: Counter[str] = Counter()
        async for execution in temporal.list_workflows("WorkflowType = 'DocumentJob'"):
            if execution.id in wanted:
                runs[execution.id] += 1
        if len(runs) == len(wanted) or time.monotonic() > deadline:
            return {job_id: runs.get(job_id, 0) for job_id in job_ids}
        await asyncio.sleep(1)


# --- the worker's metrics, and the alert rules on them -----------------------------------------------------------

Sample = tuple[float, list[tuple[str, dict[str, str], float]]]  # (monotonic time, [(name, labels, value)])


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus' text format, the docjobs_* series only (the only ones the rules read)."""
    found = []
    for line in text.splitlines():
        match = METRIC_LINE.match(line)
        if match and match.group(1).startswith("docjobs_"):
            labels = dict(LABEL.findall(match.group(2) or ""))
            found.append((match.group(1), labels, float(match.group(3))))
    return found


async def scrape(url: str, samples: list[Sample], stop: asyncio.Event) -> None:
    """The worker's /metrics every SCRAPE_SECONDS (Prometheus' own scrape is 15 s: ops/prometheus/prometheus.yml)."""
    async with httpx.AsyncClient(timeout=10) as http:
        while not stop.is_set():
            with suppress(httpx.HTTPError):  # a missed scrape, as Prometheus would have one
                samples.append((time.monotonic(), parse_metrics((await http.get(url)).text)))
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SCRAPE_SECONDS)


def summed(sample: Sample, name: str, by: str, **match: str) -> dict[str, float]:
    """`sum by (by) (name{match})` of one sample."""
    sums: dict[str, float] = {}
    for series, labels, value in sample[1]:
        if series == name and all(labels.get(k) == v for k, v in match.items()):
            sums[labels.get(by, "")] = sums.get(labels.get(by, ""), 0.0) + value
    return sums


def held_for(points: list[tuple[float, bool]]) -> float:
    """The longest stretch (s) over which a condition held at every evaluation."""
    longest, since = 0.0, None
    for at, holds in points:
        since = (since if since is not None else at) if holds else None
        longest = max(longest, at - since) if since is not None else longest
    return longest


def alerts(samples: list[Sample], since: float, until: float) -> list[tuple[str, str, str]]:
    """Each rule of ops/prometheus/alerts.yml on the scraped samples between `since` and `until`: the rule, what its
    expression measured, and whether it fired (its condition held for its `for`)."""
    window = [sample for sample in samples if since <= sample[0] <= until]
    if not window:
        return [("(none)", "no metrics were scraped", "not evaluated")]
    ages = [max(summed(s, "docjobs_oldest_active_job_age_seconds", "state").values(), default=0.0) for s in window]
    overdue = held_for([(s[0], age > OVERDUE_SECONDS) for s, age in zip(window, ages, strict=True)])
    lease_points, expirations = [], 0.0
    at_start = sum(summed(window[0], "docjobs_lease_expirations", "stage").values())
    for sample in window:
        now = summed(sample, "docjobs_lease_expirations", "stage")
        earliest = next(s for s in samples if s[0] >= sample[0] - LEASE_WINDOW)
        before = summed(earliest, "docjobs_lease_expirations", "stage")
        # a series absent at the window's start has no rate for its first increment, as in Prometheus
        rising = any(value > before[stage] for stage, value in now.items() if stage in before)
        lease_points.append((sample[0], rising))
        expirations = max(expirations, sum(now.values()) - at_start)
    lease = held_for(lease_points)
    return [
        (
            "DocjobsJobOverdue: max by (state) (docjobs_oldest_active_job_age_seconds) > 1800 for 5m",
            f"oldest active job at most {max(ages):.0f} s; over 1800 s for {overdue:.0f} s",
            "fired" if overdue >= OVERDUE_FOR else "did not fire",
        ),
        (
            "DocjobsLeaseExpirationsRising: sum by (stage) (rate(docjobs_lease_expirations[10m])) > 0 for 15m",
            f"{expirations:.0f} lease expirations; rate > 0 for {lease:.0f} s",
            "fired" if lease >= LEASE_FOR else "did not fire",
        ),
    ]


def increase(samples: list[Sample], since: float, until: float, name: str, by: str, **match: str) -> dict[str, float]:
    """How much a counter grew between the first and the last sample in the window, by label `by`."""
    window = [sample for sample in samples if since <= sample[0] <= until]
    if len(window) < 2:
        return {}
    first, last = summed(window[0], name, by, **match), summed(window[-1], name, by, **match)
    return {key: value - first.get(key, 0.0) for key, value in sorted(last.items()) if value > first.get(key, 0.0)}


def stage_means(samples: list[Sample], since: float, until: float) -> str:
    """What `rate(docjobs_stage_duration_seconds_sum[w]) / rate(..._count[w])` by stage shows for the window."""
    total = increase(samples, since, until, "docjobs_stage_duration_seconds_sum", "stage")
    count = increase(samples, since, until, "docjobs_stage_duration_seconds_count", "stage")
    return ", ".join(f"{stage} {total.get(stage, 0.0) / n:.1f}" for stage, n in count.items())


# --- operator investigation --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One command an operator runs (as the RUNBOOK names it), its wall time, and what of its output answers."""

    command: str
    seconds: float
    finding: str
    names_cause: bool


async def run_command(argv: list[str], env: dict[str, str]) -> tuple[str, float]:
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    return out.decode(errors="replace"), time.perf_counter() - started


CAUSES = re.compile(r"storage\.unavailable|signature\.tsa_unavailable|object storage is unavailable|tsa_unavailable")


async def investigate(stack: Stack, job_id: str, stuck: bool) -> list[Step]:
    """The RUNBOOK's path from a job ID ("From a job ID to a diagnosis", "Metrics and alerts", the failure codes'
    "look at the worker log of that attempt"), each command run for real; what each output says is summed up in
    a line (fields and codes only: outputs carry no document content)."""
    python = [sys.executable, str(REPO / "starter.py")]
    temporal = str(Path(sys.executable).with_name("temporal"))
    address = f"127.0.0.1:{stack.env['DOCJOBS_TEMPORAL_PORT']}"
    commands: list[tuple[str, list[str]]] = [
        (f"starter.py --json status {job_id}", [*python, "--json", "status", job_id]),
        (f"starter.py timeline {job_id}", [*python, "timeline", job_id]),
    ]
    if stuck:
        commands += [
            (f"grep -F {job_id} worker.log", ["grep", "-F", job_id, str(stack.worker_log)]),
            (
                f"temporal workflow describe --workflow-id {job_id}",
                [temporal, "workflow", "describe", "--workflow-id", job_id, "--address", address],
            ),
        ]
    else:
        commands.append((f"curl -s {stack.metrics_url}", ["curl", "-s", stack.metrics_url]))
    steps: list[Step] = []
    kept = stack.worker_log.parent / "investigation"
    kept.mkdir(exist_ok=True)
    for label, argv in commands:
        out, seconds = await run_command(argv, stack.env)
        (kept / f"{'stuck' if stuck else 'slow'}-{len(steps) + 1}.txt").write_text(f"$ {label}\n{out}")
        steps.append(Step(label, seconds, finding(label, out), bool(CAUSES.search(out))))
    return steps


def finding(label: str, out: str) -> str:
    """What an operator reads in a command's output, in a line."""
    if "--json status" in label:
        lines = out.strip().splitlines()
        status = json.loads(lines[-1]) if lines else {}
        stages = (status.get("cost") or {}).get("stages") or {}
        spent = ", ".join(
            f"{name} {cost.get('wall_seconds', 0):.1f}/{cost.get('cpu_seconds', 0):.2f}"
            for name, cost in stages.items()
        )
        return (
            f"state {status.get('state')}, stage {status.get('stage')}, attempts {status.get('attempts')}; "
            f"wall/CPU s by stage: {spent or '-'}"
        )
    if label.startswith("curl"):
        sums: dict[str, list[float]] = {}
        for name, labels, value in parse_metrics(out):
            if name in ("docjobs_stage_duration_seconds_sum", "docjobs_stage_duration_seconds_count"):
                sums.setdefault(labels.get("stage", ""), [0.0, 0.0])[name.endswith("_count")] += value
        means = ", ".join(f"{stage} {total / count:.1f}" for stage, (total, count) in sorted(sums.items()) if count)
        return f"mean s an attempt, docjobs_stage_duration_seconds by stage: {means}"
    causes = sorted(set(CAUSES.findall(out)))
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return f"{len(lines)} lines; names {', '.join(causes)}" if causes else f"{len(lines)} lines; no cause named"


async def pick_stuck(stack: Stack, running: list[Job]) -> str | None:
    """A running job whose stage is on a second attempt or later (retrying against the failing provider)."""
    for job in sorted(running, key=lambda job: job.accepted_at)[:20]:
        status = await stack.jobs.status(job.job_id)
        if any(attempt > 1 for attempt in status.attempts.values()):
            return job.job_id
    return None


# --- the provider slowdown ---------------------------------------------------------------------------------------


@dataclass
class Phases:
    warm: float
    slow: float
    fail: float
    delay: float
    drain_timeout: float


@dataclass
class Slowdown:
    """The slowdown case, and what only it reports."""

    case: Case
    marks: dict[str, float]  # when the providers slowed, failed and recovered (monotonic)
    slow_steps: list[Step]
    stuck_steps: list[Step]


async def slowdown(stack: Stack, rate: float, phases: Phases, rng: random.Random) -> Slowdown:
    span = phases.warm + phases.slow + phases.fail
    offsets = [at for at in arrivals(rate, int(rate * span * 2) + 10, rng) if at < span]
    jobs = [Job(f"slow-{index}-{uuid.uuid4().hex[:8]}") for index in range(len(offsets))]
    bodies = [next(stack.documents) for _ in jobs]
    started = time.monotonic()
    marks: dict[str, float] = {}
    found: dict[str, list[Step]] = {}

    def running() -> list[Job]:
        return [job for job in jobs if job.answers and job.ended_at is None]

    async def providers() -> None:
        await asyncio.sleep(phases.warm)
        stack.switch.delay(phases.delay)
        marks["slow"] = time.monotonic()
        await asyncio.sleep(phases.slow / 2)
        slow = sorted(running(), key=lambda job: job.accepted_at)  # the oldest running: the slowest so far
        if slow:
            found["slow"] = await investigate(stack, slow[0].job_id, stuck=False)
        await asyncio.sleep(max(0.0, marks["slow"] + phases.slow - time.monotonic()))
        stack.switch.fail()
        marks["fail"] = time.monotonic()
        await asyncio.sleep(phases.fail / 2)
        stuck = await pick_stuck(stack, running())
        if stuck is not None:
            found["stuck"] = await investigate(stack, stuck, stuck=True)
        await asyncio.sleep(max(0.0, marks["fail"] + phases.fail - time.monotonic()))
        stack.switch.restore()
        marks["recovered"] = time.monotonic()

    async with client(stack) as http:

        async def one(index: int) -> None:
            job = jobs[index]
            job.answers.append(await upload(http, stack, job.key, bodies[index]))
            await follow(stack, job, started + span + phases.drain_timeout)

        driver = asyncio.create_task(providers())
        await open_loop(offsets, one)
        await driver
    finished = time.monotonic()
    case = Case(
        f"provider slowdown (+{phases.delay:g} s for {phases.slow:g} s, then 503 for {phases.fail:g} s)",
        jobs,
        started,
        finished,
        calls_between(stack, started, finished),
    )
    return Slowdown(case, marks, found.get("slow", []), found.get("stuck", []))


async def signed(s3: Any, key: str, context: ValidationContext) -> tuple[bool, bool]:
    """Whether the stored PDF at `key` has exactly one signature that validates, and whether it is timestamped."""
    blob = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    signatures = PdfFileReader(io.BytesIO(blob)).embedded_signatures
    verdict = await async_validate_pdf_signature(signatures[0], context) if len(signatures) == 1 else None
    return verdict is not None and verdict.bottom_line, verdict is not None and verdict.timestamp_validity is not None


async def released_checks(stack: Stack, case: Case) -> list[str]:
    """Released unsigned and released twice, from the store itself and from what the proxies and receiver saw;
    and any artifact created for a run whose job did not end `succeeded` (the API serves none of them)."""
    s3 = boto3.client(
        "s3", endpoint_url=stack.moto, region_name=REGION, aws_access_key_id="bench", aws_secret_access_key="bench"
    )
    root = load_cert_from_pemder(str(stack.pki.signer.root))  # type: ignore[no-untyped-call]
    context = ValidationContext(trust_roots=[root], allow_fetching=False, revocation_mode="soft-fail")
    verdicts = []
    for job in case.released():
        assert job.status is not None and job.status.artifact_key
        verdicts.append(await signed(s3, f"docjobs/{job.status.artifact_key}", context))
    created = per_key(case.calls["s3_worker"], "PUT", "/artifact.pdf", 200)
    artifacts = {f"/{BUCKET}/docjobs/{job.status.artifact_key}" for job in case.released() if job.status}
    by_run = {job.run_id: job for job in case.jobs}
    others: Counter[str] = Counter()
    for path in sorted(set(created) - artifacts):
        owner = by_run.get(path.split("/runs/", 1)[-1].split("/", 1)[0])
        valid, _ = await signed(s3, path.removeprefix(f"/{BUCKET}/"), context)
        ending = f"{owner.state} {owner.failure_code or ''}".strip() if owner else "unknown"
        others[f"{ending}, signature {'valid' if valid else 'NOT valid'}"] += 1
    events: dict[str, set[str]] = {}
    for event in stack.receiver.taken():
        if event.state == "succeeded":
            events.setdefault(event.job_id, set()).add(event.event_id)
    ours = {job.job_id for job in case.jobs}
    twice = sum(1 for count in created.values() if count > 1)
    return [
        f"released: {len(verdicts)}; unsigned or not validating: {sum(not ok for ok, _ in verdicts)}; without a "
        f"signature timestamp: {sum(not stamped for _, stamped in verdicts)} (pyHanko, against the PKI's root)",
        f"released twice: {twice} artifacts created more than once; jobs with more than one `succeeded` event: "
        f"{sum(1 for job_id, ids in events.items() if job_id in ours and len(ids) > 1)}",
        f"artifacts created for a run whose job did not succeed (not served): {sum(others.values())}"
        + (f" ({', '.join(f'{n} {what}' for what, n in others.items())})" if others else ""),
    ]


# --- the report --------------------------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))] if ordered else float("nan")


def row(case: Case) -> list[object]:
    done = [job for job in case.jobs if job.ended_at is not None]
    latencies = [job.ended_at - job.accepted_at for job in done if job.ended_at is not None]
    answers = [answer.ms for job in case.jobs for answer in job.answers]
    duplicates = sum(answer.code == 200 for job in case.jobs for answer in job.answers)
    released = len(case.released())
    first = min((job.accepted_at for job in case.jobs), default=case.started)
    last = max((job.ended_at for job in done if job.ended_at is not None), default=case.finished)
    puts_api = sum(c.method == "PUT" for c in case.calls["s3_api"])
    puts_worker = sum(c.method == "PUT" for c in case.calls["s3_worker"])
    tsa = sum(c.method == "POST" for c in case.calls["tsa"])
    hooks = sum(c.method == "POST" for c in case.calls["webhook"])

    def per(count: int) -> str:
        return f"{count / released:.2f}" if released else "-"

    return [
        case.name,
        f"{len(case.jobs)} ({released} released)",
        f"{released / (last - first):.2f}" if released and last > first else "-",
        f"{percentile(latencies, 0.5):.2f} / {percentile(latencies, 0.99):.2f}",
        f"{percentile(answers, 0.5):.0f} / {percentile(answers, 0.99):.0f}",
        duplicates,
        f"{per(puts_api)} + {per(puts_worker)}",
        per(tsa),
        per(hooks),
        len(case.jobs) - len(done),
    ]


HEADER = (
    "case",
    "jobs",
    "jobs/s",
    "latency p50 / p99 s",
    "upload answer p50 / p99 ms",
    "duplicates suppressed",
    "S3 PUTs / doc (API + worker)",
    "TSA calls / doc",
    "webhook calls / doc",
    "stuck",
)


def ends(case: Case) -> str:
    counted = Counter(
        f"{job.state}{f' {job.failure_code}' if job.failure_code else ''}"
        + (f" (Temporal closed the run: {job.closed_as})" if job.closed_as else "")
        for job in case.jobs
    )
    notified = Counter(job.notification or "-" for job in case.jobs)
    return (
        f"{case.name}: "
        + ", ".join(f"{n} {what}" for what, n in counted.most_common())
        + ("; notification: " + ", ".join(f"{n} {what}" for what, n in notified.most_common()))
    )


async def report_slowdown(stack: Stack, result: Slowdown, samples: list[Sample]) -> None:
    case = result.case
    print(f"\n{ends(case)}")
    for line in await released_checks(stack, case):
        print(line)
    drained = [job.ended_at for job in case.jobs if job.ended_at is not None]
    stuck = len(case.jobs) - len(drained)
    drain = max(drained) - result.marks["recovered"] if drained else float("nan")
    print(f"backlog drained: {'yes' if not stuck else f'NO, {stuck} not ended'}, {drain:.1f} s after the recovery")
    retried = increase(samples, case.started, case.finished, "docjobs_activity_attempts", "stage", outcome="retrying")
    failed = increase(samples, case.started, case.finished, "docjobs_activity_attempts", "stage", outcome="failed")
    expired = increase(samples, case.started, case.finished, "docjobs_lease_expirations", "stage")
    print(f"lease expirations (docjobs_lease_expirations): {dict(expired) or 0}")
    print(f"stage attempts retrying: {retried or 0}; failed: {failed or 0} (docjobs_activity_attempts)")
    windows = (
        ("before", case.started, result.marks["slow"]),
        ("slow", result.marks["slow"], result.marks["fail"]),
        ("failing", result.marks["fail"], result.marks["recovered"]),
        ("recovered", result.marks["recovered"], case.finished),
    )
    print("mean s a stage attempt took (docjobs_stage_duration_seconds, increase of _sum / _count between scrapes):")
    for name, since, until in windows:
        print(f"  {name}: {stage_means(samples, since, until) or '-'}")
    print("\nalerts of ops/prometheus/alerts.yml, evaluated on the worker's metrics every 5 s over the case:")
    print_table(("rule", "measured", "result"), alerts(samples, case.started, case.finished))
    for title, steps in (
        ("a slow job", result.slow_steps),
        ("a job stuck on the failing provider", result.stuck_steps),
    ):
        needed = next((index + 1 for index, step in enumerate(steps) if step.names_cause), None)
        print(f"\noperator investigation, {title}: {len(steps)} commands, {sum(s.seconds for s in steps):.1f} s")
        for step in steps:
            print(f"  {step.seconds:5.1f} s  {step.command}  ->  {step.finding}")
        print(f"  the first command whose output names the cause: {needed if needed else 'none'}")


# --- the run -----------------------------------------------------------------------------------------------------


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes and short phases, for development")
    parser.add_argument("--rate", type=float, help="the normal arrival rate (jobs/s); default 0.8 of capacity")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--capacity-jobs", type=int, default=24)
    parser.add_argument("--jobs", type=int, default=150, help="normal traffic: jobs")
    parser.add_argument("--keys", type=int, default=60, help="retry burst: logical requests (each sent 3 times)")
    parser.add_argument("--delay", type=float, default=2.0, help="slowdown: seconds the providers add")
    parser.add_argument("--warm-seconds", type=float, default=15.0)
    parser.add_argument("--slow-seconds", type=float, default=60.0)
    parser.add_argument("--fail-seconds", type=float, default=60.0)
    parser.add_argument("--slowdown-load", type=float, default=0.5, help="slowdown arrivals, of the normal rate")
    parser.add_argument("--drain-timeout", type=float, default=900.0)
    parser.add_argument("--cases", default="normal,burst,slowdown", help="which cases, comma-separated")
    parser.add_argument("--keep", type=Path, help="a new folder for the run's files (the worker log), kept after it")
    if parser.parse_known_args()[0].quick:  # other defaults; a flag given still wins
        parser.set_defaults(
            capacity_jobs=8,
            jobs=12,
            keys=8,
            warm_seconds=3.0,
            slow_seconds=10.0,
            fail_seconds=12.0,
            drain_timeout=300.0,
        )
    return parser.parse_args()


async def rehearse(stack: Stack, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    samples: list[Sample] = []
    stop = asyncio.Event()
    scraper = asyncio.create_task(scrape(stack.metrics_url, samples, stop))
    measured = None if args.rate else await capacity(stack, args.capacity_jobs)
    rate = args.rate or LOAD * (measured or 0.0)
    told = f"{measured:.2f} jobs/s ({CAPACITY_CLIENTS} closed-loop clients)" if measured else "not measured (--rate)"
    print(f"capacity: {told}")
    print(f"normal arrival rate: {rate:.2f} jobs/s (open loop, Poisson, seed {args.seed})", flush=True)
    wait = 300.0
    cases = []
    if "normal" in args.cases:
        cases.append(await normal(stack, rate, args.jobs, rng, wait))
    if "burst" in args.cases:
        cases.append(await retry_burst(stack, rate, args.keys, rng, wait))
    slow = None
    if "slowdown" in args.cases:
        phases = Phases(args.warm_seconds, args.slow_seconds, args.fail_seconds, args.delay, args.drain_timeout)
        slow = await slowdown(stack, rate * args.slowdown_load, phases, rng)
        cases.append(slow.case)
    stop.set()
    await scraper
    print()
    print_table(HEADER, (row(case) for case in cases))
    print()
    for case in cases:
        print(ends(case))
        for note in case.notes:
            print(f"  {note}")
    if slow is not None:
        await report_slowdown(stack, slow, samples)


def main() -> int:
    args = arguments()
    with ExitStack() as folder:
        if args.keep:
            args.keep.mkdir(parents=True)
        where = args.keep or Path(folder.enter_context(tempfile.TemporaryDirectory(prefix="docjobs-rehearsal-")))
        with stack(where) as running:
            asyncio.run(rehearse(running, args))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
