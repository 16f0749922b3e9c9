"""A docjobs worker: the job workflow (async) with its evidence and clean-up (local activities), the stage
activities (threads, bounded per task queue), and their document work (limited child processes). The root
`worker.py` runs `main`; `starter.py run` and `serve` run `serving` in their own process.

    python worker.py [--task-queue NAME] [--queue general|ocr|batch]... [--metrics-port N] [--log-format text|json]
                     [--deployment NAME [--build-id ID]]

With `--deployment` (DOCJOBS_DEPLOYMENT) the worker is one version (`--build-id`, DOCJOBS_BUILD_ID; by default
the package version plus the git commit) of that Worker Deployment, and every job it starts is pinned to it.

Stops cleanly on SIGTERM or Ctrl-C: it stops polling, lets running stages finish for a short grace
period, then cancels them (their leases lapse and another worker takes over).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import time
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import cache, partial
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.adapter import StageActivities
from activities.archive import ArchiveActivities
from activities.batch import BatchActivities
from activities.evidence import EvidenceActivities
from activities.metrics import LeaseExpiries
from activities.notify import NotifyActivities
from activities.ocr_page_ranges import OcrPageRangeActivities
from activities.publish import PublishActivities
from activities.release import ReleaseActivities
from activities.resolve import ResolveActivities
from docjobs.domain import stage_specs as specs
from docjobs.domain.contract import DEADLINE_GRACE
from docjobs.domain.stage_specs import ActivitySpec, StageQueue, StageSpec, spec_of
from docjobs.isolation import gate_work
from docjobs.isolation.child_pool import ChildLimits, ChildPool
from docjobs.isolation.confine import Confinement, SandboxUnavailable, check_sandbox
from docjobs.isolation.entries import AnyStageEntry
from docjobs.isolation.stage_work import PRELOAD_FOR, STAGE_ENTRIES
from docjobs.isolation.tenant_pools import TenantPools, sibling_pools
from docjobs.settings.config import ConfigError
from docjobs.settings.policies import PolicyBook
from docjobs.signing.environment import check_sign_levels
from docjobs.store.sweep import sweep_stale
from docjobs.temporal.batches import batch_task_queue
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.deployments import deployment_config
from docjobs.temporal.job_gauges import active_job_gauges
from docjobs.temporal.logs import LOG_FORMATS, configure_logging, default_log_format, identify
from docjobs.temporal.metrics import metrics_runtime
from docjobs.temporal.settings import TemporalSettings
from workflows.archive import ArchiveWorkflow
from workflows.batch_job import DocumentBatchWorkflow
from workflows.document_job import DocumentJobWorkflow
from workflows.stages import activity_name

log = logging.getLogger("docjobs.worker")
REPO = Path(__file__).resolve().parent.parent  # the checkout: pyproject.toml and git
HEARTBEAT_THROTTLE = timedelta(seconds=2)


QUEUES = ("general", "ocr", "batch")
STAGE_QUEUES = ("general", "ocr")  # the queues whose stages open documents (threads and document children)
# The served queue (its threads and document children) that runs the activities of each stage queue: the page ranges
# of long documents run on the OCR workers, with threads of their own (`create_workers`).
SERVED_BY = {StageQueue.GENERAL: "general", StageQueue.OCR: "ocr", StageQueue.OCR_PAGE_RANGES: "ocr"}
BATCH_SLOTS = 200  # concurrent batch steps: async waits for jobs, no thread or child each
# Concurrent wrap-up steps (evidence and cleanup, the job workflow's local activities), on threads of their own
# beside the general queue's stage threads, so neither waits for the other. Each takes milliseconds (signing an
# envelope, deleting staged blobs), and the workflow task of a job waits for its own.
WRAP_UP_SLOTS = 4
# Concurrent `notify` deliveries, on a queue (`<task queue>-notify`) and threads of their own: a callback that is
# slow to answer (up to the activity's 30 s start-to-close per attempt) holds one of these, never a stage's slot
# or thread. Each is one HTTPS POST with a 10 s timeout per connect, send and read.
NOTIFY_SLOTS = 4


def workflow_runner() -> SandboxedWorkflowRunner:
    """The workflow sandbox, without re-importing the workflow's own package for every run (a third of a
    small job's workflow CPU). `workflows` imports only pure modules and keeps no state between runs; the
    replay tests run it in the full sandbox, whose restrictions would stop a non-deterministic call there."""
    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules("workflows"))


Pools = ChildPool | TenantPools
GATE_POOLS = "release_gate"  # the key of the release gate's pools among the queues' (not a queue: `sign` runs it)


def served_by(spec: ActivitySpec[Any, Any]) -> str:
    """The served queue that registers `spec`'s activity: a stage's, as its spec's queue says; every other activity
    of the job workflow, `general` (`evidence` and `cleanup` run as the workflow's local activities: they must be on
    the worker that runs it)."""
    return SERVED_BY[spec.queue] if isinstance(spec, StageSpec) else "general"


Made = Callable[[Pools], Callable[..., Any]]  # an activity implementation, made with its served queue's pool


def implementations(settings: TemporalSettings, pools: Mapping[str, Pools]) -> dict[str, Made]:
    """How each activity of the job workflow is made, by name: every stage declared by a `StageEntry` by the one
    adapter (activities/adapter.py); the others by the class of what the worker does itself (resolve, publish and
    clean-up, evidence, notify), `sign` (the worker holds the key and runs the release gate) and `ocr_chunk` (its
    page checkpoints, and the worker's cores shared between ranges)."""
    store, workdir, data_dir = settings.blob_store(), settings.work_dir, settings.data_dir
    gate = pools.get(GATE_POOLS)

    def adapted(entry: AnyStageEntry) -> Made:
        return lambda pool: StageActivities(store, workdir, pool, data_dir).activity(entry)

    made: dict[str, Made] = {entry.name: adapted(entry) for entry in STAGE_ENTRIES}
    made |= {
        specs.RESOLVE.name: lambda pool: ResolveActivities(store, settings).resolve,
        specs.SIGN.name: lambda pool: ReleaseActivities(store, workdir, pool, data_dir, gate=gate).sign,
        specs.PUBLISH.name: lambda pool: PublishActivities(store, workdir).publish,
        specs.CLEANUP.name: lambda pool: PublishActivities(store, workdir).cleanup,
        specs.EVIDENCE.name: lambda pool: EvidenceActivities(store, workdir, data_dir).evidence,
        specs.NOTIFY.name: lambda pool: NotifyActivities(settings.tenants_file).notify,
        specs.OCR_PAGE_RANGE.name: lambda pool: OcrPageRangeActivities(store, workdir, pool).ocr_chunk,
        specs.OPEN_ARCHIVE.name: lambda pool: ArchiveActivities(store, workdir, pool, data_dir).open_archive,
        specs.RENEW_ARCHIVE.name: lambda pool: ArchiveActivities(store, workdir, pool, data_dir).renew_archive,
    }
    return made


def stage_activities(settings: TemporalSettings, pools: Mapping[str, Pools]) -> dict[str, list[Callable[..., Any]]]:
    """The activity implementations each served stage queue (of the keys of `pools`) registers, in the order of the
    specs (docjobs/domain/stage_specs.py, `JOB_ACTIVITIES`), on the queue each spec says (`served_by`), each made
    with that queue's pool and registered under its spec's name (the name of its declaration in workflows/stages.py).
    """
    made = implementations(settings, pools)
    return {
        queue: [made[spec.name](pools[queue]) for spec in specs.JOB_ACTIVITIES if served_by(spec) == queue]
        for queue in STAGE_QUEUES
        if queue in pools
    }


def page_range_activities(served: Sequence[Callable[..., Any]]) -> list[Callable[..., Any]]:
    """The parts of a long document's OCR among the OCR queue's activities (their specs' queue: `ocr_chunks`): served
    on the page ranges' queue too (the OCR queue keeps them for the jobs that schedule them there: accepted before
    that queue existed)."""
    return [
        function
        for function in served
        if isinstance(spec := spec_of(function), StageSpec) and spec.queue is StageQueue.OCR_PAGE_RANGES
    ]


def create_workers(
    client: Client,
    settings: TemporalSettings,
    pools: dict[str, Pools],
    threads: dict[str, ThreadPoolExecutor],
    queues: Sequence[str] = QUEUES,
) -> list[Worker]:
    """One worker per served task queue: `general` runs the job workflow (with its local activities) and the
    light stages, `notify` (beside `general`) the tenant callbacks, `ocr` the OCR stage and (beside it, with
    slots of its own) the page ranges of long documents, `batch` the batch workflow and its steps. See `serving`."""
    parts = WorkerParts(client, settings, threads, worker_options(client, settings))
    served = stage_activities(settings, pools)
    workers = []
    if "general" in served:
        workers += parts.general_workers(served["general"])
    if "ocr" in served:
        workers += parts.ocr_workers(served["ocr"])
    if "batch" in queues:
        workers.append(parts.batch_worker())
    return workers


def worker_options(client: Client, settings: TemporalSettings) -> dict[str, Any]:
    """What every stage queue's worker shares."""
    return {
        "graceful_shutdown_timeout": timedelta(seconds=5),
        # Heartbeats carry page progress: send them often enough for a live progress bar.
        "max_heartbeat_throttle_interval": HEARTBEAT_THROTTLE,
        "default_heartbeat_throttle_interval": HEARTBEAT_THROTTLE,
        "interceptors": [LeaseExpiries(client)] if settings.metrics_port else [],
        **versioning(settings),
    }


def versioning(settings: TemporalSettings) -> dict[str, Any]:
    """A worker of a Worker Deployment runs as its version. An unversioned one names its build itself, the package
    version and commit (`default_build_id`), which its tasks are recorded with: the SDK's default hashes the
    bytecode of every module loaded, a fifth of a worker's start (0.37 s of 2)."""
    if settings.deployment is not None:
        return {"deployment_config": deployment_config(settings)}
    return {"build_id": default_build_id()}


@dataclass(frozen=True)
class WorkerParts:
    """What the workers of one process are made of: the client, the settings, each queue's threads (by name) and
    the options every stage queue's worker shares."""

    client: Client
    settings: TemporalSettings
    threads: dict[str, ThreadPoolExecutor]
    common: dict[str, Any]

    def general_workers(self, served: list[Callable[..., Any]]) -> list[Worker]:
        """The job workflow with the light stages, and the tenant callbacks on a queue of their own."""
        jobs = Worker(
            self.client,
            task_queue=self.settings.task_queue,
            workflows=[DocumentJobWorkflow, ArchiveWorkflow],
            workflow_runner=workflow_runner(),
            activities=served,
            activity_executor=self.threads["general"],
            max_concurrent_activities=self.settings.activity_threads,
            max_concurrent_local_activities=WRAP_UP_SLOTS,
            **self.common,
        )
        # `notify` is registered on the general queue too, for the jobs accepted before it had its own queue.
        notify = [function for function in served if activity_name(function) == specs.NOTIFY.name]
        return [jobs, self.activity_worker(self.settings.notify_task_queue, notify, "notify", NOTIFY_SLOTS)]

    def ocr_workers(self, served: list[Callable[..., Any]]) -> list[Worker]:
        """The OCR stage, and a long document's page ranges with slots of their own, so that they never hold every
        slot of the OCR queue while a short document's `ocr` waits (docs/ocr.md, "Fair across jobs")."""
        return [
            self.activity_worker(self.settings.ocr_task_queue, served, "ocr", self.settings.ocr_activity_threads),
            self.activity_worker(
                self.settings.ocr_chunk_task_queue,
                page_range_activities(served),
                "ocr_chunks",
                self.settings.ocr_chunk_threads,
            ),
        ]

    def activity_worker(
        self, task_queue: str, activities: list[Callable[..., Any]], threads: str, slots: int
    ) -> Worker:
        """A worker of activities only, on `task_queue`: as many slots as the threads set aside for it."""
        return Worker(
            self.client,
            task_queue=task_queue,
            activities=activities,
            activity_executor=self.threads[threads],
            max_concurrent_activities=slots,
            **self.common,
        )

    def batch_worker(self) -> Worker:
        """The batch workflow and its steps (through the job client: no document child)."""
        batch = BatchActivities(JobClient(self.client, self.settings), self.settings)
        return Worker(
            self.client,
            task_queue=batch_task_queue(self.settings),
            workflows=[DocumentBatchWorkflow],
            workflow_runner=workflow_runner(),
            activities=[
                batch.pin_policy,
                batch.start_documents,
                batch.await_jobs,
                batch.cancel_jobs,
                batch.record_outcomes,
            ],
            max_concurrent_activities=BATCH_SLOTS,
            graceful_shutdown_timeout=self.common["graceful_shutdown_timeout"],
            **versioning(self.settings),
        )


@asynccontextmanager
async def serving(
    client: Client, settings: TemporalSettings, queues: Sequence[str] = QUEUES
) -> AsyncIterator[list[Worker]]:
    """Workers for `queues`, running until the block ends, then shut down together (draining running stages).

    Each queue has its own threads, exactly as many as the stages it may run at once (plus, on the general
    queue, the local activities'), so an accepted stage never waits for a thread (its lease running out
    meanwhile) and OCR cannot take the other stages' threads. `notify` has a queue and threads of its own
    (NOTIFY_SLOTS) beside the general queue's, so a slow callback never holds a stage's slot; so have the page
    ranges of long documents' OCR (DOCJOBS_OCR_CHUNK_THREADS) beside the OCR queue's, sharing its children's pools.
    The document work runs in limited child processes: per queue, a pool of them for each tenant (made on its
    first task), confined to its sandbox (docjobs/isolation/confine.py) unless DOCJOBS_SANDBOX=unconfined.
    """
    limits = ChildLimits(memory_mb=settings.stage_memory_mb, stall_seconds=settings.stall_seconds)
    slots = {"general": settings.activity_threads, "ocr": settings.ocr_activity_threads}
    wrap_up = {"general": WRAP_UP_SLOTS, "ocr": 0}
    stage_queues = [queue for queue in queues if queue in STAGE_QUEUES]
    confined = sandbox_ready(settings) if stage_queues else False

    def tenant_pool(queue: str, home: Path, confinement: Confinement | None) -> ChildPool:
        if confinement is not None:
            confinement = replace(confinement, max_work_mb=settings.sandbox_work_mb)
        return ChildPool(
            limits,
            home=home,
            warm=1,
            recycle_after=settings.child_recycle_after,
            confinement=confinement,
            preload=PRELOAD_FOR[queue],  # its queue's stages' modules only: its zygote is ready sooner
        )

    pools: dict[str, Pools] = {
        queue: TenantPools(partial(tenant_pool, queue), settings.work_dir / queue, confined=confined)
        for queue in stage_queues
    }
    if "general" in pools:  # the release gate's sandboxes, beside the general queue's (docjobs/isolation/gate_work.py)
        pools[GATE_POOLS] = sibling_pools(pools["general"], gate_work.ENTRIES_MODULE)
    threads = {
        queue: ThreadPoolExecutor(slots[queue] + wrap_up[queue], thread_name_prefix=f"{queue}-stage")
        for queue in stage_queues
    }
    if "general" in stage_queues:
        threads["notify"] = ThreadPoolExecutor(NOTIFY_SLOTS, thread_name_prefix="notify")
    if "ocr" in stage_queues:
        threads["ocr_chunks"] = ThreadPoolExecutor(settings.ocr_chunk_threads, thread_name_prefix="ocr-chunks")
    try:
        workers = create_workers(client, settings, pools, threads, queues)
        async with AsyncExitStack() as stack:
            for worker in workers:
                await stack.enter_async_context(worker)
            yield workers
    finally:
        for pool in pools.values():
            pool.close()
        for executor in threads.values():
            executor.shutdown(wait=False, cancel_futures=True)


def sandbox_ready(settings: TemporalSettings) -> bool:
    """True when the document children will run confined. A worker that cannot set up the boundary refuses to
    start (ConfigError), unless DOCJOBS_SANDBOX=unconfined says so explicitly, which it says at every start."""
    if settings.sandbox == "unconfined":
        log.warning(
            "DOCJOBS_SANDBOX=unconfined: document children run WITHOUT their sandbox (the worker's network, file "
            "system and user); a document that takes over a parser reaches everything this worker can"
        )
        return False
    try:
        check_sandbox(settings.work_dir / "sandbox-check")
    except SandboxUnavailable as error:
        raise ConfigError(
            f"the document sandbox cannot be set up: {error}; install bubblewrap (make deps), or set "
            "DOCJOBS_SANDBOX=unconfined to run without it"
        ) from None
    return True


def sweep_leftovers(settings: TemporalSettings) -> None:
    """Remove what crashed attempts and uploads left behind (plaintext documents), older than any live job: in the
    work folder, and in each tenant's work root there (where the document stages keep their attempts).

    Never raises: what document children left is theirs to shape (modes, depth, links), and nothing they leave may
    stop a worker from starting, for every tenant it serves. What cannot be swept is logged and left for the next
    start (`sweep_stale` logs each entry it leaves)."""
    try:
        longest = max(policy.deadline_seconds for policy in PolicyBook.load(settings.policy_file).policies.values())
        older_than = timedelta(seconds=longest) + DEADLINE_GRACE
        tenant_roots = [root for queue in STAGE_QUEUES for root in (settings.work_dir / queue).glob("tenant-*")]
    except Exception as error:  # noqa: BLE001 - the start goes on: serving reports a bad policy file itself
        log.warning("the start-up sweep of leftovers did not run: %s", type(error).__name__)
        return
    sweep_stale(settings.work_dir, older_than, keep=STAGE_QUEUES)
    for folder in (settings.spool_dir, *tenant_roots):
        sweep_stale(folder, older_than)


def refuse_unsignable_policies(settings: TemporalSettings) -> None:
    """A worker that signs does not start (ConfigError) when a policy asks a signature level it cannot make
    (`check_sign_levels`). A policy file that does not load is left to each job's `resolve` (policy.invalid)."""
    try:
        book = PolicyBook.load(settings.policy_file)
    except ConfigError:
        return
    check_sign_levels(book.policies.values())


def process_age() -> float:
    """Seconds since this process started (the kernel's count: the interpreter's start and imports included)."""
    started_ticks = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return max(uptime - started_ticks / os.sysconf("SC_CLK_TCK"), 0.0)


class StartClock:
    """What a worker's start spent its seconds on, for the "worker ready" line: a worker killed or started by an
    autoscaler serves nothing until it is ready, so its log says where that time went."""

    def __init__(self) -> None:
        self._phases = [("start and imports", process_age())]
        self._mark = time.monotonic()

    def lap(self, phase: str) -> None:
        now = time.monotonic()
        self._phases.append((phase, now - self._mark))
        self._mark = now

    def __str__(self) -> str:
        total = sum(seconds for _, seconds in self._phases)
        return f"{total:.1f} s (" + ", ".join(f"{phase} {seconds:.2f}" for phase, seconds in self._phases) + ")"


async def serve(settings: TemporalSettings, queues: Sequence[str]) -> None:
    clock = StartClock()
    if "general" in queues:
        refuse_unsignable_policies(settings)
    clock.lap("policies")
    runtime = metrics_runtime(settings)
    client = await connect(settings, runtime)
    identify(client.identity)
    clock.lap("connection")
    gauges = runtime.metric_meter if runtime is not None and "general" in queues else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await asyncio.to_thread(sweep_leftovers, settings)
    clock.lap("leftovers swept")
    async with serving(client, settings, queues) as workers, active_job_gauges(client, settings, gauges):
        clock.lap("sandbox check and pollers")
        served = ", ".join(worker.task_queue for worker in workers)
        if runtime is not None:
            log.info("metrics at http://%s:%s/metrics", settings.metrics_host, settings.metrics_port)
        version = f", deployment {settings.deployment} build {settings.build_id}" if settings.deployment else ""
        log.info("worker ready: task queues %s at %s%s, in %s", served, settings.address, version, clock)
        await stop.wait()
        log.info("stopping: draining running stages")
    log.info("worker stopped")


@cache
def default_build_id() -> str:
    """The package version, plus the git commit of this checkout when there is one (`0.1.0+1a2b3c4d5e6f`)."""
    version = str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return version
    return f"{version}+{commit}" if commit else version


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Run a docjobs worker.")
    parser.add_argument("--task-queue", help="general task queue (default: DOCJOBS_TASK_QUEUE or 'docjobs')")
    parser.add_argument(
        "--queue",
        action="append",
        choices=QUEUES,
        help="serve only these queues (repeatable; default: all). The OCR queue is DOCJOBS_OCR_TASK_QUEUE or "
        "the general queue's name + '-ocr' (with its '-chunks' queue for long documents); the batch queue is the "
        "general queue's name + '-batch'",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on this port (default: DOCJOBS_METRICS_PORT; host DOCJOBS_METRICS_HOST)",
    )
    parser.add_argument(
        "--deployment", help="run as a version of this Worker Deployment, its jobs pinned (default: DOCJOBS_DEPLOYMENT)"
    )
    parser.add_argument(
        "--build-id",
        help="this worker's version in the deployment (default: DOCJOBS_BUILD_ID, else package version + git commit)",
    )
    parser.add_argument("--log-format", choices=LOG_FORMATS, help="log lines (default: DOCJOBS_LOG_FORMAT or text)")
    return parser


def main() -> int:
    parser = build_parser()
    args = parser.parse_args()
    try:
        configure_logging(args.log_format or default_log_format())
    except ConfigError as error:
        parser.error(str(error))
    try:
        settings = TemporalSettings.from_env()
        if args.task_queue:
            settings = replace(settings, task_queue=args.task_queue)
        if args.metrics_port is not None:
            settings = replace(settings, metrics_port=args.metrics_port or None)
        settings = replace(settings, deployment=args.deployment or settings.deployment)
        if settings.deployment is not None:
            settings = replace(settings, build_id=args.build_id or settings.build_id or default_build_id())
        asyncio.run(serve(settings, args.queue or QUEUES))
    except ConfigError as error:
        log.error("%s", error)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
