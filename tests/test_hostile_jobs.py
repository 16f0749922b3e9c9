"""Hostile documents through the real API and a real worker: every upload is answered at once, every job
ends soon with a stable code, the worker and its children stay inside their limits, the API keeps
answering other requests meanwhile, and a normal job afterwards succeeds.

The API runs as its own process (`starter.py serve`), the worker as another one on a queue of their own,
with tight limits: the fixtures come from tests/hostile.py and are made at test time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from docjobs.settings.tenants import add_tenant
from tests import hostile
from tests.conftest import REPO, Env, StartWorker, WorkerProcess, free_port
from tests.fixtures.samples import make_sample_pdf

MEMORY_MB = 512  # each document child's address space
STALL_SECONDS = 15
JOB_SECONDS = 60  # every hostile job ends within this
QUEUE = "docjobs-hostile"
WORKER_RSS_MB = 400  # the worker process itself (its children are measured against MEMORY_MB)
LIMITS = {
    "DOCJOBS_STAGE_MEMORY_MB": str(MEMORY_MB),
    "DOCJOBS_STALL_SECONDS": str(STALL_SECONDS),
    "DOCJOBS_STAGE_BASE_SECONDS": "20",
    "DOCJOBS_STAGE_PER_PAGE_SECONDS": "2",
    "DOCJOBS_ACTIVITY_THREADS": "2",
    "DOCJOBS_MAX_ATTEMPTS": "3",
    "DOCJOBS_TASK_QUEUE": QUEUE,
}


@dataclass(frozen=True)
class Case:
    make: Callable[[], bytes]
    policy: dict[str, object]
    outcomes: frozenset[tuple[str, str | None]]  # (state, failure code) the job may end in


def failed(*codes: str) -> frozenset[tuple[str, str | None]]:
    return frozenset(("failed", code) for code in codes)


SUCCEEDED = frozenset({("succeeded", None)})
STRUCTURE: dict[str, object] = {"name": "standard"}
RASTER: dict[str, object] = {"name": "standard", "mode": "raster"}

CASES: dict[str, Case] = {
    "flate bomb in a page": Case(hostile.flate_bomb_page_stream, STRUCTURE, failed("input.too_complex")),
    "flate bomb in metadata": Case(hostile.flate_bomb_metadata, STRUCTURE, failed("input.too_complex")),
    "flate bomb nobody refers to": Case(hostile.flate_bomb_unreferenced, STRUCTURE, failed("input.too_complex")),
    "a million q/Q pairs": Case(hostile.operator_bomb_page, STRUCTURE, failed("input.too_complex")),
    "one page 200,000 times": Case(hostile.duplicate_page_references, STRUCTURE, failed("input.too_large")),
    "page tree cycle": Case(hostile.page_tree_cycle, STRUCTURE, failed("input.malformed")),
    "outline cycle": Case(hostile.outline_cycle, STRUCTURE, SUCCEEDED | failed("input.malformed")),
    "form field cycle": Case(hostile.form_field_cycle, STRUCTURE, SUCCEEDED | failed("input.malformed")),
    "name tree cycle": Case(hostile.name_tree_cycle, STRUCTURE, SUCCEEDED | failed("input.malformed")),
    "structure tree cycle": Case(hostile.structure_tree_cycle, STRUCTURE, SUCCEEDED | failed("input.malformed")),
    "50,000-deep array": Case(hostile.deep_nested_array, STRUCTURE, failed("input.too_complex")),
    "giant page, structure": Case(hostile.giant_page, STRUCTURE, SUCCEEDED),
    "giant page, raster": Case(hostile.giant_page, RASTER, failed("input.too_complex")),
    "giant page, redaction burn-in": Case(
        lambda: hostile.giant_page(inline_image=True),
        {"name": "standard", "redact_regions": ["1:72,14000,400,14400"]},
        failed("input.too_complex"),
    ),
    "image declaring 10 gigapixels": Case(
        hostile.huge_image_xobject, RASTER, failed("input.too_complex", "input.malformed")
    ),
    "PNG of 400 megapixels": Case(hostile.oversized_png, STRUCTURE, failed("input.too_complex")),
    "regex with catastrophic backtracking": Case(
        hostile.redos_trigger_page, {"name": "standard", "redact": [hostile.REDOS_REGEX]}, SUCCEEDED
    ),
}


@dataclass
class Watch:
    """Samples taken while the hostile jobs run: list latencies and the memory of the worker's processes."""

    list_seconds: list[float] = field(default_factory=list)
    worker_rss_mb: float = 0.0
    child_rss_mb: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children of children too), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, of in parents.items() if of == parent]
        found += children
        frontier += children
    return found


def watch(api: str, key: str, worker: int, samples: Watch) -> None:
    with httpx.Client(base_url=api, timeout=30) as http:
        while not samples.stop.is_set():
            started = time.monotonic()
            response = http.get("/v1/jobs", headers={"Authorization": f"Bearer {key}"})
            assert response.status_code == 200
            samples.list_seconds.append(time.monotonic() - started)
            samples.worker_rss_mb = max(samples.worker_rss_mb, rss_mb(worker))
            samples.child_rss_mb = max([samples.child_rss_mb, *map(rss_mb, descendants(worker))])
            samples.stop.wait(max(0.0, 0.5 - (time.monotonic() - started)))


@pytest.fixture(scope="module")
def hostile_api(
    env: Env, start_worker: StartWorker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, WorkerProcess]]:
    """`starter.py serve` and a worker, both on their own queue with tight limits."""
    tenants = tmp_path_factory.mktemp("hostile-api") / "tenants.json"
    key = add_tenant(tenants, "mallory")
    worker = start_worker(QUEUE, **LIMITS)
    port = free_port()
    api = subprocess.Popen(
        [sys.executable, str(REPO / "starter.py"), "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO,
        env=env.process_env(DOCJOBS_TENANTS_FILE=str(tenants), **LIMITS),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/openapi.json", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert api.poll() is None and time.monotonic() < deadline, "the API did not start"
        time.sleep(0.2)
    yield base, key, worker
    os.killpg(api.pid, signal.SIGTERM)
    api.wait(timeout=20)


async def upload(http: httpx.AsyncClient, key: str, body: bytes, policy: dict[str, object]) -> tuple[str, float]:
    started = time.monotonic()
    response = await http.post(
        "/v1/jobs",
        files={"file": ("upload.bin", body), "policy": (None, json.dumps(policy))},
        headers={"Authorization": f"Bearer {key}", "Idempotency-Key": uuid.uuid4().hex},
    )
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"]), time.monotonic() - started


async def outcome(http: httpx.AsyncClient, key: str, job_id: str, deadline: float) -> tuple[str, str | None]:
    while time.monotonic() < deadline:
        body = (await http.get(f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"})).json()
        if body["state"] in ("succeeded", "failed", "canceled", "quarantined"):
            return str(body["state"]), body.get("failure_code")
        await asyncio.sleep(0.5)
    return "still running", None


async def test_hostile_uploads_end_fast_and_harm_nobody(
    hostile_api: tuple[str, str, WorkerProcess], tmp_path: Path
) -> None:
    base, key, worker = hostile_api
    bodies = {name: case.make() for name, case in CASES.items()}
    samples = Watch()
    watcher = threading.Thread(target=watch, args=(base, key, worker.process.pid, samples), daemon=True)
    watcher.start()
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            accepted = {}
            for name, case in CASES.items():
                job_id, seconds = await upload(http, key, bodies[name], case.policy)
                assert seconds < 1.0, f"{name}: the upload took {seconds:.2f} s to answer"
                accepted[name] = job_id
            deadline = time.monotonic() + JOB_SECONDS
            outcomes = await asyncio.gather(*(outcome(http, key, job, deadline) for job in accepted.values()))
            ended = dict(zip(accepted, outcomes, strict=True))
            wrong = {name: got for name, got in ended.items() if got not in CASES[name].outcomes}
            assert not wrong, f"unexpected outcomes: {wrong}"

            assert worker.process.poll() is None, "the worker died"
            sample = tmp_path / "normal.pdf"
            make_sample_pdf(sample, pages=2, marker="after the storm")
            job_id, _ = await upload(http, key, sample.read_bytes(), STRUCTURE)
            assert await outcome(http, key, job_id, time.monotonic() + JOB_SECONDS) == ("succeeded", None)
    finally:
        samples.stop.set()
        watcher.join(timeout=10)
    assert samples.list_seconds and max(samples.list_seconds) < 1.0, max(samples.list_seconds, default=None)
    assert samples.worker_rss_mb < WORKER_RSS_MB, samples.worker_rss_mb
    assert samples.child_rss_mb < MEMORY_MB, samples.child_rss_mb
