"""Temporal's own floor under a docjobs job, on the server a benchmark runs: what the SDK and the server cost with
no document work, no payloads of size, no isolation (bench/temporal_floor.py, bench/throughput.py).

* `workflow_rate`: a workflow that only runs `steps` no-op activities in sequence (the shape of a job: one per
  stage and wrap-up step) in an in-process worker, `at_once` at a time.
* `start_rate`: bare `start_workflow` calls by 8 concurrent callers, nothing polling the queue: what every
  accepted upload costs the server before any work, and the most an HTTP API in front of it could accept.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from harness import cpu_seconds
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

QUEUE = "temporal-floor"
START_CALLERS = 8
JOB_STEPS = 8  # a 1-page standard job's activities and local activities (6 + 2), all run here as activities


@activity.defn
def nothing(step: int) -> int:
    return step


@workflow.defn(sandboxed=False)
class Steps:
    @workflow.run
    async def run(self, steps: int) -> int:
        for step in range(steps):
            await workflow.execute_activity(nothing, step, start_to_close_timeout=timedelta(seconds=30))
        return steps


async def start_rate(client: Client, server: int, starts: int) -> tuple[float, float]:
    """(starts/s, server CPU ms per start) of `starts` workflow starts by 8 concurrent callers."""
    remaining = list(range(starts))

    async def caller() -> None:
        while remaining:
            remaining.pop()
            await client.start_workflow("Unserved", id=uuid.uuid4().hex, task_queue=f"{QUEUE}-unserved")

    await client.start_workflow("Unserved", id=uuid.uuid4().hex, task_queue=f"{QUEUE}-unserved")  # warm-up
    cpu, began = cpu_seconds(server), time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(START_CALLERS)))
    return starts / (time.perf_counter() - began), (cpu_seconds(server) - cpu) / starts * 1000


async def workflow_rate(client: Client, server: int, steps: int, jobs: int, at_once: int) -> tuple[float, float, float]:
    """(workflows/s, server CPU s per workflow, this process's CPU s per workflow: worker and client), with a worker
    of its own on `QUEUE` for the time of the measurement."""
    remaining = list(range(jobs))

    async def caller() -> None:
        while remaining:
            remaining.pop()
            await client.execute_workflow(Steps.run, steps, id=uuid.uuid4().hex, task_queue=QUEUE)

    with ThreadPoolExecutor(max(at_once, 1)) as threads:
        worker = Worker(
            client,
            task_queue=QUEUE,
            workflows=[Steps],
            activities=[nothing],
            activity_executor=threads,
            max_concurrent_activities=max(at_once, 1),
        )
        async with worker:
            await client.execute_workflow(Steps.run, steps, id=uuid.uuid4().hex, task_queue=QUEUE)  # warm-up
            server_cpu, own_cpu, began = cpu_seconds(server), time.process_time(), time.perf_counter()
            await asyncio.gather(*(caller() for _ in range(at_once)))
            elapsed = time.perf_counter() - began
    return jobs / elapsed, (cpu_seconds(server) - server_cpu) / jobs, (time.process_time() - own_cpu) / jobs


def in_series(*rates: float) -> float:
    """The rate of steps done one after the other, each at its own rate: the floor and the raw work in series is
    what a job could reach if docjobs added nothing to either."""
    return 1 / sum(1 / rate for rate in rates)
