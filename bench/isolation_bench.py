"""What isolation costs: each stage's document work in this process versus in a warm limited child, and what
it buys: two 50-page jobs at once on a 2-core worker versus one at a time.

    .venv/bin/python bench/isolation_bench.py [--runs 5]

Part 1 calls the stage functions of `docjobs.stage_work` (render in structure mode, sign, verify) on a
generated 1-page and 100-page PDF, directly ("in process", as the stages ran before) and through a
`ChildPool` with one warm child (the worker's path: a JSON work order, page progress, a JSON result).
Part 2 runs real jobs (embedded dev server, an in-process worker with 2 stage threads and 2 warm children):
two 50-page jobs submitted together, then the same two one after the other. Prints medians.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pydantic import BaseModel

from docjobs.models import CpuBudget, LimitsPolicy, SanitizePolicy, WatermarkPolicy
from docjobs.policies import PolicyBook
from docjobs.poller import WaitEnd, wait_for_job
from docjobs.sandbox import ChildLimits, ChildPool
from docjobs.signing.dev_ca import ensure_dev_signer
from docjobs.stage_work import ENTRIES, RenderWork, SignWork, VerifyWork
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.settings import TemporalSettings
from tests.fixtures.samples import make_sample_pdf
from worker import serving

CPU = CpuBudget(base_seconds=600, per_page_seconds=10)


def median_ms(runs: int, action: Callable[[], object]) -> float:
    action()  # warm-up
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def stage_orders(folder: Path, pages: int) -> dict[str, BaseModel]:
    document = folder / f"doc-{pages}.pdf"
    make_sample_pdf(document, pages=pages)
    signer = ensure_dev_signer(folder / "signing")
    rendered, signed = folder / f"rendered-{pages}.pdf", folder / f"signed-{pages}.pdf"
    render = RenderWork(
        source=document,
        output=rendered,
        workdir=folder,
        watermark=WatermarkPolicy(text="CONFIDENTIAL"),
        max_pages=2000,
        allow_signed_input=False,
        sanitize=SanitizePolicy(),
        limits=LimitsPolicy(),
    )
    ENTRIES["render"].run(render, lambda done, total: None)
    sign = SignWork(source=rendered, output=signed, signer=signer, visible=False, allow_signed_input=False)
    ENTRIES["sign"].run(sign, lambda done, total: None)
    verify = VerifyWork(
        source=document,
        output=signed,
        workdir=folder,
        signer=signer,
        text_layer_kept=True,
        redact=None,
        watermark_text="CONFIDENTIAL",
        pages_may_turn=False,
        sanitize=SanitizePolicy(),
    )
    return {"render": render, "sign": sign, "verify": verify}


def stage_row(pool: ChildPool, runs: int, entry: str, work: BaseModel) -> tuple[float, float]:
    """Median milliseconds of one stage's work: called here, and handed to a warm child."""
    stage = ENTRIES[entry]
    done_type = type(stage.run(work, lambda done, total: None))
    direct = median_ms(runs, lambda: stage.run(work, lambda done, total: None))
    return direct, median_ms(runs, lambda: pool.run(entry, work, done_type, cpu=CPU))


def stage_table(runs: int, folder: Path) -> None:
    pool = ChildPool(ChildLimits(), home=folder / "children", warm=1)
    pool.start()
    print("| stage | pages | in process (ms) | in a warm child (ms) | isolation cost (ms) |")
    print("|---|---|---|---|---|")
    try:
        for pages in (1, 100):
            for entry, work in stage_orders(folder, pages).items():
                direct, isolated = stage_row(pool, runs, entry, work)
                print(f"| {entry} | {pages} | {direct:.1f} | {isolated:.1f} | {isolated - direct:+.1f} |")
    finally:
        pool.close()


async def job_seconds(jobs: JobClient, documents: list[Path], policy_name: str, together: bool) -> float:
    policy = PolicyBook.load(jobs.settings.policy_file).get(policy_name)

    async def one(document: Path) -> None:
        submitted = await jobs.submit(document, policy, key=f"bench-{uuid.uuid4().hex}")
        result = await wait_for_job(lambda: jobs.status(submitted.job_id), timeout=900, max_polls=10_000, max_delay=0.5)
        if result.end is not WaitEnd.TERMINAL:
            raise RuntimeError("a benchmark job did not end")

    started = time.perf_counter()
    if together:
        await asyncio.gather(*(one(document) for document in documents))
    else:
        for document in documents:
            await one(document)
    return time.perf_counter() - started


async def concurrency_table(runs: int, folder: Path) -> None:
    os.environ.update(
        {
            "DOCJOBS_DATA_DIR": str(folder / "data"),
            "DOCJOBS_TEMPORAL_PORT": str(_free_port()),
            "DOCJOBS_TEMPORAL_UI_PORT": str(_free_port()),
            "DOCJOBS_ACTIVITY_THREADS": "2",
        }
    )
    settings = TemporalSettings.from_env()
    documents = []
    for index in range(2):
        documents.append(folder / f"fifty-{index}.pdf")
        make_sample_pdf(documents[-1], pages=50, marker=f"bench document {index}")
    try:
        client = await connect(settings)
        jobs = JobClient(client, settings)
        async with serving(client, settings):
            await job_seconds(jobs, documents[:1], "standard", together=False)  # warm-up
            together = [await job_seconds(jobs, documents, "standard", together=True) for _ in range(runs)]
            apart = [await job_seconds(jobs, documents, "standard", together=False) for _ in range(runs)]
    finally:
        stop_dev_server(settings)
    both, one_by_one = statistics.median(together), statistics.median(apart)
    print("| two 50-page jobs (standard policy) | median seconds |")
    print("|---|---|")
    print(f"| one at a time | {one_by_one:.2f} |")
    print(f"| both at once | {both:.2f} |")
    print(f"| speed-up (one at a time / at once) | {one_by_one / both:.2f} |")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="docjobs-isolation-bench-") as tmp:
        stage_table(options.runs, Path(tmp))
        print()
        asyncio.run(concurrency_table(max(1, options.runs // 2), Path(tmp)))


if __name__ == "__main__":
    main()
