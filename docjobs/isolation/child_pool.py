"""Document work in limited child processes: a warm pool of them, forked from a zygote, killed at will.

Tenants' bytes are parsed only in these children, never in a worker's own threads. Each pool has one zygote
(docjobs/isolation/sandbox_child.py, started by docjobs/isolation/zygote.py): a process that starts from an
environment built from an allow-list (no codec keys, signing passphrase, AWS or Temporal credentials) in its own
session, limits its own address space (`RLIMIT_AS`, DOCJOBS_STAGE_MEMORY_MB) before importing anything, turns core
dumps off (a core file would hold the document), lowers its CPU priority (nice 10), imports the stage work once and
then forks a child whenever the pool asks. A fork costs milliseconds where starting Python and importing the stage
work costs about half a CPU-second. The zygote never reads a task. Each child

- inherits the zygote's environment and limits (it never had a secret to inherit), so parsing a document never
  slows the API, Temporal or the worker's own threads;
- is its own process group, with a folder of its own as its working directory, HOME and TMPDIR;
- runs one task at a time under a CPU limit (soft `RLIMIT_CPU`): a base budget, grown by a per-page budget as
  soon as the task reports its page count;
- dies with its worker, its tools with it: the worker's death signals the zygote (`PR_SET_PDEATHSIG`; the zygote
  is started by one long-lived thread for that reason), which kills every child's group, and each child, told of
  the zygote's death the same way, kills its own group too.

The parent keeps the lease: it relays the child's page progress, and kills the child's group on cancel, on a
lost lease, and when the child makes no progress for DOCJOBS_STALL_SECONDS. Running out of memory or CPU, a
stall and a structure nested too deep all end as `input.too_complex`, whose message names the limit. A zygote
found dead is replaced by the next child asked of the pool.

The child talks in JSON lines, each a message of docjobs/isolation/protocol.py that the parent validates (its
result against the task's result model; a line beyond 16 MiB, unreadable or malformed is a crash:
docjobs/isolation/child_process.py): a child that was taken over by a hostile document can make its own task fail,
but cannot make the worker run anything. A child is reused for the next task only after a clean success, up to
`recycle_after` tasks (1: a fresh child for every task, nothing of one task's memory or files seen by the next; its
successor is forked as soon as it is taken, so that the next task finds a spare child waiting, not a fork in its
way).

A pool may be confined (`Confinement`, docjobs/isolation/confine.py): its zygote then starts inside a bubblewrap sandbox
(its own network, PID and mount namespaces, only its tenant's work root writable, a bounded tmpfs of its own that
the worker reaches with `work_root`, an unprivileged uid, seccomp),
every limit is hard, and each child serves one task, restricted by Landlock to its attempt's folder (`run`'s
`folder`) and its private one: no other job's folder of the tenant (docjobs/isolation/landlock.py). A spare
child makes its rules while it waits; its task adds only its folder's. `TenantPools`
(docjobs/isolation/tenant_pools.py) keeps one pool per tenant, so that no child ever serves two tenants; the worker
uses it for every queue. Inside the sandbox the zygote reports the pids it sees, and the pool finds the same
processes in its own namespace (`zygote.outer_pid`) before it signals any.

What a task cost (`TaskUsage`) is measured by the child itself (a reused child's kernel account covers all its
tasks) and reported with its answer; for a child that ended without one, the parent derives it from what the
kernel counted when the zygote reaped the child (CPU since its last reported task, its lifetime peak memory).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.stage_cost import CpuBudget
from docjobs.isolation.child_process import POLL_SECONDS, ChildCrashed, ChildProcess, ChildStopped
from docjobs.isolation.confine import Confinement
from docjobs.isolation.protocol import Crash, Failure, Progress, Result, Task, TaskUsage
from docjobs.isolation.sandbox_root import SandboxRoot, SandboxRootGone
from docjobs.isolation.zygote import CODE_ROOT, Spawner

log = logging.getLogger("docjobs.sandbox")  # the name operators filter on: kept across the move

ResultT = TypeVar("ResultT", bound=BaseModel)
ProgressFn = Callable[[int, int], None]
UsageFn = Callable[[TaskUsage], None]

STAGE_ENTRIES = "docjobs.isolation.stage_work"  # the module whose ENTRIES the children serve
DEFAULT_PAGE_CAP = 2000  # a task run without its page cap (the shipped policies' largest max_pages)
RECYCLE_RSS_FRACTION = 0.5  # a child that kept more than this share of its memory limit is not reused
FULL_ROOT_BYTES = 1 << 20  # a sandbox's writable root with less left than this is full (a failed write's end)


@dataclass(frozen=True)
class ChildLimits:
    memory_mb: int = 1536
    stall_seconds: float = 300.0


class ChildPool:
    """Limited child processes for one worker's stages, forked by the pool's zygote; `warm` of them are kept
    forked and idle."""

    def __init__(
        self,
        limits: ChildLimits,
        *,
        home: Path,
        warm: int = 1,
        recycle_after: int = 50,
        entries: str = STAGE_ENTRIES,
        confinement: Confinement | None = None,
        preload: tuple[str, ...] | None = None,
    ) -> None:
        """`preload`: the modules its zygote imports ahead for the stages of its queue (`stage_work.PRELOAD_FOR`);
        None: those of every queue."""
        self.limits = limits
        self.home = home
        self.warm = warm
        # A confined child's CPU limit is hard (it can only be lowered): one task per child.
        self.recycle_after = 1 if confinement is not None else recycle_after
        self.entries = entries
        if confinement is not None and not confinement.code:  # the packages the zygote imports, nothing more
            packages = {CODE_ROOT / "docjobs", CODE_ROOT / entries.split(".")[0]}
            confinement = dataclasses.replace(confinement, code=tuple(sorted(packages)))
        self.confinement = confinement
        self._idle: list[ChildProcess] = []
        self._starting = 0  # children asked of the spawner for the idle list, not there yet
        self._lock = threading.Lock()
        self._spawner = Spawner(limits.memory_mb, entries, home, confinement, preload)
        self._closed = False

    def start(self) -> None:
        """Start the spawner thread, the zygote (its imports) and the warm children; returns once they are."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._spawner.start()
        started = [self._spawner.spawn() for _ in range(self.warm)]
        with self._lock:
            self._idle.extend(started)

    def close(self) -> None:
        """Kill every idle child, then the zygote, which takes the children still running a task with it."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for child in idle:
            child.kill()
        self._spawner.stop()

    @contextlib.contextmanager
    def lease(self, job_id: str, *, with_followers: bool = False) -> Iterator[tuple[ChildPool, Path | None]]:
        """This pool for any job (see `TenantPools` for one per tenant), and where attempts keep their folders: in
        its sandbox's root when confined (`work_root`), else where they do (None). A pool for any job has no
        followers (`with_followers`: TenantPools')."""
        with self.work_root() as root:
            yield self, root.path if root is not None else None

    @contextlib.contextmanager
    def work_root(self) -> Iterator[SandboxRoot | None]:
        """A confined pool's live sandbox's writable root, held while the block runs (docjobs/isolation/sandbox_root.py:
        the only place its children may write, reached by the worker through /proc), its zygote started if it is not
        running; None for an unconfined pool. Raises ChildCrashed if there is none to be had."""
        if self.confinement is None:
            yield None
            return
        root = self._spawner.live_root()
        if root is None:  # no live zygote (it ended, or none was asked for yet): a spare child starts one
            self._adopt_spare(self._spawner.spawn())
            root = self._spawner.live_root()
        if root is None:
            raise ChildCrashed("the sandbox's work folder could not be reached")
        try:
            with root.held():
                yield root
        except SandboxRootGone:
            raise ChildCrashed("the sandbox ended before its work folder could be held") from None

    def idle_pids(self) -> list[int]:
        with self._lock:
            return [child.pid for child in self._idle]

    def zygote_pid(self) -> int | None:
        return self._spawner.zygote_pid()

    def run(
        self,
        entry: str,
        work: BaseModel,
        result_type: type[ResultT],
        *,
        cpu: CpuBudget,
        on_progress: ProgressFn | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_usage: UsageFn | None = None,
        max_pages: int | None = None,
        folder: Path | None = None,
    ) -> ResultT:
        """Run the entry `entry` on `work` in a child; its result validated as `result_type`.

        Raises DocJobError (the child's own failure, or `input.too_complex` for a limit), ChildStopped when
        `should_stop()` said so, ChildCrashed for anything else. `on_usage` gets what the task cost, however
        it ended. `max_pages` caps the page count the child may report (and the CPU budget that grows with it).
        `folder` is the attempt's folder: a confined child may write there and in its private folder, nowhere else.
        """
        cap = max_pages if max_pages is not None else DEFAULT_PAGE_CAP
        child = self._acquire()
        child.reported = None
        reusable = False
        try:
            order, inside = work.model_dump(mode="json"), folder
            if child.root is not None:  # confined: the paths as the child sees them, in its own sandbox's root
                inside = child.root.to_inside(folder) if folder is not None else None
                if folder is not None and inside is None:
                    raise ChildCrashed("the attempt's folder is not in its sandbox (the sandbox was replaced)")
                order = child.root.rebase(order)
            child.send(Task(entry=entry, work=order, cpu=cpu, max_pages=cap, folder=str(inside) if inside else None))
            try:
                result = self._supervise(child, result_type, cpu, on_progress, should_stop, cap)
            except (ChildCrashed, DocJobError) as error:
                raise _work_root_full(child.root, self.confinement) or error from None
            reusable = True
            return result
        finally:
            self._release(child, reusable=reusable)
            usage = child.task_usage()
            child.cpu_accounted += usage.cpu_seconds
            if on_usage is not None:
                on_usage(usage)

    def _supervise(
        self,
        child: ChildProcess,
        result_type: type[ResultT],
        cpu: CpuBudget,
        on_progress: ProgressFn | None,
        should_stop: Callable[[], bool] | None,
        max_pages: int,
    ) -> ResultT:
        last_heard = time.monotonic()
        pages_total = 0
        while True:
            messages = child.read(POLL_SECONDS)
            if messages is None:
                raise self._ended(child, cpu, pages_total)
            for message in messages:
                last_heard = time.monotonic()
                if isinstance(message, Progress):
                    total = min(message.total, max_pages)  # a child's count is a claim: never beyond the job's cap
                    done = min(message.done, total)
                    pages_total = max(pages_total, total)
                    if on_progress is not None:
                        on_progress(done, total)
                elif isinstance(message, Result):
                    child.note_usage(message.usage)
                    try:
                        return result_type.model_validate(message.value)
                    except ValidationError:
                        raise ChildCrashed("result does not match its model") from None
                elif isinstance(message, Failure):
                    child.note_usage(message.usage)
                    raise DocJobError(message.code, message.message[:500])
                elif isinstance(message, Crash):
                    child.note_usage(message.usage)
                    raise ChildCrashed(message.error[:100])
            if should_stop is not None and should_stop():
                child.kill()
                raise ChildStopped("the stage was canceled or lost its lease")
            if time.monotonic() - last_heard > self.limits.stall_seconds:
                child.kill()
                raise DocJobError(
                    FailureCode.INPUT_TOO_COMPLEX, f"the document made no progress for {self.limits.stall_seconds:g} s"
                )

    def _ended(self, child: ChildProcess, cpu: CpuBudget, pages_total: int) -> Exception:
        """Why a child's channel ended without a verdict."""
        child.reap()
        if child.account is None:
            return ChildCrashed("the document child ended unaccounted for (its zygote ended)")
        status = child.account.status
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        used = child.account.cpu_seconds
        allowed = cpu.seconds(pages_total)
        if signum == signal.SIGXCPU or (signum == signal.SIGKILL and used >= allowed):
            return DocJobError(FailureCode.INPUT_TOO_COMPLEX, f"the document needs more than {allowed:g} CPU seconds")
        if signum == signal.SIGXFSZ and self.confinement is not None:
            limit = self.confinement.max_file_mb
            return DocJobError(FailureCode.INPUT_TOO_COMPLEX, f"the document made a file larger than {limit} MiB")
        if signum is not None:
            log.warning("document child %d ended by signal %d", child.pid, signum)
            return ChildCrashed(f"signal {signum}")
        return ChildCrashed(f"exit status {os.WEXITSTATUS(status)}")

    def _adopt_spare(self, child: ChildProcess) -> None:
        """A child forked ahead of its task: kept idle, as a spare (killed if enough are)."""
        with self._lock:
            if not self._closed and len(self._idle) < self.warm:
                self._idle.append(child)
                return
        child.kill()

    def _acquire(self) -> ChildProcess:
        child = None
        with self._lock:
            while self._idle and child is None:
                candidate = self._idle.pop()
                if candidate.alive():
                    child = candidate
                else:
                    candidate.kill()
        if child is None:
            child = self._spawner.spawn()
        if self.recycle_after == 1:  # the child taken never comes back: its successor is forked while it works
            self._replenish()
        return child

    def _release(self, child: ChildProcess, *, reusable: bool) -> None:
        child.tasks_done += 1
        keep = (
            reusable
            and child.alive()
            and child.tasks_done < self.recycle_after
            and child.rss_mb() < self.limits.memory_mb * RECYCLE_RSS_FRACTION
        )
        with self._lock:
            if keep and not self._closed and len(self._idle) < self.warm:
                self._idle.append(child)
                return
        child.kill()
        self._replenish()

    def _replenish(self) -> None:
        """Start children in the background until `warm` are idle or on their way (none is waited for here)."""
        with self._lock:
            missing = 0 if self._closed else self.warm - len(self._idle) - self._starting
            self._starting += max(missing, 0)
        for _ in range(max(missing, 0)):
            future: Future[ChildProcess] = Future()
            future.add_done_callback(self._adopt)
            self._spawner.ask(future)

    def _adopt(self, future: Future[ChildProcess]) -> None:
        with self._lock:
            self._starting -= 1
        if future.exception() is None:
            self._adopt_spare(future.result())


def _work_root_full(root: SandboxRoot | None, confinement: Confinement | None) -> DocJobError | None:
    """`input.too_complex` when a child failed with its sandbox's writable root full (nearly: tools stop short),
    so its writes failed: the document's files outgrew `max_work_mb`. None otherwise (the failure stands)."""
    free = root.free_bytes() if root is not None else None
    if confinement is None or free is None or free > FULL_ROOT_BYTES:
        return None
    limit = confinement.max_work_mb
    return DocJobError(FailureCode.INPUT_TOO_COMPLEX, f"the document's work files need more than {limit} MiB")
