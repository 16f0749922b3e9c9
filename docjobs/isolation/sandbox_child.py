"""The document zygote and the children it forks: `python -P -m docjobs.isolation.sandbox_child`, started by
`docjobs.isolation.child_pool.ChildPool`, one per pool.

The zygote imports only the standard library until it has limited itself (memory, core dumps, priority, death
with its worker), then imports the stage work once, freezes what it imported out of the garbage collector's
reach, and forks a child each time its worker asks (a message with two pipe ends: the child's task pipe and its
answer channel). It never reads a task: tenants' bytes are parsed only in its forks (of what a fork leaves,
it reads only its report of pages: addresses, each checked against the zygote's own mappings).

Each fork inherits the zygote's limits, takes a process group of its own, dies with the zygote (which dies with the
worker), and serves tasks read as JSON lines on its task pipe, one at a time, answering on its channel: the messages
of `docjobs.isolation.protocol` (pydantic models, imported by the zygote after the stage work; a task that is not one
is never run), `docjobs.isolation.child_pool` has why. The zygote keeps a copy of every fork's channel until it has
reaped that fork: it then kills what is left of the fork's group, writes the kernel's account of the fork (exit
status, CPU seconds, peak memory) as the channel's last message and closes it. So the worker's end reaches its end
of file only once the fork's pid is free, and until then a signal to that process group cannot reach anyone else.
Confined (a fresh fork per task), the zygote learns from its first forks' reports which of its pages tasks write,
and each later fork copies them while it waits as a spare (docjobs/isolation/prefault.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import importlib
import os
import resource
import select
import signal
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from docjobs.isolation import prefault

if TYPE_CHECKING:
    from docjobs.isolation.landlock import Ruleset
    from docjobs.isolation.protocol import Message, Task, TaskUsage

MEMORY_ENV = "DOCJOBS_CHILD_MEMORY_MB"
PARENT_ENV = "DOCJOBS_CHILD_PARENT_PID"
CONTROL_ENV = "DOCJOBS_CHILD_CONTROL_FD"
ENTRIES_ENV = "DOCJOBS_CHILD_ENTRIES"
PRELOAD_ENV = "DOCJOBS_CHILD_PRELOAD"  # comma-separated modules of its queue's stages (unset: all of PRELOAD_FOR's)
# Set by docjobs.isolation.confine for a zygote inside its sandbox (kept in step with it: this module imports only
# the standard library).
NPROC_ENV = "DOCJOBS_CHILD_MAX_PROCESSES"
FSIZE_ENV = "DOCJOBS_CHILD_MAX_FILE_MB"
CONFINED_ENV = "DOCJOBS_CHILD_CONFINED"
READABLE_ENV = "DOCJOBS_CHILD_READABLE"
FORK_REQUEST = b"fork"
PR_SET_PDEATHSIG = 1
NICENESS = 10
# Written when memory has run out: prepared beforehand, since building it then may fail too.
_OUT_OF_MEMORY = b""
# Folders of the zygote's home its confined forks may write besides their own (an entries module's
# WRITABLE_IN_ROOT: test doubles' logs; the shipped stage work has none).
_SHARED_WRITABLE: list[str] = []
# The attempt folder this (confined) process restricted itself to: a process is restricted once (the kernel stacks at
# most 16 domains). A confined child serves one task; one reused anyway (a benchmark) serves only that folder's.
_RESTRICTED_TO: list[str | None] = []
# A confined child's Landlock ruleset, made before its task arrived (docjobs.isolation.landlock.Ruleset; this
# module imports only the standard library at first).
_PREPARED_RULES: list[Ruleset] = []


def _send(channel: int, message: Message) -> None:
    _write(channel, message.line())


def _write(channel: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(channel, view) :]


def _die_with_parent(parent: int, on_death: Callable[[int, FrameType | None], None]) -> None:
    """`on_death` runs when `parent` ends (the kernel's parent-death signal), or now if it already has."""
    signal.signal(signal.SIGTERM, on_death)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above took effect
        on_death(signal.SIGTERM, None)


def _limit_self(memory_mb: int) -> None:
    """The zygote's limits, which every fork inherits: each one hard (a child cannot raise it again)."""
    os.nice(NICENESS)  # tenants' documents yield the CPU to the API, Temporal and the workers' own threads
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a core file would hold the document
    if processes := os.environ.get(NPROC_ENV):  # a fork bomb stops there (the sandbox's uid, all its processes)
        resource.setrlimit(resource.RLIMIT_NPROC, (int(processes), int(processes)))
    if file_mb := os.environ.get(FSIZE_ENV):  # no file written inside may grow beyond this (SIGXFSZ)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(file_mb) << 20, int(file_mb) << 20))


def _end_group(signum: int, frame: FrameType | None) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_with_tools() -> float:
    """CPU seconds of this child and of every tool it ran and reaped (user + system)."""
    tools = resource.getrusage(resource.RUSAGE_CHILDREN)
    return _cpu_used() + tools.ru_utime + tools.ru_stime


def _io_bytes() -> tuple[int, int]:
    """Bytes read and written by read/write system calls, this child's and its reaped tools' (rchar, wchar)."""
    counters = {}
    try:
        with open("/proc/self/io") as io:
            for line in io:
                name, _, value = line.partition(":")
                counters[name] = int(value)
    except (OSError, ValueError):
        return 0, 0
    return counters.get("rchar", 0), counters.get("wchar", 0)


def _peak_rss_mb() -> float:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


class _TaskUsage:
    """What one task costs, measured by the child itself: a child may serve several tasks, so the kernel's account
    of it covers all of them together. The peak memory is reset per task (`clear_refs` 5); a tool's peak counts
    when it is the largest the child ever ran (the kernel keeps only that maximum)."""

    def __init__(self) -> None:
        with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        self._cpu = _cpu_with_tools()
        self._io = _io_bytes()
        self._tools_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss

    def report(self) -> TaskUsage:
        from docjobs.isolation.protocol import TaskUsage

        read, written = _io_bytes()
        tools_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        peak = max(_peak_rss_mb(), tools_peak / 1024 if tools_peak > self._tools_peak else 0.0)
        return TaskUsage(
            cpu_seconds=round(max(_cpu_with_tools() - self._cpu, 0.0), 6),
            peak_memory_mb=round(peak, 3),
            bytes_read=max(read - self._io[0], 0),
            bytes_written=max(written - self._io[1], 0),
        )


def _limit_cpu(seconds: float, hard_seconds: float | None = None) -> None:
    """SIGXCPU ends the child at `seconds`. Unconfined (`hard_seconds` None), the soft limit only: the hard one
    stays where it is, so that the next task of this child can be given its own budget. Confined, the hard limit
    goes to `hard_seconds` too: a limit the child can never raise again (a confined child serves one task)."""
    _, current = resource.getrlimit(resource.RLIMIT_CPU)
    hard = current if hard_seconds is None else int(hard_seconds) + 1
    if current != resource.RLIM_INFINITY:
        hard = min(hard, current)
    soft = int(seconds) + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _rules_before_task() -> Ruleset:
    """A confined child's Landlock ruleset (docjobs/isolation/landlock.py) without its task's folder: it may read and
    execute the runtime the sandbox mounts read-only (and /proc: its PID namespace's, where a sibling's files stay
    out of reach: another domain), and write beneath its private folder. Made by a spare child while it waits for
    its task, so that only the attempt folder's rule is left to add when the task arrives."""
    from docjobs.isolation.landlock import prepare  # standard library only, imported with the entries already

    readable = [path for path in os.environ.get(READABLE_ENV, "").split(os.pathsep) if path] + ["/proc"]
    return prepare(readable, [os.getcwd(), *_SHARED_WRITABLE])


def _confine_files(task: Task) -> None:
    """A confined child, before its (only) task: restricted by Landlock to its rules made beforehand
    (`_rules_before_task`) and its task's attempt folder. Every other job's folder in the tenant's work root, and
    the root itself, are out of its reach."""
    from docjobs.isolation.landlock import READ_WRITE

    folder = task.folder if task.folder is not None and os.path.isabs(task.folder) else None
    if _RESTRICTED_TO:
        if _RESTRICTED_TO[0] != folder:
            raise OSError(errno.EPERM, "this child is restricted to another attempt's folder")
        return
    ruleset = _PREPARED_RULES.pop() if _PREPARED_RULES else _rules_before_task()
    if folder is not None:
        ruleset.allow([folder], READ_WRITE)
    ruleset.enforce()
    _RESTRICTED_TO.append(folder)


def _serve_task(channel: int, task: Task, entries: dict[str, Any], report: prefault.Ranges = ()) -> bool:
    """Run one task and answer it; False when this child must not take another one. `report`: the zygote's
    mappings, whose pages this child wrote are listed for the zygote after a success (docjobs/isolation/prefault.py)."""
    from docjobs.domain.errors import DocJobError, FailureCode  # imported by the zygote with the entries and protocol
    from docjobs.isolation.protocol import Crash, Failure, Progress, Result

    if os.environ.get(CONFINED_ENV):
        from docjobs.isolation.landlock import LandlockUnavailable

        try:
            _confine_files(task)
        except (LandlockUnavailable, OSError) as error:  # fails closed: the task never runs unrestricted
            _send(channel, Crash(error=f"Landlock: {type(error).__name__}"))
            return False
    usage = _TaskUsage()
    start = _cpu_used()
    base, per_page, cap = task.cpu.base_seconds, task.cpu.per_page_seconds, task.max_pages
    confined = bool(os.environ.get(CONFINED_ENV))
    # The base budget, grown once the page count is known. Confined, the hard limit is the budget of the most
    # pages the task may have (what claiming them would give it anyway) and becomes the soft one once the page
    # count is known: a child can never raise it beyond.
    _limit_cpu(start + base, start + base + per_page * cap if confined else None)
    counted = False

    def progress(done: int, total: int) -> None:
        nonlocal counted
        if not counted:  # the page count is known now: the budget follows it, once
            budget = start + base + per_page * min(total, cap)
            _limit_cpu(budget, budget if confined else None)
            counted = True
        _send(channel, Progress(done=done, total=total))

    try:
        entry = entries[task.entry]
        work = entry.work_type.model_validate(task.work)
        result = entry.run(work, progress)
        if report:  # before the answer: the worker ends a confined child once it has its result
            prefault.write_report(Path.cwd(), report)
        _send(channel, Result(value=result.model_dump(mode="json"), usage=usage.report()))
        return True
    except DocJobError as error:
        _send(channel, Failure(code=error.code, message=error.message, usage=usage.report()))
    except MemoryError:
        _write(channel, _OUT_OF_MEMORY)
    except RecursionError:
        message = "the document's structure is nested too deeply"
        _send(channel, Failure(code=FailureCode.INPUT_TOO_COMPLEX, message=message, usage=usage.report()))
    except OSError as error:
        if error.errno != errno.EFBIG:  # beyond RLIMIT_FSIZE (Python ignores SIGXFSZ: the write fails instead)
            _send(channel, Crash(error=type(error).__name__, usage=usage.report()))
            return False
        message = f"the document made a file larger than the {os.environ.get(FSIZE_ENV)} MiB a stage may write"
        _send(channel, Failure(code=FailureCode.INPUT_TOO_COMPLEX, message=message, usage=usage.report()))
    except Exception as error:  # noqa: BLE001 - reported by type only: messages may quote the document
        _send(channel, Crash(error=type(error).__name__, usage=usage.report()))
    return False


def private_folder(home: Path, zygote: str, pid: int) -> Path:
    """A fork's own working folder (its cwd, HOME and TMPDIR), removed by the zygote once the fork is reaped. Named
    by its zygote's random tag too: zygotes of several workers may share a home, each counting pids from 1 in a
    PID namespace of its own."""
    return home / f"child-{zygote}-{pid}"


@dataclass(frozen=True)
class _Learned:
    """What a zygote knows of the pages its forks' tasks write (docjobs/isolation/prefault.py), for its next fork."""

    copy_ahead: list[tuple[int, int]] = field(default_factory=list)  # runs of pages a spare copies while it waits
    report: prefault.Ranges = ()  # the zygote's mappings, to report the pages written in (empty: no report asked)


def _serve_forked(
    zygote: int, tag: str, tasks: int, channel: int, entries: dict[str, Any], learned: _Learned = _Learned()
) -> None:
    """A fork's whole life: its own process group, death with the zygote, none of the zygote's or other forks'
    descriptors, a folder of its own, the pages tasks write copied ahead; then tasks until one fails or the worker
    closes the task pipe."""
    os.setpgid(0, 0)  # the zygote does it too, before it tells the worker the pid: no kill can miss the group
    _die_with_parent(zygote, _end_group)
    low, high = sorted((tasks, channel))
    os.closerange(3, low)
    os.closerange(low + 1, high)
    os.closerange(high + 1, os.sysconf("SC_OPEN_MAX"))
    folder = private_folder(Path.cwd(), tag, os.getpid())
    folder.mkdir(mode=0o700)
    os.chdir(folder)
    os.environ["HOME"] = os.environ["TMPDIR"] = tempfile.tempdir = str(folder)
    if os.environ.get(CONFINED_ENV):
        from docjobs.isolation.landlock import LandlockUnavailable

        with contextlib.suppress(LandlockUnavailable, OSError):  # tried again, and reported, when the task comes
            _PREPARED_RULES.append(_rules_before_task())
    prefault.populate(learned.copy_ahead)
    from pydantic import ValidationError

    from docjobs.isolation.protocol import Crash, read_task

    with os.fdopen(tasks, "rb") as lines:
        for line in lines:
            try:
                task = read_task(line)
            except ValidationError:  # nothing of it runs
                _send(channel, Crash(error="malformed task"))
                break
            if not _serve_task(channel, task, entries, learned.report):
                break  # after any failure the child is not reused: it ends, and the pool forks a fresh one


@dataclass(frozen=True)
class _Fork:
    pid: int
    channel: int  # the zygote's copy of the fork's channel, kept until the fork is reaped


class _Zygote:
    """Forks on request, reaps what it forked; see the module's docstring."""

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.entries: dict[str, Any] = {}  # set once imported
        self.pid = os.getpid()
        self.tag = os.urandom(6).hex()
        self.home = Path.cwd()
        self.forks: dict[int, _Fork] = {}  # by pidfd
        # Confined (a fresh fork per task), the pages tasks write: learned from the first forks, copied by the next.
        self.mappings: prefault.Ranges = ()  # this zygote's private writable mappings, as every fork inherits them
        self.written: set[int] = set()
        self.reports = 0
        self.learned = _Learned()
        self.poller = select.poll()
        self.poller.register(control, select.POLLIN)

    def serve(self) -> None:
        while True:
            for fd, _ in self.poller.poll():
                if fd in self.forks:
                    self._reap(fd)
                elif not self._fork():
                    self.end(signal.SIGTERM, None)

    def end(self, signum: int, frame: FrameType | None) -> None:
        """The worker is gone or closed its pool: so is every fork, tools included, and the zygote."""
        for fork in self.forks.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(fork.pid, signal.SIGKILL)
        os._exit(0)

    def _fork(self) -> bool:
        """Serve one fork request; False once the worker has closed the control socket."""
        from docjobs.isolation.protocol import Forked  # imported in `main`, before the first request

        try:
            request, fds, flags, _ = socket.recv_fds(self.control, len(FORK_REQUEST), 2)
        except OSError:
            return False
        if not request:
            return False
        if request != FORK_REQUEST or len(fds) != 2 or flags & socket.MSG_CTRUNC:
            for fd in fds:
                os.close(fd)
            return True
        tasks, channel = fds
        try:
            pid = os.fork()
        except OSError:
            pid = -1  # the worker's channel ends without a pid: it knows this child could not start
        if pid == 0:
            status = 1
            try:
                _serve_forked(self.pid, self.tag, tasks, channel, self.entries, self.learned)
                status = 0
            finally:
                os._exit(status)  # nothing of the zygote's runs here: no atexit, no buffers flushed twice
        os.close(tasks)
        if pid < 0:
            os.close(channel)
            return True
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        pidfd = os.pidfd_open(pid)
        self.forks[pidfd] = _Fork(pid, channel)
        self.poller.register(pidfd, select.POLLIN)
        _send(channel, Forked(pid=pid))
        return True

    def _reap(self, pidfd: int) -> None:
        """A fork ended: kill what is left of its group, reap it, report the kernel's account, free its pid."""
        from docjobs.isolation.protocol import Exited

        fork = self.forks.pop(pidfd)
        self.poller.unregister(pidfd)
        os.close(pidfd)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(fork.pid, signal.SIGKILL)
        _, status, usage = os.wait4(fork.pid, 0)
        account = Exited(status=status, cpu=usage.ru_utime + usage.ru_stime, maxrss_kb=usage.ru_maxrss)
        os.set_blocking(fork.channel, False)  # a worker that stopped reading must not stop the zygote
        with contextlib.suppress(OSError):
            _send(fork.channel, account)
        os.close(fork.channel)
        folder = private_folder(self.home, self.tag, fork.pid)
        if self.learned.report:
            self._learn(prefault.read_report(folder, self.mappings))
        if os.environ.get(CONFINED_ENV):
            self._kill_strays()  # first: nothing the fork left running writes into its folder while it goes
        _remove_private_folder(folder)

    def _learn(self, written: set[int]) -> None:
        """A fork's report taken in: its pages join the ones later forks copy ahead, up to prefault.MAX_PAGES."""
        if not written:
            return
        self.reports += 1
        room = prefault.MAX_PAGES - len(self.written)
        self.written.update(sorted(written - self.written)[: max(room, 0)])
        asking = self.mappings if self.reports < prefault.LEARN_REPORTS else ()
        self.learned = _Learned(copy_ahead=prefault.runs(self.written), report=asking)

    def _kill_strays(self) -> None:
        """Inside the sandbox (its own PID namespace: /proc shows only its processes) nothing may outlive the task
        that started it: whatever is not the namespace's init, this zygote (or its parent), in a live fork's group
        or descended from a live fork is killed: a daemon that left its group with `setsid` and its fork's family
        (reparented when the fork ended). A live fork's own tools may have a session of their own (OCRmyPDF does,
        to be killed as a whole): they stay, or one tenant's task ending would kill another task's OCR beside it."""
        keep = {1, self.pid, os.getppid()}  # a root worker's sandbox: the inner bwrap, this zygote's parent
        live = {fork.pid for fork in self.forks.values()}
        parents = {int(entry): _parent_pid(int(entry)) for entry in os.listdir("/proc") if entry.isdigit()}
        for pid in parents:
            if pid in keep or _descends_from(pid, live, parents):
                continue
            with contextlib.suppress(OSError):
                if os.getpgid(pid) not in live:
                    os.kill(pid, signal.SIGKILL)


def _remove_private_folder(folder: Path) -> None:
    """Remove a reaped fork's folder, whatever modes the fork left in it (a taken-over fork may `chmod 000` a
    folder it made: removed all the same, docjobs.store.sweep.remove_tree). What still cannot go (never expected)
    is left to the worker's sweep at its next start: the zygote goes on serving."""
    from docjobs.store.sweep import remove_tree  # standard library only

    with contextlib.suppress(Exception):
        remove_tree(folder)


def _parent_pid(pid: int) -> int:
    """The parent of `pid` (0 when it is gone or unreadable)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0
    fields = stat[stat.rfind(b")") + 2 :].split()  # after the command name, which may hold spaces and parentheses
    return int(fields[1]) if len(fields) > 1 else 0


def _descends_from(pid: int, ancestors: set[int], parents: dict[int, int]) -> bool:
    """Whether one of `ancestors` is `pid`'s parent, its parent's parent, and so on."""
    seen: set[int] = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        pid = parents.get(pid, 0)
        if pid in ancestors:
            return True
    return False


def main() -> None:
    global _OUT_OF_MEMORY
    memory_mb = int(os.environ[MEMORY_ENV])
    _limit_self(memory_mb)
    zygote = _Zygote(socket.socket(fileno=int(os.environ[CONTROL_ENV])))
    # When the worker dies, the kernel signals the zygote, which kills every fork's group (and each fork,
    # signalled in turn by the zygote's death, kills its own: the tools it runs, qpdf, poppler, Ghostscript).
    # A fork busy in C code hears its signal once that call returns; its CPU limit bounds that.
    _die_with_parent(int(os.environ[PARENT_ENV]), zygote.end)
    module = importlib.import_module(os.environ[ENTRIES_ENV])  # the heavy imports, once for every fork
    queues: dict[str, tuple[str, ...]] = getattr(module, "PRELOAD_FOR", {})
    asked = os.environ.get(PRELOAD_ENV)
    for_stages = asked.split(",") if asked is not None else [name for names in queues.values() for name in names]
    for name in (*getattr(module, "PRELOAD", ()), *(name for name in for_stages if name)):
        importlib.import_module(name)
    from docjobs.domain.errors import FailureCode
    from docjobs.isolation.protocol import Failure  # the messages (pydantic), once for every fork

    message = f"the document needs more than the {memory_mb} MiB of memory a stage may use"
    _OUT_OF_MEMORY = Failure(code=FailureCode.INPUT_TOO_COMPLEX, message=message).line()
    zygote.entries = module.ENTRIES
    for name in getattr(module, "WRITABLE_IN_ROOT", ()):
        shared = zygote.home / name
        shared.mkdir(exist_ok=True)
        _SHARED_WRITABLE.append(str(shared))
    gc.freeze()  # what every fork shares stays shared: the collector never writes to it
    if os.environ.get(CONFINED_ENV):  # a fresh fork per task: the pages its task writes are learned and copied ahead
        zygote.mappings = prefault.private_writable()
        zygote.learned = _Learned(report=zygote.mappings)
    zygote.serve()


if __name__ == "__main__":
    main()
