"""Document work in limited child processes: a warm pool of them, forked from a zygote, killed at will.

Tenants' bytes are parsed only in these children, never in a worker's own threads. Each pool has one zygote
(docjobs/isolation/sandbox_child.py): a process that starts from an environment built from an allow-list (no codec keys,
signing passphrase, AWS or Temporal credentials) in its own session, limits its own address space (`RLIMIT_AS`,
DOCJOBS_STAGE_MEMORY_MB) before importing anything, turns core dumps off (a core file would hold the document),
lowers its CPU priority (nice 10), imports the stage work once and then forks a child whenever the pool asks. A
fork costs milliseconds where starting Python and importing the stage work costs about half a CPU-second. The
zygote never reads a task. Each child

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
result against the task's result model; a line beyond 16 MiB, unreadable or malformed is a crash): a child that
was taken over by a hostile document can make its own task fail, but cannot make the worker run anything.
A child is reused for the next task only after a clean success, up to `recycle_after` tasks (1: a fresh child
for every task, nothing of one task's memory or files seen by the next; its successor is forked as soon as it is
taken, so that the next task finds a spare child waiting, not a fork in its way).

A pool may be confined (`Confinement`, docjobs/isolation/confine.py): its zygote then starts inside a bubblewrap sandbox
(its own network, PID and mount namespaces, only its tenant's work root writable, an unprivileged uid, seccomp),
every limit is hard, and each child serves one task, restricted by Landlock to its attempt's folder (`run`'s
`folder`) and its private one: no other job's folder of the tenant (docjobs/isolation/landlock.py). A spare
child makes its rules while it waits; its task adds only its folder's. `TenantPools` keeps
one pool per tenant, so that no child ever serves two tenants; the worker uses it for every queue. Inside the
sandbox the zygote reports the pids it sees, and the pool finds the same processes in its own namespace
(`_outer_pid`) before it signals any.

What a task cost (`TaskUsage`) is measured by the child itself (a reused child's kernel account covers all its
tasks) and reported with its answer; for a child that ended without one, the parent derives it from what the
kernel counted when the zygote reaped the child (CPU since its last reported task, its lifetime peak memory).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError

from docjobs.domain.errors import DocJobError
from docjobs.domain.models import CpuBudget
from docjobs.isolation.confine import Confinement, python_inside, seccomp_filter
from docjobs.isolation.protocol import (
    ChildMessage,
    Crash,
    Exited,
    Failure,
    Forked,
    MalformedMessage,
    Progress,
    Result,
    Task,
    TaskUsage,
    UnreadableMessage,
    read_child_message,
    task_usage,
)
from docjobs.isolation.sandbox_child import CONTROL_ENV, ENTRIES_ENV, FORK_REQUEST, MEMORY_ENV, PARENT_ENV

log = logging.getLogger("docjobs.sandbox")  # the name operators filter on: kept across the move

ResultT = TypeVar("ResultT", bound=BaseModel)
ProgressFn = Callable[[int, int], None]

CODE_ROOT = Path(__file__).resolve().parents[2]  # the checkout: what the child needs on its PYTHONPATH
STAGE_ENTRIES = "docjobs.isolation.stage_work"  # the module whose ENTRIES the children serve
# What a child may inherit from the worker's environment: tool settings, never credentials.
ENV_ALLOWED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TESSDATA_PREFIX", "OMP_THREAD_LIMIT")
POLL_SECONDS = 0.2
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_PAGE_CAP = 2000  # a task run without its page cap (the shipped policies' largest max_pages)
SPAWN_TIMEOUT_SECONDS = 60.0
RECYCLE_RSS_FRACTION = 0.5  # a child that kept more than this share of its memory limit is not reused


class ChildStopped(Exception):
    """The caller asked to stop (cancel or lost lease): the child's process group was killed."""


class ChildCrashed(Exception):
    """The child failed outside the failure codes (a bug, a signal): transient until proven otherwise."""


UsageFn = Callable[[TaskUsage], None]


@dataclass(frozen=True)
class ChildLimits:
    memory_mb: int = 1536
    stall_seconds: float = 300.0


@dataclass(frozen=True)
class _Account:
    """The kernel's account of a child that ended, as its zygote reaped it."""

    status: int  # as os.wait4 gives it
    cpu_seconds: float  # the child's and its tools' together, over its whole life
    peak_memory_mb: float


@dataclass
class _Child:
    pid: int
    tasks: BinaryIO  # write end of the child's task pipe
    channel: int  # read end of the child's message pipe (the zygote writes in it too: first and last)
    tasks_done: int = 0
    buffer: bytes = b""
    ended: bool = False  # the channel reached its end: the zygote has reaped the child, its pid may be reused
    account: _Account | None = None
    cpu_accounted: float = 0.0  # CPU seconds (tools included) the child had used when its current task began
    reported: TaskUsage | None = None  # what the current task cost, as the child reported it

    def note_usage(self, usage: Any) -> None:
        """Keep the usage a message reports (a malformed one counts as none: it is accounting, never a verdict)."""
        self.reported = task_usage(usage)

    def task_usage(self) -> TaskUsage:
        """The current task's cost: as reported, else what the kernel counted for the child (once reaped)."""
        if self.reported is not None:
            return self.reported
        if self.account is None:
            return TaskUsage()
        cpu_seconds = max(self.account.cpu_seconds - self.cpu_accounted, 0.0)
        return TaskUsage(cpu_seconds=cpu_seconds, peak_memory_mb=self.account.peak_memory_mb)

    def alive(self) -> bool:
        """An idle child has nothing to say: anything on its channel means it has ended."""
        if self.ended:
            return False
        poller = select.poll()
        poller.register(self.channel, select.POLLIN)
        return not poller.poll(0)

    def send(self, task: Task) -> None:
        try:
            self.tasks.write(task.line())
            self.tasks.flush()
        except OSError:
            raise ChildCrashed("the document child is gone") from None

    def read(self, timeout: float) -> list[ChildMessage] | None:
        """Messages that arrived within `timeout` (maybe none; those of unknown kinds are dropped); None once the
        channel has ended. The zygote's account of the child (its last message) is kept, not returned. Raises
        ChildCrashed for a line beyond MAX_MESSAGE_BYTES, unreadable, or not the model of its kind."""
        if self.ended:
            return None
        poller = select.poll()  # not select(): a busy worker's descriptors can exceed FD_SETSIZE
        poller.register(self.channel, select.POLLIN)
        if not poller.poll(timeout * 1000):
            return []
        chunk = os.read(self.channel, 65536)
        if not chunk:
            self.ended = True
            return None
        self.buffer += chunk
        if len(self.buffer) > MAX_MESSAGE_BYTES:
            self.buffer = b""
            raise ChildCrashed("message too large")
        *lines, self.buffer = self.buffer.split(b"\n")
        messages: list[ChildMessage] = []
        for line in lines:
            try:
                message = read_child_message(line)
            except UnreadableMessage:
                raise ChildCrashed("unreadable message") from None
            except MalformedMessage as malformed:
                if malformed.kind != "exited":
                    raise ChildCrashed(str(malformed)) from None
                self.account = None  # the kernel's account unreadable: as if the zygote had ended
                continue
            if isinstance(message, Exited):
                self.account = _account(message)
            elif message is not None:
                messages.append(message)
        return messages

    def kill(self) -> None:
        """SIGKILL the child's whole process group (its tools too). Unless its task's cost is known already, wait
        until its zygote has reaped it, for the kernel's account of it."""
        if not self.ended:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        if self.reported is None:
            self.reap()
        else:
            self.ended = True  # never signalled again: its zygote reaps it without the worker waiting
            self._close()

    def reap(self) -> None:
        """Read the channel to its end, keeping the zygote's account of the child, then close both pipes.

        The zygote closes its copy of the channel only once it has reaped the child and killed what was left in
        its group: until this end is reached, the child's pid (its group's ID) cannot have been reused, so
        `kill` never signals a stranger. A child that keeps its channel open is killed by its zygote's death.
        """
        deadline = time.monotonic() + SPAWN_TIMEOUT_SECONDS
        while not self.ended and time.monotonic() < deadline:
            with contextlib.suppress(ChildCrashed):  # what a killed child left unreadable is no longer heard
                self.read(POLL_SECONDS)
        if not self.ended:
            log.warning("document child %d was not reaped in time", self.pid)
            self.ended = True
        self._close()

    def _close(self) -> None:
        if not self.tasks.closed:
            os.close(self.channel)
            with contextlib.suppress(OSError):
                self.tasks.close()

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0


def _account(exited: Exited) -> _Account:
    return _Account(exited.status, max(exited.cpu, 0.0), max(exited.maxrss_kb, 0) / 1024)


@dataclass
class _Zygote:
    """The process every child of a pool is forked from (docjobs/isolation/sandbox_child.py)."""

    process: subprocess.Popen[bytes]
    control: socket.socket  # fork requests: one message, the child's two pipe ends attached

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Close its control socket, on which it kills its children and ends; wait for that."""
        self.control.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class _ZygoteGone(Exception):
    """The zygote ended before it forked the child asked of it."""


def child_environment(
    memory_mb: int, control: int, entries: str, home: Path, confinement: Confinement | None = None
) -> dict[str, str]:
    """The zygote's whole environment (and so its children's): the allow-list, plus what the zygote needs."""
    env = {name: os.environ[name] for name in ENV_ALLOWED if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LC_ALL", "C.UTF-8")
    return {
        **env,
        "HOME": str(home),
        "TMPDIR": str(home),
        "PYTHONPATH": str(CODE_ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        MEMORY_ENV: str(memory_mb),
        # Inside the sandbox the zygote's parent is a bwrap there, which dies with the worker.
        PARENT_ENV: str(confinement.zygote_parent) if confinement is not None else str(os.getpid()),
        CONTROL_ENV: str(control),
        ENTRIES_ENV: entries,
        **(confinement.environment() if confinement is not None else {}),
    }


@dataclass
class _Spawner:
    """One long-lived thread starts the zygote and asks it for every child: `PR_SET_PDEATHSIG` fires when the
    *thread* that started the zygote ends, so it must not be a thread that comes and goes (activity threads
    may). The zygote is touched by this thread only."""

    requests: queue.SimpleQueue[Future[_Child] | None] = field(default_factory=queue.SimpleQueue)
    thread: threading.Thread | None = None
    zygote: _Zygote | None = None


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
    ) -> None:
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
        self._idle: list[_Child] = []
        self._starting = 0  # children asked of the spawner for the idle list, not there yet
        self._lock = threading.Lock()
        self._spawner = _Spawner()
        self._closed = False

    def start(self) -> None:
        """Start the spawner thread, the zygote (its imports) and the warm children; returns once they are."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._spawner.thread = threading.Thread(target=self._spawn_loop, name="docjobs-child-spawner", daemon=True)
        self._spawner.thread.start()
        started = [self._spawn() for _ in range(self.warm)]
        with self._lock:
            self._idle.extend(started)

    def close(self) -> None:
        """Kill every idle child, then the zygote, which takes the children still running a task with it."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for child in idle:
            child.kill()
        self._spawner.requests.put(None)
        if self._spawner.thread is not None:
            self._spawner.thread.join(timeout=SPAWN_TIMEOUT_SECONDS)

    @contextlib.contextmanager
    def lease(self, job_id: str) -> Iterator[tuple[ChildPool, Path | None]]:
        """This pool for any job (see `TenantPools` for one per tenant); attempts keep their folders where they do."""
        yield self, None

    def idle_pids(self) -> list[int]:
        with self._lock:
            return [child.pid for child in self._idle]

    def zygote_pid(self) -> int | None:
        zygote = self._spawner.zygote
        return zygote.process.pid if zygote is not None and zygote.alive() else None

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
            order = work.model_dump(mode="json")
            child.send(Task(entry=entry, work=order, cpu=cpu, max_pages=cap, folder=str(folder) if folder else None))
            result = self._supervise(child, result_type, cpu, on_progress, should_stop, cap)
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
        child: _Child,
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
                    "input.too_complex", f"the document made no progress for {self.limits.stall_seconds:g} s"
                )

    def _ended(self, child: _Child, cpu: CpuBudget, pages_total: int) -> Exception:
        """Why a child's channel ended without a verdict."""
        child.reap()
        if child.account is None:
            return ChildCrashed("the document child ended unaccounted for (its zygote ended)")
        status = child.account.status
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        used = child.account.cpu_seconds
        allowed = cpu.seconds(pages_total)
        if signum == signal.SIGXCPU or (signum == signal.SIGKILL and used >= allowed):
            return DocJobError("input.too_complex", f"the document needs more than {allowed:g} CPU seconds")
        if signum == signal.SIGXFSZ and self.confinement is not None:
            limit = self.confinement.max_file_mb
            return DocJobError("input.too_complex", f"the document made a file larger than {limit} MiB")
        if signum is not None:
            log.warning("document child %d ended by signal %d", child.pid, signum)
            return ChildCrashed(f"signal {signum}")
        return ChildCrashed(f"exit status {os.WEXITSTATUS(status)}")

    def _acquire(self) -> _Child:
        child = None
        with self._lock:
            while self._idle and child is None:
                candidate = self._idle.pop()
                if candidate.alive():
                    child = candidate
                else:
                    candidate.kill()
        if child is None:
            child = self._spawn()
        if self.recycle_after == 1:  # the child taken never comes back: its successor is forked while it works
            self._replenish()
        return child

    def _release(self, child: _Child, *, reusable: bool) -> None:
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
            future: Future[_Child] = Future()
            future.add_done_callback(self._adopt)
            self._spawner.requests.put(future)

    def _adopt(self, future: Future[_Child]) -> None:
        with self._lock:
            self._starting -= 1
        if future.exception() is not None:
            return
        child = future.result()
        with self._lock:
            if not self._closed and len(self._idle) < self.warm:
                self._idle.append(child)
                return
        child.kill()

    def _spawn(self) -> _Child:
        future: Future[_Child] = Future()
        self._spawner.requests.put(future)
        return future.result(timeout=SPAWN_TIMEOUT_SECONDS)

    def _spawn_loop(self) -> None:
        while (future := self._spawner.requests.get()) is not None:
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._start_child())
            except Exception as error:  # noqa: BLE001 - handed to whoever waits for this child
                future.set_exception(error)
        if self._spawner.zygote is not None:
            self._spawner.zygote.stop()

    def _start_child(self) -> _Child:
        """A child forked by the zygote; a zygote found dead is replaced (its children died with it)."""
        try:
            return self._fork(self._live_zygote())
        except _ZygoteGone:
            return self._fork(self._live_zygote())

    def _live_zygote(self) -> _Zygote:
        zygote = self._spawner.zygote
        if zygote is not None and zygote.alive():
            return zygote
        if zygote is not None:
            log.warning("document zygote %d ended (%s): starting another", zygote.process.pid, zygote.process.poll())
            zygote.stop()
        self._spawner.zygote = zygote = self._start_zygote()
        return zygote

    def _start_zygote(self) -> _Zygote:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-P", "-m", "docjobs.isolation.sandbox_child"]
        env = child_environment(self.limits.memory_mb, theirs.fileno(), self.entries, self.home, self.confinement)
        seccomp = None
        pass_fds = [theirs.fileno()]
        if self.confinement is not None:
            program = seccomp_filter()
            if program is not None:
                seccomp = os.memfd_create("docjobs-seccomp")
                os.write(seccomp, program)
                os.lseek(seccomp, 0, os.SEEK_SET)
                pass_fds.append(seccomp)
            command = self.confinement.command([python_inside(), *command[1:]], seccomp)
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # tools' messages can quote the document
                cwd=self.home,
                env=env,
                pass_fds=pass_fds,
                start_new_session=True,
                close_fds=True,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
            if seccomp is not None:
                os.close(seccomp)
        return _Zygote(process, ours)

    def _fork(self, zygote: _Zygote) -> _Child:
        """Ask the zygote for a child (its task pipe and channel attached); waits for the child's pid, which the
        zygote writes on the channel before anything else can be. The first request waits for its imports."""
        tasks_read, tasks_write = os.pipe()
        channel_read, channel_write = os.pipe()
        child = _Child(0, os.fdopen(tasks_write, "wb"), channel_read)
        try:
            socket.send_fds(zygote.control, [FORK_REQUEST], [tasks_read, channel_write])
        except OSError:
            child.ended = True
        finally:
            os.close(tasks_read)
            os.close(channel_write)
        deadline = time.monotonic() + SPAWN_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            try:
                messages = child.read(POLL_SECONDS)
            except ChildCrashed:  # the zygote's message unreadable: no pid, as if it never came
                break
            if messages is None:
                child.reap()
                if not zygote.alive():
                    raise _ZygoteGone()
                raise ChildCrashed("the zygote could not fork a document child")
            for message in messages:
                if isinstance(message, Forked):
                    pid = message.pid
                    outer = pid if self.confinement is None else _outer_pid(zygote.process.pid, pid)
                    if outer is None:  # never seen from here: a pid the worker must not signal
                        child.ended = True
                        child.reap()
                        raise ChildCrashed("the document child could not be found from the worker")
                    child.pid = outer
                    return child
        child.ended = True  # no pid to signal: the zygote, stuck, is replaced with its children
        child.reap()
        zygote.process.kill()
        raise ChildCrashed("the document child did not start")


def _outer_pid(root: int, inner: int) -> int | None:
    """The worker's PID of the process that is `inner` in the PID namespace of the sandbox started as `root`
    (bwrap, its namespace's init, the zygote and its forks below it): the zygote reports the pids it sees."""
    frontier = [root]
    for _ in range(4):
        below: list[int] = []
        for pid in frontier:
            with contextlib.suppress(OSError):
                for task in Path(f"/proc/{pid}/task").iterdir():
                    below += [int(child) for child in (task / "children").read_text().split()]
        for pid in below:
            with contextlib.suppress(OSError, ValueError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("NSpid:"):
                        ids = [int(value) for value in line.split()[1:]]
                        if len(ids) > 1 and ids[-1] == inner and pid != root:
                            return ids[0]
        frontier = below
    return None


def tenant_of(job_id: str) -> str:
    """The tenant a job belongs to: its ID's prefix (`tenant/key`); jobs started without a tenant share ''."""
    tenant, separator, _ = job_id.partition("/")
    return tenant if separator else ""


def tenant_root(work_dir: Path, tenant: str) -> Path:
    """Where a tenant's attempts keep their folders, in a queue's work folder (named by a digest: any tenant name
    is a safe folder name)."""
    return work_dir / f"tenant-{hashlib.sha256(tenant.encode()).hexdigest()[:16]}"


def hand_over(folder: Path, confinement: Confinement | None) -> None:
    """Give an attempt's folder (and what the worker put in it) to the sandbox's uid, when it is not the worker's."""
    if confinement is None or confinement.uid == os.geteuid():
        return
    uid = confinement.uid
    os.chown(folder, uid, uid, follow_symlinks=False)
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            os.chown(os.path.join(parent, name), uid, uid, follow_symlinks=False)


PoolFactory = Callable[[Path, Confinement | None], ChildPool]
# The uid slots of the open pools, across every queue's TenantPools of this process: a slot (so a uid) per tenant,
# derived from its name (the same on every worker of a machine), never shared with another tenant's open pool.
SLOT_RANGE = 60_000
_SLOTS: dict[int, tuple[str, int]] = {}  # slot -> (tenant, open pools)
_SLOTS_LOCK = threading.Lock()


def _take_slot(tenant: str) -> int:
    with _SLOTS_LOCK:
        slot = int(hashlib.sha256(tenant.encode()).hexdigest()[:8], 16) % SLOT_RANGE
        while slot in _SLOTS and _SLOTS[slot][0] != tenant:
            slot = (slot + 1) % SLOT_RANGE
        _, count = _SLOTS.get(slot, (tenant, 0))
        _SLOTS[slot] = (tenant, count + 1)
        return slot


def _free_slot(slot: int) -> None:
    with _SLOTS_LOCK:
        tenant, count = _SLOTS.get(slot, ("", 1))
        if count <= 1:
            _SLOTS.pop(slot, None)
        else:
            _SLOTS[slot] = (tenant, count - 1)


@dataclass
class _TenantPool:
    pool: ChildPool
    root: Path
    slot: int
    in_use: int = 0
    last_used: float = 0.0


class TenantPools:
    """A pool of document children per tenant, so that no child ever serves two tenants: made on first use (its
    zygote confined to the tenant's own work root when `confined`), and closed, the least recently used first,
    once more than `max_pools` are open and idle. Each attempt's folder is made inside its tenant's root."""

    def __init__(self, make_pool: PoolFactory, work_dir: Path, *, confined: bool, max_pools: int = 16) -> None:
        self.make_pool = make_pool
        self.work_dir = work_dir
        self.confined = confined
        self.max_pools = max_pools
        self._pools: dict[str, _TenantPool] = {}
        self._lock = threading.Lock()
        self._closed = False

    def root(self, tenant: str) -> Path:
        return tenant_root(self.work_dir, tenant)

    @contextlib.contextmanager
    def lease(self, job_id: str) -> Iterator[tuple[ChildPool, Path | None]]:
        """The job's tenant's pool and work root, kept open while the block runs."""
        with self._lock:
            if self._closed:
                raise ChildCrashed("the worker is stopping")
            entry = self._pools.get(tenant := tenant_of(job_id))
            if entry is None:
                entry = self._open(tenant)
            entry.in_use += 1
        try:
            yield entry.pool, entry.root
        finally:
            with self._lock:
                entry.in_use -= 1
                entry.last_used = time.monotonic()
                idle = self._evictable()
            for evicted in idle:
                evicted.pool.close()
                _free_slot(evicted.slot)

    def pools(self) -> dict[str, ChildPool]:
        with self._lock:
            return {tenant: entry.pool for tenant, entry in self._pools.items()}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            entries, self._pools = list(self._pools.values()), {}
        for entry in entries:
            entry.pool.close()
            _free_slot(entry.slot)

    def _open(self, tenant: str) -> _TenantPool:
        """A new tenant's pool (under the lock: a tenant's first task waits for its zygote's imports)."""
        root = self.root(tenant)
        root.mkdir(parents=True, exist_ok=True)
        slot = _take_slot(tenant)
        confinement = Confinement(root, slot=slot) if self.confined else None
        if confinement is not None and confinement.uid != os.geteuid():
            os.chown(root, confinement.uid, confinement.uid)
        root.chmod(0o700)
        pool = self.make_pool(root, confinement)
        try:
            pool.start()
        except BaseException:
            pool.close()
            _free_slot(slot)
            raise
        entry = self._pools[tenant] = _TenantPool(pool, root, slot, last_used=time.monotonic())
        return entry

    def _evictable(self) -> list[_TenantPool]:
        """Idle pools beyond `max_pools`, least recently used first, taken out (closed by the caller)."""
        idle = sorted((e.last_used, tenant) for tenant, e in self._pools.items() if e.in_use == 0)
        excess = len(self._pools) - self.max_pools
        return [self._pools.pop(tenant) for _, tenant in idle[: max(excess, 0)]]


def sibling_pools(pools: ChildPool | TenantPools, entries: str) -> ChildPool | TenantPools:
    """Pools like `pools` (the same limits and tenants' work roots; confined alike: each tenant's sandbox, uid,
    limits and Landlock rules) whose zygotes import `entries` instead of the stage work, each in a sandbox of its
    own (its own PID namespace: no process of the stages' children is in it), with a fresh child for every task.
    The release gate's (docjobs/isolation/gate_work.py): a child that never loaded a C/C++ PDF reader, and never
    made the bytes it reads."""
    if isinstance(pools, TenantPools):
        make = pools.make_pool
        return TenantPools(
            lambda home, confinement: _sibling(make(home, confinement), entries),
            pools.work_dir,
            confined=pools.confined,
            max_pools=pools.max_pools,
        )
    return _sibling(pools, entries)


def _sibling(pool: ChildPool, entries: str) -> ChildPool:
    confinement = pool.confinement
    if confinement is not None:  # the packages of its own entries are bound, not those of `pool`'s
        confinement = dataclasses.replace(confinement, code=())
    return ChildPool(
        pool.limits, home=pool.home, warm=pool.warm, recycle_after=1, entries=entries, confinement=confinement
    )
