"""Accepted uploads per second through the HTTP API, and the latency of the answer.

    .venv/bin/python bench/api_bench.py [--requests 200] [--concurrency 8]

A throwaway Temporal dev server and `starter.py serve` (its own process, on loopback) with a fresh tenant;
no worker runs, so this measures acceptance only: spool, sniff, sha256, store, start-or-get. A 100 KB PDF
is uploaded `--requests` times by `--concurrency` concurrent clients, once with a unique Idempotency-Key per
request (every upload creates a job: 202) and once with one repeated key (one 202, then repeats: 200).
Prints a table: uploads/s, p50 and p99 latency of the answers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from harness import api_answers, dev_server_env, environ, free_port, hundred_kb_pdf, wait_for
from throughput import BENCH_RUNNING_JOBS

from docjobs.settings.tenants import add_tenant
from docjobs.temporal.devserver import ensure_dev_server, stop_dev_server
from docjobs.temporal.settings import TemporalSettings

REPO = Path(__file__).resolve().parent.parent


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def run(
    base: str, key: str, body: bytes, requests: int, concurrency: int, repeated: bool
) -> tuple[float, list[float], dict[int, int]]:
    latencies: list[float] = []
    codes: dict[int, int] = {}
    fixed = f"bench-{uuid.uuid4().hex[:8]}"
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(requests):
        queue.put_nowait(index)

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            queue.get_nowait()
            headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": fixed if repeated else uuid.uuid4().hex}
            started = time.perf_counter()
            response = await http.post("/v1/jobs", content=body, headers=headers)
            latencies.append((time.perf_counter() - started) * 1000)
            codes[response.status_code] = codes.get(response.status_code, 0) + 1

    async with httpx.AsyncClient(base_url=base, timeout=120) as http:
        # warm-up (connections, imports), not counted
        await http.post("/v1/jobs", content=body, headers={"Authorization": f"Bearer {key}"})
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return requests / elapsed, latencies, codes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="docjobs-api-bench-") as tmp:
        folder = Path(tmp)
        env = {
            **os.environ,
            **dev_server_env(folder, "docjobs-api-bench"),
            "DOCJOBS_TENANTS_FILE": str(folder / "tenants.json"),
            "DOCJOBS_TENANT_MAX_RUNNING_JOBS": str(BENCH_RUNNING_JOBS),  # no worker: every upload stays running
        }
        with environ(env):
            settings = TemporalSettings.from_env()
        ensure_dev_server(settings)
        key = add_tenant(folder / "tenants.json", "bench")
        body = hundred_kb_pdf(folder / "bench.pdf", "api bench")
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, str(REPO / "starter.py"), "serve", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_for(lambda: api_answers(base), server, "the API server")
            print(f"{len(body)} bytes per upload, {args.requests} uploads, {args.concurrency} concurrent clients")
            print(f"{'keys':<14} {'uploads/s':>10} {'p50 ms':>8} {'p99 ms':>8}  answers")
            for label, repeated in (("unique", False), ("one repeated", True)):
                rate, latencies, codes = asyncio.run(run(base, key, body, args.requests, args.concurrency, repeated))
                answers = ", ".join(f"{count}x{code}" for code, count in sorted(codes.items()))
                p50, p99 = statistics.median(latencies), percentile(latencies, 0.99)
                print(f"{label:<14} {rate:>10.1f} {p50:>8.1f} {p99:>8.1f}  {answers}")
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)
            stop_dev_server(settings)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
