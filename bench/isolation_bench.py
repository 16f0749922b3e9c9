"""What isolation costs: each stage's document work in this process versus in a warm limited child, and what
it buys: two 50-page jobs at once on a 2-core worker versus one at a time.

    .venv/bin/python bench/isolation_bench.py [--runs 5]

Part 1 calls the stage functions of `docjobs.isolation.stage_work` (render in structure mode, sign, verify) on a
generated 1-page and 100-page PDF, directly ("in process", as the stages ran before), through a `ChildPool`
with one warm child that is reused (the worker's path: a JSON work order, page progress, a JSON result), and
through a pool that forks a fresh child for every task (`recycle_after=1`, one child forked ahead).
Part 1b: what starting a child costs, spawned (a new Python importing the stage work, as the pool did before
its zygote) or forked from the zygote, and the CPU of a 1-page job's three stages each way (this process's
CPU plus the zygote's, its children's included).
Part 2 runs real jobs (embedded dev server, an in-process worker with 2 stage threads and 2 warm children):
two 50-page jobs submitted together, then the same two one after the other. Prints medians.
Part 3 (`--only sandbox` runs it alone): what the tenant boundary costs (issue 23). The 1-page stages through an
unconfined pool whose child is reused (as before), a bubblewrap-confined pool of one tenant whose child is reused
(pools per tenant), and a confined pool that forks a fresh child per task (a fresh child per task, the choice);
then a 1-page job end to end through two real workers, DOCJOBS_SANDBOX=unconfined and bwrap, their jobs
interleaved, each timed to its workflow's result.
Part 4 (`--only gate` runs it alone): what the release gate's own sandbox costs a 1-page job (docs/release-gates.md).
The gate's checks on a 1-page document prepared for signing, called here, then as `sign` runs them: the worker's
copy put in a folder of the tenant's root and handed over, read by a fresh child of the gate's own bwrap-confined
zygote (docjobs/isolation/gate_work.py). The difference is the sandbox's cost (target: at most 30 ms); the gate's
zygote, one more per tenant, is also counted in memory (PSS of its sandbox: bwrap, the zygote, its spare child).
Part 5 (`--only tenants` runs it alone): a tenant's first 1-page job on a worker against its second (issue 42,
item 2), tenant after tenant on one confined in-process worker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import children_cpu_seconds, dev_server_env, median_ms
from pydantic import BaseModel

from docjobs.domain.models import ReleaseGateSettings, RenderSettings, VerifySettings
from docjobs.domain.policy import SanitizePolicy, WatermarkPolicy
from docjobs.domain.stage_cost import CpuBudget
from docjobs.domain.states import JobState
from docjobs.isolation import gate_work
from docjobs.isolation.child_pool import ChildLimits, ChildPool
from docjobs.isolation.confine import Confinement
from docjobs.isolation.gate_work import GateWork
from docjobs.isolation.stage_work import ENTRIES, RenderWork, SignWork, VerifyWork
from docjobs.isolation.tenant_pools import hand_over, sibling_pools
from docjobs.pdf.release_gate import GateReport, read_gate
from docjobs.signing.config import TrustAnchors
from docjobs.signing.dev_ca import ensure_dev_signer
from docjobs.signing.sign import ReleaseSigner
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.devserver import stop_dev_server
from docjobs.temporal.settings import TemporalSettings
from docjobs.worker import serving
from tests.fixtures.samples import make_sample_pdf

CPU = CpuBudget(base_seconds=600, per_page_seconds=10)


def stage_orders(folder: Path, pages: int) -> dict[str, BaseModel]:
    document = folder / f"doc-{pages}.pdf"
    make_sample_pdf(document, pages=pages)
    signer = ensure_dev_signer(folder / "signing")
    rendered, signed = folder / f"rendered-{pages}.pdf", folder / f"signed-{pages}.pdf"
    render = RenderWork(
        source=document,
        output=rendered,
        workdir=folder,
        settings=RenderSettings(watermark=WatermarkPolicy(text="CONFIDENTIAL"), max_pages=2000),
    )
    ENTRIES["render"].run(render, lambda done, total: None)
    key = ReleaseSigner(signer)  # the worker's half: the child prepares, the worker signs
    prepared, reserved = folder / f"prepared-{pages}.pdf", key.bytes_reserved("bench")
    sign = SignWork(
        source=rendered,
        output=prepared,
        certificate_pem=key.certificate_pem.decode(),
        bytes_reserved=reserved,
        tenant="bench",
        visible=False,
        allow_signed_input=False,
    )
    done = ENTRIES["sign"].run(sign, lambda done, total: None)
    signed.unlink(missing_ok=True)
    key.finish(prepared, signed, done.byte_range, tenant="bench", bytes_reserved=reserved)
    verify = VerifyWork(
        source=document,
        output=signed,
        workdir=folder,
        trust=TrustAnchors.of(signer),
        settings=VerifySettings(
            text_layer_kept=True, watermark_text="CONFIDENTIAL", pages_may_turn=False, sanitize=SanitizePolicy()
        ),
    )
    return {"render": render, "sign": sign, "verify": verify}


def stage_row(pools: list[ChildPool], runs: int, entry: str, work: BaseModel) -> list[float]:
    """Median milliseconds of one stage's work: called here, then handed to a child of each pool."""
    stage = ENTRIES[entry]
    done_type = type(stage.run(work, lambda done, total: None))
    direct = median_ms(runs, lambda: stage.run(work, lambda done, total: None))

    def through(pool: ChildPool) -> float:
        return median_ms(runs, lambda: pool.run(entry, work, done_type, cpu=CPU))

    return [direct, *map(through, pools)]


def stage_table(runs: int, folder: Path) -> None:
    reused = ChildPool(ChildLimits(), home=folder / "children", warm=1)
    fresh = ChildPool(ChildLimits(), home=folder / "children", warm=1, recycle_after=1)
    reused.start()
    fresh.start()
    print("| stage | pages | in process (ms) | in a warm reused child (ms) | in a fresh forked child (ms) |")
    print("|---|---|---|---|---|")
    try:
        for pages in (1, 100):
            for entry, work in stage_orders(folder, pages).items():
                direct, warm, forked = stage_row([reused, fresh], runs, entry, work)
                print(f"| {entry} | {pages} | {direct:.1f} | {warm:.1f} | {forked:.1f} |")
    finally:
        reused.close()
        fresh.close()


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process, of the children it reaped and of those still alive (theirs too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
    children = [
        child for task in Path(f"/proc/{pid}/task").iterdir() for child in (task / "children").read_text().split()
    ]
    return own + sum(tree_cpu_seconds(int(child)) for child in children)


def job_cpu_ms(pool: ChildPool, runs: int, orders: dict[str, BaseModel]) -> tuple[float, float]:
    """Mean CPU and wall milliseconds of one 1-page job's three stages through `pool` (after a warm-up job)."""
    done_types = {entry: type(ENTRIES[entry].run(work, lambda done, total: None)) for entry, work in orders.items()}

    def job() -> None:
        for entry, work in orders.items():
            pool.run(entry, work, done_types[entry], cpu=CPU)

    job()
    zygote = pool.zygote_pid()
    assert zygote is not None
    cpu, wall = time.process_time() + tree_cpu_seconds(zygote), time.perf_counter()
    for _ in range(runs):
        job()
    time.sleep(0.5)  # the last children reaped
    cpu = time.process_time() + tree_cpu_seconds(zygote) - cpu
    return cpu * 1000 / runs, (time.perf_counter() - wall - 0.5) * 1000 / runs


def spawn_cpu_ms(runs: int) -> tuple[float, float]:
    """CPU and wall milliseconds of starting a document child as the pool did before its zygote: a new Python,
    limited, importing the stage work."""
    command = [sys.executable, "-P", "-c", "import docjobs.isolation.stage_work"]
    env = {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    before, wall = children_cpu_seconds(), time.perf_counter()
    for _ in range(runs):
        subprocess.run(command, env=env, check=True)
    cpu = children_cpu_seconds() - before
    return cpu * 1000 / runs, (time.perf_counter() - wall) * 1000 / runs


def start_table(runs: int, folder: Path) -> None:
    orders = stage_orders(folder, 1)
    tasks = len(orders)
    direct_cpu = time.process_time()
    for _ in range(runs):
        for entry, work in orders.items():
            ENTRIES[entry].run(work, lambda done, total: None)
    direct = (time.process_time() - direct_cpu) * 1000 / runs
    rows = {}
    for name, recycle_after in (("reused", 50), ("fresh", 1)):
        pool = ChildPool(ChildLimits(), home=folder / "children", warm=1, recycle_after=recycle_after)
        pool.start()
        try:
            rows[name] = job_cpu_ms(pool, runs * 4, orders)
        finally:
            pool.close()
    spawn, spawn_wall = spawn_cpu_ms(max(2, runs // 2))
    fork = (rows["fresh"][0] - rows["reused"][0]) / tasks
    print("| starting a document child | CPU ms |")
    print("|---|---|")
    print(f"| spawned: a new Python importing the stage work (wall {spawn_wall:.0f} ms) | {spawn:.0f} |")
    print(f"| forked from the zygote, for a task (fresh minus reused, per task) | {fork:.1f} |")
    print()
    print(f"| a 1-page job's {tasks} stages (render, sign, verify) | CPU ms per job | wall ms per job |")
    print("|---|---|---|")
    print(f"| in process | {direct:.0f} | |")
    print(f"| warm child reused up to 50 tasks (fork amortised) | {rows['reused'][0]:.0f} | {rows['reused'][1]:.0f} |")
    print(f"| fresh forked child per task | {rows['fresh'][0]:.0f} | {rows['fresh'][1]:.0f} |")
    old = rows["reused"][0] + tasks * spawn / 50
    print(f"| before the zygote: reused up to 50 tasks, spawned (computed: reused + {tasks}/50 spawns) | {old:.0f} | |")


async def job_seconds(
    jobs: JobClient, documents: list[Path], policy_name: str, together: bool, tenant: str = "default"
) -> float:
    """Seconds from the first submit to the last job's end, awaited as the workflow's result (a status poll would
    see the end only at its next poll: its backoff, up to 0.5 s, once made differences that were not there)."""

    async def one(document: Path) -> None:
        submitted = await jobs.submit(document, policy_name, tenant=tenant, key=f"bench-{uuid.uuid4().hex}")
        status = await asyncio.wait_for(jobs.handle(submitted.job_id).result(), timeout=900)
        if status.state is not JobState.SUCCEEDED:
            raise RuntimeError(f"a benchmark job ended {status.state}")

    started = time.perf_counter()
    if together:
        await asyncio.gather(*(one(document) for document in documents))
    else:
        for document in documents:
            await one(document)
    return time.perf_counter() - started


async def concurrency_table(runs: int, folder: Path) -> None:
    os.environ.update({**dev_server_env(folder), "DOCJOBS_ACTIVITY_THREADS": "2"})
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


def sandbox_stage_row(
    entry: str,
    done_type: type[BaseModel],
    direct: BaseModel,
    before: tuple[ChildPool, BaseModel],
    confined: list[tuple[ChildPool, BaseModel]],
    runs: int,
    folder: Path,
) -> list[float]:
    def through(pool: ChildPool, work: BaseModel) -> float:  # `folder`: what a confined child may write (Landlock)
        return median_ms(runs, lambda: pool.run(entry, work, done_type, cpu=CPU, folder=folder))

    in_process = median_ms(runs, lambda: ENTRIES[entry].run(direct, lambda done, total: None))
    return [in_process, through(*before), *(through(pool, work) for pool, work in confined)]


def sandbox_stage_table(runs: int, folder: Path) -> None:
    """Part 3a: the 1-page stages through an unconfined reused child, a confined reused one, a confined fresh one
    (each on its own copy of the files: a root worker's sandbox writes as its own uid)."""
    direct_orders = stage_orders(folder / "direct", 1)
    done_types = {
        entry: type(ENTRIES[entry].run(work, lambda done, total: None)) for entry, work in direct_orders.items()
    }
    root = folder / "tenant"
    root.mkdir()
    orders = stage_orders(root, 1)
    uid = Confinement(root).uid
    if uid != os.geteuid():
        for path in [root, *root.rglob("*")]:
            os.chown(path, uid, uid)
    before = ChildPool(ChildLimits(), home=folder / "before", warm=1)
    before_orders = stage_orders(folder / "before", 1)
    reused = ChildPool(ChildLimits(), home=root, warm=1, confinement=Confinement(root))
    reused.recycle_after = 50  # measured only: a confined child's hard CPU limit makes the worker use fresh ones
    fresh = ChildPool(ChildLimits(), home=root, warm=1, confinement=Confinement(root))
    for pool in (before, reused, fresh):
        pool.start()
    print(
        "| 1-page stage | in process (ms) | unconfined, child reused (before) | bwrap, per-tenant pool, child reused |"
        " bwrap, fresh child per task (chosen) |"
    )
    print("|---|---|---|---|---|")
    try:
        totals = [0.0] * 4
        for entry, work in orders.items():
            row = sandbox_stage_row(
                entry,
                done_types[entry],
                direct_orders[entry],
                (before, before_orders[entry]),
                [(reused, work), (fresh, work)],
                runs,
                root,
            )
            totals = [total + value for total, value in zip(totals, row, strict=True)]
            print(f"| {entry} | " + " | ".join(f"{value:.1f}" for value in row) + " |")
        print("| render + sign + verify | " + " | ".join(f"{value:.1f}" for value in totals) + " |")
    finally:
        for pool in (before, reused, fresh):
            pool.close()


def spread(samples: list[float]) -> str:
    """Median and quartiles of milliseconds: `median (q1 to q3)`."""
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return f"{median:.0f} ({q1:.0f} to {q3:.0f})"


async def sandbox_job_table(runs: int, folder: Path) -> None:
    """Part 3b: a 1-page job end to end (standard policy: render, sign, verify, publish, evidence) through two real
    in-process workers on one dev server, each with a task queue of its own: DOCJOBS_SANDBOX=unconfined and bwrap.
    Their jobs alternate (the order flips every round), so what else loads the machine loads both alike; after a
    warm-up job each that starts the tenant's pool."""
    os.environ.update(dev_server_env(folder))
    document = folder / "one-page.pdf"
    make_sample_pdf(document, pages=1)
    base = TemporalSettings.from_env()
    modes = ("unconfined", "bwrap")
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        client = await connect(base)
        async with contextlib.AsyncExitStack() as stack:
            jobs = {}
            for mode in modes:
                settings = dataclasses.replace(base, sandbox=mode, task_queue=f"bench-{mode}")
                await stack.enter_async_context(serving(client, settings))
                jobs[mode] = JobClient(client, settings)
            for mode in modes:
                await job_seconds(jobs[mode], [document], "standard", together=False)  # warm-up: the tenant's pool
            for run in range(runs):
                for mode in modes if run % 2 == 0 else modes[::-1]:
                    times[mode].append(await job_seconds(jobs[mode], [document], "standard", together=False) * 1000)
    finally:
        stop_dev_server(base)
    rounds = zip(times["unconfined"], times["bwrap"], strict=True)
    difference = [confined - unconfined for unconfined, confined in rounds]
    print(f"| a 1-page job end to end (standard policy), {runs} runs each, interleaved | median ms (quartiles) |")
    print("|---|---|")
    print(f"| DOCJOBS_SANDBOX=unconfined (children reused, as before) | {spread(times['unconfined'])} |")
    print(f"| DOCJOBS_SANDBOX=bwrap (per-tenant sandbox, fresh child per task) | {spread(times['bwrap'])} |")
    median_difference = statistics.median(times["bwrap"]) - statistics.median(times["unconfined"])
    print(f"| difference of the medians | {median_difference:+.0f} |")
    print(f"| difference within each round (bwrap minus unconfined) | {spread(difference)} |")


async def tenants_table(runs: int, folder: Path) -> None:
    """Part 5: a tenant's first 1-page job on a worker against its second (issue 42, item 2: at most 100 ms more).
    One in-process worker, confined (bwrap), warmed by one job of another tenant; then `runs` tenants new to it,
    one after the other, each a first job (its sandboxes made: the general queue's and the release gate's
    zygotes) and a second, one after the other, standard policy."""
    os.environ.update(dev_server_env(folder))
    document = folder / "tenants-one-page.pdf"
    make_sample_pdf(document, pages=1)
    settings = dataclasses.replace(TemporalSettings.from_env(), sandbox="bwrap", task_queue="bench-tenants")
    first, second = [], []
    try:
        client = await connect(settings)
        async with serving(client, settings):
            jobs = JobClient(client, settings)
            await job_seconds(jobs, [document], "standard", together=False, tenant="warm-up")
            for number in range(runs):
                tenant = f"tenant-{number}-{uuid.uuid4().hex[:6]}"
                first.append(await job_seconds(jobs, [document], "standard", together=False, tenant=tenant) * 1000)
                second.append(await job_seconds(jobs, [document], "standard", together=False, tenant=tenant) * 1000)
    finally:
        stop_dev_server(settings)
    more = [one - two for one, two in zip(first, second, strict=True)]
    print(f"| a tenant's 1-page jobs on a worker (standard policy), {runs} tenants | median ms (quartiles) |")
    print("|---|---|")
    print(f"| its first job (its sandboxes made) | {spread(first)} |")
    print(f"| its second job | {spread(second)} |")
    print(f"| the first's more, tenant by tenant (target: 100) | {spread(more)} |")


def sandbox_pss_mb(pid: int) -> float:
    """Proportional set size (MiB) of a process and every process below it: what it adds to the machine's memory."""
    total = 0.0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) / 1024
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += sum(sandbox_pss_mb(int(child)) for child in (task / "children").read_text().split())
    return total


def gate_table(runs: int, folder: Path) -> None:
    """Part 4: the release gate on a 1-page prepared document, in process and in its own confined sandbox."""
    root = folder / "gate-tenant"
    root.mkdir()
    sign = stage_orders(root, 1)["sign"]
    assert isinstance(sign, SignWork)
    prepared = sign.output  # rendered with the watermark, prepared with its empty hole
    uid = Confinement(root).uid
    if uid != os.geteuid():
        for path in [root, *root.rglob("*")]:
            os.chown(path, uid, uid)
    settings = ReleaseGateSettings(watermark_text="CONFIDENTIAL")
    stages = ChildPool(ChildLimits(), home=root, warm=1, confinement=Confinement(root))  # as the worker makes it
    gate = sibling_pools(stages, gate_work.ENTRIES_MODULE)
    assert isinstance(gate, ChildPool)
    gate.start()

    def in_sandbox() -> GateReport:  # what `sign` does (activities/release.py, `_release_gate`), the judging aside
        with tempfile.TemporaryDirectory(dir=root, prefix="release-gate-") as name:
            own = Path(name)
            shutil.copyfile(prepared, own / "prepared.pdf")
            hand_over(own, gate.confinement)
            work = GateWork(document=own / "prepared.pdf", settings=settings)
            return gate.run(gate_work.GATE_ENTRY, work, GateReport, cpu=CPU, max_pages=1, folder=own)

    try:
        report = in_sandbox()
        assert not report.loaded_forbidden and report.watermark_missing == [], report
        direct = median_ms(runs, lambda: read_gate(prepared, settings))
        sandboxed = median_ms(runs, in_sandbox)  # back to back: a gate may wait for its spare's fork
        apart = []
        for _ in range(runs):  # as between jobs: the spare forked for the next gate is ready when it comes
            time.sleep(0.2)
            started = time.perf_counter()
            in_sandbox()
            apart.append((time.perf_counter() - started) * 1000)
        spaced = statistics.median(apart)
        zygote = gate.zygote_pid()
        memory = sandbox_pss_mb(zygote) if zygote is not None else float("nan")
    finally:
        gate.close()
    print(f"| the release gate on a 1-page prepared document, {runs} runs | median ms |")
    print("|---|---|")
    print(
        f"| its checks in process (pypdf, pyHanko: the dictionary, pages, active content, watermark) | {direct:.1f} |"
    )
    print(f"| in its own sandbox, back to back: copy, hand-over, a fresh child of its bwrap zygote | {sandboxed:.1f} |")
    print(f"| in its own sandbox, 0.2 s apart (its spare child forked ahead, as between jobs) | {spaced:.1f} |")
    print(
        f"| what the sandbox adds to a 1-page job, back to back / apart (target: 30) | {sandboxed - direct:+.1f}"
        f" / {spaced - direct:+.1f} |"
    )
    print(f"| the gate's sandbox per tenant, in memory (PSS: bwrap, zygote, spare child) | {memory:.0f} MiB |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--only",
        choices=["sandbox", "gate", "tenants"],
        help="run only part 3 (the tenant boundary), 4 (the release gate) or 5 (a tenant's first job)",
    )
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if options.only == "gate":
        with tempfile.TemporaryDirectory(prefix="docjobs-isolation-bench-") as tmp:
            gate_table(max(options.runs, 20), Path(tmp))
        return
    if options.only == "tenants":
        with tempfile.TemporaryDirectory(prefix="docjobs-isolation-bench-") as tmp:
            asyncio.run(tenants_table(max(options.runs, 4), Path(tmp)))
        return
    if options.only == "sandbox":
        with tempfile.TemporaryDirectory(prefix="docjobs-isolation-bench-") as tmp:
            sandbox_stage_table(options.runs, Path(tmp))
            print()
            asyncio.run(sandbox_job_table(options.runs, Path(tmp)))
        return
    with tempfile.TemporaryDirectory(prefix="docjobs-isolation-bench-") as tmp:
        stage_table(options.runs, Path(tmp))
        print()
        start_table(options.runs, Path(tmp))
        print()
        asyncio.run(concurrency_table(max(1, options.runs // 2), Path(tmp)))
        print()
        sandbox_stage_table(options.runs, Path(tmp))
        print()
        asyncio.run(sandbox_job_table(options.runs, Path(tmp)))
        print()
        gate_table(max(options.runs, 20), Path(tmp))
        print()
        asyncio.run(tenants_table(max(options.runs, 4), Path(tmp)))


if __name__ == "__main__":
    main()
