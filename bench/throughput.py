"""Throughput of small documents: the raw tool loop and docjobs side by side, in one run.

    .venv/bin/python bench/throughput.py [--runs 3] [--docs 16] [--uploads 200] [--api-workers 1]

Starts a throwaway Temporal dev server, one `worker.py` and `starter.py serve` (own processes, loopback), a
fresh tenant, then measures, each `--runs` times (medians printed):

* the raw loop: per document, a pikepdf overlay watermark, a pyHanko PAdES signature and its validation, in
  this plain process, one document after the other (what the tools cost with nothing around them);
* Temporal's floor (bench/floor.py): a workflow of as many no-op activities as a job runs, in this process's own
  worker, as many at once as docjobs' clients;
* docjobs: `--docs` documents through the HTTP API by 1, 2 and 4 concurrent clients, each uploading one
  document and waiting for its job to end (a long poll on the workflow's result, no status polling), with
  1-page and 10-page documents; jobs/s, the floor and the raw loop side by side, and the ratio to the floor and
  the raw work in series (floor + work: what docjobs would reach if it added nothing to either);
* the latency of one job alone, upload to `succeeded`;
* a profile of a 1-page job from its history: events, workflow tasks, each activity's queue and run time;
  and the CPU seconds per job of the dev server, the worker, its document children (with their tools) and
  the API (from /proc, over the 1-client runs);
* uploads/s accepted (8 clients, unique keys, 100 KB PDF) while the worker works through them, and with no
  worker running, each beside the server's bare `start_workflow` rate measured right after it (8 callers, as
  many starts): the ratio is what the API keeps of what the server could start;
* peak memory (VmHWM) of the worker, its children, the dev server and the API.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import pikepdf
from floor import JOB_STEPS, in_series, start_rate, workflow_rate
from harness import (
    api_answers,
    cpu_seconds,
    descendants,
    dev_server_env,
    environ,
    free_port,
    hundred_kb_pdf,
    peak_rss_mib,
    wait_for,
)
from pyhanko.keys import load_cert_from_pemder
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign import fields, signers
from pyhanko.sign.validation import validate_pdf_signature
from pyhanko_certvalidator import ValidationContext
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from docjobs.settings.tenants import add_tenant
from docjobs.signing.dev_ca import DEV_CA_FILE, DEV_CERT_FILE, DEV_KEY_FILE, ensure_dev_signer
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import ensure_dev_server, stop_dev_server
from docjobs.temporal.settings import TemporalSettings
from tests.fixtures.samples import make_sample_pdf

REPO = Path(__file__).resolve().parent.parent
CLIENTS = (1, 2, 4)
PAGES = (1, 10)
BENCH_RUNNING_JOBS = 100_000


# --- the raw loop ------------------------------------------------------------------------------------------


class RawLoop:
    """pikepdf overlay watermark + pyHanko PAdES sign + pyHanko validate, per document, in this process."""

    def __init__(self, signer_dir: Path, folder: Path) -> None:
        key, cert, ca_file = (str(signer_dir / name) for name in (DEV_KEY_FILE, DEV_CERT_FILE, DEV_CA_FILE))
        self.signer = signers.SimpleSigner.load(key, cert, ca_chain_files=(ca_file,))  # type: ignore[no-untyped-call]
        ca = load_cert_from_pemder(ca_file)  # type: ignore[no-untyped-call]
        self.context = ValidationContext(trust_roots=[ca], allow_fetching=False, revocation_mode="soft-fail")
        self.stamp = folder / "stamp.pdf"
        with pikepdf.new() as stamp:
            stamp.add_blank_page(page_size=(612, 792))
            page = stamp.pages[0]
            font = stamp.make_indirect(
                pikepdf.Dictionary(Type=pikepdf.Name.Font, Subtype=pikepdf.Name.Type1, BaseFont=pikepdf.Name.Helvetica)
            )
            page.Resources = pikepdf.Dictionary(Font=pikepdf.Dictionary(F1=font))
            page.Contents = stamp.make_stream(b"BT /F1 48 Tf 0.8 g 120 400 Td (CONFIDENTIAL) Tj ET")
            stamp.save(self.stamp)

    def one(self, source: Path) -> None:
        with pikepdf.open(source) as pdf, pikepdf.open(self.stamp) as stamp:
            form = pdf.copy_foreign(stamp.pages[0].as_form_xobject())
            for page in pdf.pages:
                page.add_overlay(form, None)  # None: the whole page
            stamped = io.BytesIO()
            pdf.save(stamped)
        stamped.seek(0)
        meta = signers.PdfSignatureMetadata(field_name="Signature", subfilter=fields.SigSeedSubFilter.PADES)
        signed = signers.sign_pdf(IncrementalPdfFileWriter(stamped), meta, signer=self.signer)
        reader = PdfFileReader(signed)
        status = validate_pdf_signature(reader.embedded_signatures[0], self.context)
        if not status.bottom_line:
            raise RuntimeError("the raw loop's own signature does not validate")

    def rate(self, source: Path, documents: int) -> float:
        self.one(source)  # warm-up: imports, caches
        started = time.perf_counter()
        for _ in range(documents):
            self.one(source)
        return documents / (time.perf_counter() - started)


# --- processes and /proc ------------------------------------------------------------------------------------


@dataclass
class Processes:
    server: int
    worker: int
    api: list[int]
    seen_children: set[int] = field(default_factory=set)
    gone_children_cpu: float = 0.0  # recycled children: what they used before they ended
    last_children_cpu: dict[int, float] = field(default_factory=dict)

    def children(self) -> list[int]:
        return descendants(self.worker)

    def sample(self) -> dict[str, float]:
        children = self.children()
        now = {child: cpu_seconds(child) for child in children}
        for child, used in self.last_children_cpu.items():
            if child not in now:
                self.gone_children_cpu += used
        self.last_children_cpu = now
        return {
            "server": cpu_seconds(self.server),
            "worker": cpu_seconds(self.worker, with_reaped=False),
            "children": sum(now.values()) + self.gone_children_cpu,
            "api": sum(cpu_seconds(pid) for pid in self.api),
        }


def api_pids(api: subprocess.Popen[bytes]) -> list[int]:
    return [api.pid, *descendants(api.pid)]


# --- docjobs through the API --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bench:
    base: str
    key: str
    settings: TemporalSettings


async def one_job(http: httpx.AsyncClient, client: Client, bench: Bench, body: bytes) -> float:
    started = time.perf_counter()
    headers = {"Authorization": f"Bearer {bench.key}", "Idempotency-Key": uuid.uuid4().hex}
    response = await http.post("/v1/jobs", content=body, headers=headers)
    if response.status_code != 202:
        raise RuntimeError(f"upload answered {response.status_code}: {response.text[:200]}")
    result = await JobClient(client, bench.settings).handle(response.json()["job_id"]).result()
    if result.state.value != "succeeded":
        raise RuntimeError(f"a bench job ended {result.state.value} ({result.failure_code})")
    return time.perf_counter() - started


async def jobs_rate(bench: Bench, body: bytes, documents: int, clients: int) -> tuple[float, list[float]]:
    client = await connect(bench.settings)
    latencies: list[float] = []
    remaining = list(range(documents))

    async def loop(http: httpx.AsyncClient) -> None:
        while remaining:
            remaining.pop()
            latencies.append(await one_job(http, client, bench, body))

    async with httpx.AsyncClient(base_url=bench.base, timeout=300) as http:
        await one_job(http, client, bench, body)  # warm-up: the children, the caches, the connections
        started = time.perf_counter()
        await asyncio.gather(*(loop(http) for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return documents / elapsed, latencies


async def last_job_profile(bench: Bench) -> dict[str, Any]:
    """From the newest job's history: event counts, workflow tasks, each activity's queue and run time."""
    client = await connect(bench.settings)
    newest = None
    async for execution in client.list_workflows(f"TaskQueue = '{bench.settings.task_queue}'", limit=1):
        newest = execution.id
    assert newest is not None
    events = [event async for event in client.get_workflow_handle(newest).fetch_history_events()]
    kinds = Counter(EventType.Name(event.event_type).removeprefix("EVENT_TYPE_") for event in events)
    at = {event.event_id: event.event_time.ToDatetime() for event in events}
    scheduled: dict[int, str] = {}
    activities: list[tuple[str, float, float]] = []
    started_at: dict[int, Any] = {}
    task_seconds = 0.0
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[event.event_id] = event.activity_task_scheduled_event_attributes.activity_type.name
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started_at[event.activity_task_started_event_attributes.scheduled_event_id] = at[event.event_id]
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            scheduled_id = event.activity_task_completed_event_attributes.scheduled_event_id
            begun = started_at[scheduled_id]
            queued = (begun - at[scheduled_id]).total_seconds()
            ran = (at[event.event_id] - begun).total_seconds()
            activities.append((scheduled[scheduled_id], queued, ran))
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            task_scheduled = event.workflow_task_completed_event_attributes.scheduled_event_id
            task_seconds += (at[event.event_id] - at[task_scheduled]).total_seconds()
    wall = (events[-1].event_time.ToDatetime() - events[0].event_time.ToDatetime()).total_seconds()
    return {"events": len(events), "kinds": kinds, "activities": activities, "task_seconds": task_seconds, "wall": wall}


async def upload_rate(bench: Bench, body: bytes, uploads: int, concurrency: int = 8) -> float:
    remaining = list(range(uploads))

    async def loop(http: httpx.AsyncClient) -> None:
        while remaining:
            remaining.pop()
            headers = {"Authorization": f"Bearer {bench.key}", "Idempotency-Key": uuid.uuid4().hex}
            response = await http.post("/v1/jobs", content=body, headers=headers)
            if response.status_code != 202:
                raise RuntimeError(f"upload answered {response.status_code}")

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=bench.base, timeout=120, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(loop(http) for _ in range(concurrency)))
        return uploads / (time.perf_counter() - started)


Acceptance = dict[str, list[float]]  # "uploads": HTTP uploads/s, "starts": bare `start_workflow` calls/s


def measure_acceptance(bench: Bench, server: int, body: bytes, uploads: int, into: Acceptance) -> None:
    """One measurement of uploads/s and of the server's bare start rate, the same number of each, one after the other
    (a second apart): the bare start rate is the most the API could accept on this server at that moment."""
    into["uploads"].append(asyncio.run(upload_rate(bench, body, uploads)))
    time.sleep(1)
    into["starts"].append(asyncio.run(bare_start_rate(bench.settings, server, uploads)))
    time.sleep(1)


async def bare_start_rate(settings: TemporalSettings, server: int, starts: int) -> float:
    return (await start_rate(await connect(settings), server, starts))[0]


async def floor_rate(settings: TemporalSettings, server: int, jobs: int, at_once: int) -> float:
    """Temporal's floor for a job's shape on this server (bench/floor.py): `JOB_STEPS` no-op activities a workflow."""
    return (await workflow_rate(await connect(settings), server, JOB_STEPS, jobs, at_once))[0]


# --- the run ------------------------------------------------------------------------------------------------


@contextmanager
def environment(folder: Path) -> Iterator[dict[str, str]]:
    env = {
        **os.environ,
        **dev_server_env(folder, "docjobs-throughput"),
        "DOCJOBS_TENANTS_FILE": str(folder / "tenants.json"),
        # The uploads of a measurement are jobs of one tenant, far more at once than its share of 20 running jobs:
        # the share is measured by tests/test_quotas.py, not here.
        "DOCJOBS_TENANT_MAX_RUNNING_JOBS": str(BENCH_RUNNING_JOBS),
    }
    with environ(env):
        yield env


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="repeat every measurement; medians are printed")
    parser.add_argument("--docs", type=int, default=16, help="documents per docjobs measurement")
    parser.add_argument("--uploads", type=int, default=200)
    parser.add_argument("--api-workers", type=int, default=1, help="`starter.py serve --workers N`")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="docjobs-throughput-") as tmp, environment(Path(tmp)) as env:
        folder = Path(tmp)
        settings = TemporalSettings.from_env()
        key = add_tenant(folder / "tenants.json", "bench")
        documents = {}
        for pages in PAGES:
            documents[pages] = folder / f"p{pages}.pdf"
            make_sample_pdf(documents[pages], pages=pages, marker="throughput bench")
        upload_body = hundred_kb_pdf(folder / "upload.pdf", "throughput bench")
        ensure_dev_signer(folder / "raw-signer")
        raw = RawLoop(folder / "raw-signer", folder)
        server_pid = ensure_dev_server(settings).pid
        assert server_pid is not None
        log = (folder / "worker.log").open("ab")
        worker = subprocess.Popen(
            [sys.executable, str(REPO / "worker.py")], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        port = free_port()
        serve = [sys.executable, str(REPO / "starter.py"), "serve", "--port", str(port)]
        if args.api_workers > 1:
            serve += ["--workers", str(args.api_workers)]
        api = subprocess.Popen(serve, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bench = Bench(f"http://127.0.0.1:{port}", key, settings)
        try:
            wait_for(lambda: b"worker ready" in (folder / "worker.log").read_bytes(), worker, "the worker")
            wait_for(lambda: api_answers(bench.base), api, "the API")
            processes = Processes(server_pid, worker.pid, api_pids(api))
            raw_rates: dict[int, list[float]] = {pages: [] for pages in PAGES}
            floors: dict[int, list[float]] = {clients: [] for clients in CLIENTS}
            rates: dict[tuple[int, int], list[float]] = {}
            latencies: list[float] = []
            cpu: dict[str, list[float]] = {}
            profiles = []
            for run in range(args.runs):
                for clients in CLIENTS:
                    floors[clients].append(asyncio.run(floor_rate(settings, server_pid, args.docs, clients)))
                for pages in PAGES:
                    raw_rates[pages].append(raw.rate(documents[pages], args.docs))
                    body = documents[pages].read_bytes()
                    for clients in CLIENTS:
                        before = processes.sample()
                        rate, took = asyncio.run(jobs_rate(bench, body, args.docs, clients))
                        after = processes.sample()
                        rates.setdefault((pages, clients), []).append(rate)
                        if pages == 1 and clients == 1:
                            latencies += took
                            for name in before:
                                cpu.setdefault(name, []).append((after[name] - before[name]) / (args.docs + 1))
                            profiles.append(asyncio.run(last_job_profile(bench)))
                print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
            # Acceptance beside the server's bare start rate, both while the worker works through the uploads' jobs
            # (each upload is a job: after the first measurement the backlog keeps it busy), then with no worker.
            busy: Acceptance = {"uploads": [], "starts": []}
            idle: Acceptance = {"uploads": [], "starts": []}
            for _ in range(args.runs):
                measure_acceptance(bench, server_pid, upload_body, args.uploads, busy)
            memory = {
                "worker": peak_rss_mib(worker.pid),
                "children (each, max)": max((peak_rss_mib(pid) for pid in processes.children()), default=0.0),
                "dev server": peak_rss_mib(server_pid),
                "API": sum(peak_rss_mib(pid) for pid in api_pids(api)),
            }
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
            for _ in range(args.runs):
                measure_acceptance(bench, server_pid, upload_body, args.uploads, idle)
            report(args, raw_rates, floors, rates, latencies, cpu, profiles, busy, idle, memory)
        finally:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(timeout=60)
            api.send_signal(signal.SIGINT)
            api.wait(timeout=30)
            stop_dev_server(settings)
    return 0


def report(
    args: argparse.Namespace,
    raw_rates: dict[int, list[float]],
    floors: dict[int, list[float]],
    rates: dict[tuple[int, int], list[float]],
    latencies: list[float],
    cpu: dict[str, list[float]],
    profiles: list[dict[str, Any]],
    busy: Acceptance,
    idle: Acceptance,
    memory: dict[str, float],
) -> None:
    print(f"\n{args.runs} runs, {args.docs} documents per docjobs measurement; medians")
    print(f"floor: a workflow of {JOB_STEPS} no-op activities, as many at once as docjobs' clients (bench/floor.py)")
    print("floor + work: the floor and the raw loop in series, what docjobs would reach if it added nothing\n")
    print(
        "| pages | clients | docjobs docs/s | floor wf/s | raw docs/s | floor + work | ratio to floor + work | to raw |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for pages in PAGES:
        raw = median(raw_rates[pages])
        for clients in CLIENTS:
            rate, floor = median(rates[(pages, clients)]), median(floors[clients])
            both = in_series(floor, raw)
            print(
                f"| {pages} | {clients} | {rate:.2f} | {floor:.2f} | {raw:.2f} | {both:.2f} | {rate / both:.2f} "
                f"| {rate / raw:.2f} |"
            )
    print(f"\n| acceptance ({args.uploads} uploads of 100 KB, 8 clients) | uploads/s | bare starts/s | ratio |")
    print("|---|---|---|---|")
    for label, measured in (("worker busy", busy), ("no worker", idle)):
        uploads, starts = median(measured["uploads"]), median(measured["starts"])
        print(f"| {label} | {uploads:.1f} | {starts:.1f} | {uploads / starts:.2f} |")
    print(f"\none 1-page job, upload to succeeded: median {median(latencies):.3f} s, ", end="")
    print(f"p90 {sorted(latencies)[int(0.9 * (len(latencies) - 1))]:.3f} s ({len(latencies)} jobs)")
    print("\nCPU seconds per 1-page job (1 client):")
    for name, values in cpu.items():
        print(f"  {name:<10} {median(values):.3f}")
    profile = profiles[len(profiles) // 2]
    print(f"\nprofile of one 1-page job: {profile['events']} history events, wall {profile['wall']:.3f} s")
    print("  " + ", ".join(f"{kind.lower()} {count}" for kind, count in profile["kinds"].most_common()))
    print(f"  workflow tasks: {profile['task_seconds']:.3f} s scheduled-to-completed in total")
    for name, queued, ran in profile["activities"]:
        print(f"  activity {name:<9} queued {queued * 1000:7.1f} ms, ran {ran * 1000:7.1f} ms")
    print("\npeak memory (VmHWM, MiB): " + ", ".join(f"{name} {mib:.0f}" for name, mib in memory.items()))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
