"""Document work in limited child processes: a warm pool of them, recycled, killed at will.

Tenants' bytes are parsed only in these children, never in a worker's own threads. Each child

- starts from an environment built from an allow-list (no codec keys, signing passphrase, AWS or Temporal
  credentials), in its own session, so that it and every tool it runs form one process group;
- limits its own address space (`RLIMIT_AS`, DOCJOBS_STAGE_MEMORY_MB) before importing anything, with core
  dumps off (a core file would hold the document), and runs at a lower CPU priority (nice 10), so that
  parsing a document never slows the API, Temporal or the worker's own threads;
- runs one task at a time under a CPU limit (soft `RLIMIT_CPU`): a base budget, grown by a per-page budget as
  soon as the task reports its page count;
- dies with its worker, its tools with it (`PR_SET_PDEATHSIG`, then it kills its own group; children are started
  by one long-lived thread for that reason).

The parent keeps the lease: it relays the child's page progress, and kills the child's group on cancel, on a
lost lease, and when the child makes no progress for DOCJOBS_STALL_SECONDS. Running out of memory or CPU, a
stall and a structure nested too deep all end as `input.too_complex`, whose message names the limit.

The child talks in JSON lines that the parent validates against the task's result model: a child that was
taken over by a hostile document can make its own task fail, but cannot make the worker run anything.
A child is reused for the next task only after a clean success, up to `recycle_after` tasks.

What a task cost (`TaskUsage`) is measured by the child itself (a reused child's kernel account covers all its
tasks) and reported with its answer; for a child that ended without one, the parent derives it from what the
kernel counted when it reaped the child (CPU since its last reported task, its lifetime peak memory).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field, ValidationError

from docjobs.errors import FAILURE_CODES, DocJobError
from docjobs.models import CpuBudget
from docjobs.sandbox_child import CHANNEL_ENV, ENTRIES_ENV, MEMORY_ENV, PARENT_ENV

log = logging.getLogger("docjobs.sandbox")

ResultT = TypeVar("ResultT", bound=BaseModel)
ProgressFn = Callable[[int, int], None]

CODE_ROOT = Path(__file__).resolve().parent.parent  # what the child needs on its PYTHONPATH
STAGE_ENTRIES = "docjobs.stage_work"  # the module whose ENTRIES the children serve
# What a child may inherit from the worker's environment: tool settings, never credentials.
ENV_ALLOWED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TESSDATA_PREFIX", "OMP_THREAD_LIMIT")
POLL_SECONDS = 0.2
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
SPAWN_TIMEOUT_SECONDS = 60.0
RECYCLE_RSS_FRACTION = 0.5  # a child that kept more than this share of its memory limit is not reused


class ChildStopped(Exception):
    """The caller asked to stop (cancel or lost lease): the child's process group was killed."""


class ChildCrashed(Exception):
    """The child failed outside the failure codes (a bug, a signal): transient until proven otherwise."""


class TaskUsage(BaseModel):
    """What one task cost in its child: CPU seconds (user + system, the tools it ran included), peak resident
    memory, bytes read and written. Reported by the child, which may lie about it (only to its own accounts)."""

    cpu_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    peak_memory_mb: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    bytes_read: int = Field(default=0, ge=0)
    bytes_written: int = Field(default=0, ge=0)


UsageFn = Callable[[TaskUsage], None]


@dataclass(frozen=True)
class ChildLimits:
    memory_mb: int = 1536
    stall_seconds: float = 300.0


@dataclass
class _Child:
    process: subprocess.Popen[bytes]
    channel: int  # read end of the child's message pipe
    ready: bool = False  # it has imported what it serves: from then on, silence counts as a stall
    tasks_done: int = 0
    buffer: bytes = b""
    rusage: resource.struct_rusage | None = None
    exit_status: int | None = None
    cpu_accounted: float = 0.0  # CPU seconds (tools included) the child had used when its current task began
    reported: TaskUsage | None = None  # what the current task cost, as the child reported it

    def note_usage(self, message: dict[str, Any]) -> None:
        """Keep the usage a message reports (a malformed one counts as none: it is accounting, never a verdict)."""
        try:
            self.reported = TaskUsage.model_validate(message.get("usage"))
        except ValidationError:
            self.reported = None

    def task_usage(self) -> TaskUsage:
        """The current task's cost: as reported, else what the kernel counted for the child (once reaped)."""
        if self.reported is not None:
            return self.reported
        if self.rusage is None:
            return TaskUsage()
        total = self.rusage.ru_utime + self.rusage.ru_stime
        return TaskUsage(cpu_seconds=max(total - self.cpu_accounted, 0.0), peak_memory_mb=self.rusage.ru_maxrss / 1024)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.exit_status is None and self.process.poll() is None

    def send(self, task: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(task, separators=(",", ":")).encode() + b"\n")
        self.process.stdin.flush()

    def read(self, timeout: float) -> list[dict[str, Any]] | None:
        """Messages that arrived within `timeout` (maybe none); None once the child closed its channel."""
        poller = select.poll()  # not select(): a busy worker's descriptors can exceed FD_SETSIZE
        poller.register(self.channel, select.POLLIN)
        if not poller.poll(timeout * 1000):
            return []
        chunk = os.read(self.channel, 65536)
        if not chunk:
            return None
        self.buffer += chunk
        if len(self.buffer) > MAX_MESSAGE_BYTES:
            raise ChildCrashed("message too large")
        *lines, self.buffer = self.buffer.split(b"\n")
        messages = []
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                raise ChildCrashed("unreadable message") from None
            if not isinstance(message, dict):
                raise ChildCrashed("unreadable message")
            messages.append(message)
        return messages

    def kill(self) -> None:
        """SIGKILL the child's whole process group (its tools too) and reap it."""
        if self.exit_status is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        self.reap()

    def reap(self) -> int:
        """Wait for the child to end, kill what it left in its group, then collect its status and usage.

        The group is signalled before the child is reaped: until then its pid (the group's ID) cannot be reused.
        """
        if self.exit_status is None:
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            _, status, usage = os.wait4(self.pid, 0)
            self.exit_status, self.rusage = status, usage
            self.process.returncode = os.waitstatus_to_exitcode(status)
            os.close(self.channel)
            if self.process.stdin is not None:
                with contextlib.suppress(OSError):
                    self.process.stdin.close()
        return self.exit_status

    def rss_mb(self) -> float:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0


def child_environment(memory_mb: int, channel: int, entries: str, home: Path) -> dict[str, str]:
    """The child's whole environment: the allow-list, plus what the child itself needs."""
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
        PARENT_ENV: str(os.getpid()),
        CHANNEL_ENV: str(channel),
        ENTRIES_ENV: entries,
    }


@dataclass
class _Spawner:
    """One long-lived thread starts every child: `PR_SET_PDEATHSIG` fires when the *thread* that forked a
    child ends, so children must not be forked by threads that come and go (the activity threads may)."""

    requests: queue.SimpleQueue[Future[_Child] | None] = field(default_factory=queue.SimpleQueue)
    thread: threading.Thread | None = None


class ChildPool:
    """Limited child processes for one worker's stages; `warm` of them are kept started and idle."""

    def __init__(
        self,
        limits: ChildLimits,
        *,
        home: Path,
        warm: int = 1,
        recycle_after: int = 50,
        entries: str = STAGE_ENTRIES,
    ) -> None:
        self.limits = limits
        self.home = home
        self.warm = warm
        self.recycle_after = recycle_after
        self.entries = entries
        self._idle: list[_Child] = []
        self._starting = 0  # children asked of the spawner for the idle list, not there yet
        self._lock = threading.Lock()
        self._spawner = _Spawner()
        self._closed = False

    def start(self) -> None:
        """Start the spawner thread and the warm children (they import their modules in the background)."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._spawner.thread = threading.Thread(target=self._spawn_loop, name="docjobs-child-spawner", daemon=True)
        self._spawner.thread.start()
        started = [self._spawn() for _ in range(self.warm)]
        with self._lock:
            self._idle.extend(started)

    def close(self) -> None:
        """Kill every idle child; children running a task are killed by their `run` when it returns."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for child in idle:
            child.kill()
        self._spawner.requests.put(None)

    def idle_pids(self) -> list[int]:
        with self._lock:
            return [child.pid for child in self._idle]

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
    ) -> ResultT:
        """Run the entry `entry` on `work` in a child; its result validated as `result_type`.

        Raises DocJobError (the child's own failure, or `input.too_complex` for a limit), ChildStopped when
        `should_stop()` said so, ChildCrashed for anything else. `on_usage` gets what the task cost, however
        it ended.
        """
        child = self._acquire()
        child.reported = None
        reusable = False
        try:
            child.send({"entry": entry, "work": work.model_dump(mode="json"), "cpu": cpu.model_dump(mode="json")})
            result = self._supervise(child, result_type, cpu, on_progress, should_stop)
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
    ) -> ResultT:
        last_heard = time.monotonic()
        pages_total = 0
        while True:
            messages = child.read(POLL_SECONDS)
            if messages is None:
                raise self._ended(child, cpu, pages_total)
            for message in messages:
                last_heard = time.monotonic()
                kind = message.get("kind")
                if kind == "ready":
                    child.ready = True
                    cpu_at_start = message.get("cpu")
                    if isinstance(cpu_at_start, int | float) and cpu_at_start >= 0:
                        child.cpu_accounted = float(cpu_at_start)
                elif kind == "progress":
                    done, total = _page_pair(message)
                    pages_total = max(pages_total, total)
                    if on_progress is not None:
                        on_progress(done, total)
                elif kind == "result":
                    child.note_usage(message)
                    try:
                        return result_type.model_validate(message.get("value"))
                    except ValidationError:
                        raise ChildCrashed("result does not match its model") from None
                elif kind == "failure":
                    child.note_usage(message)
                    raise _failure(message)
                elif kind == "crash":
                    child.note_usage(message)
                    raise ChildCrashed(str(message.get("error", "unknown"))[:100])
            if should_stop is not None and should_stop():
                child.kill()
                raise ChildStopped("the stage was canceled or lost its lease")
            if not child.ready and time.monotonic() - last_heard > SPAWN_TIMEOUT_SECONDS:
                child.kill()
                raise ChildCrashed("the document child did not start")
            if child.ready and time.monotonic() - last_heard > self.limits.stall_seconds:
                child.kill()
                raise DocJobError(
                    "input.too_complex", f"the document made no progress for {self.limits.stall_seconds:g} s"
                )

    def _ended(self, child: _Child, cpu: CpuBudget, pages_total: int) -> Exception:
        """Why a child closed its channel without a verdict."""
        status = child.reap()
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        used = (child.rusage.ru_utime + child.rusage.ru_stime) if child.rusage else 0.0
        allowed = cpu.seconds(pages_total)
        if signum == signal.SIGXCPU or (signum == signal.SIGKILL and used >= allowed):
            return DocJobError("input.too_complex", f"the document needs more than {allowed:g} CPU seconds")
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
                    candidate.reap()
        return child if child is not None else self._spawn()

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

    def _start_child(self) -> _Child:
        read_fd, write_fd = os.pipe()
        try:
            process = subprocess.Popen(
                [sys.executable, "-P", "-m", "docjobs.sandbox_child"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # tools' messages can quote the document
                cwd=self.home,
                env=child_environment(self.limits.memory_mb, write_fd, self.entries, self.home),
                pass_fds=(write_fd,),
                start_new_session=True,
                close_fds=True,
            )
        except OSError:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return _Child(process, read_fd)


def _page_pair(message: dict[str, Any]) -> tuple[int, int]:
    done, total = message.get("done"), message.get("total")
    if not isinstance(done, int) or not isinstance(total, int) or not 0 <= done <= total:
        raise ChildCrashed("malformed progress")
    return done, total


def _failure(message: dict[str, Any]) -> Exception:
    code, text = message.get("code"), message.get("message")
    if not isinstance(code, str) or code not in FAILURE_CODES or not isinstance(text, str):
        return ChildCrashed("malformed failure")
    return DocJobError(code, text[:500])
