"""The zygote a pool's children are forked from, and the one long-lived thread that starts it and asks it for them.

The zygote (docjobs/isolation/sandbox_child.py) starts from an environment built from an allow-list
(`child_environment`: no codec keys, signing passphrase, AWS or Temporal credentials) in its own session, and
forks a child whenever its `Spawner` asks, handing it two pipe ends: the child's task pipe and its channel. A
zygote found dead is replaced by the next child asked of it. Confined, it starts inside a bubblewrap sandbox with
its seccomp filter, and reports the pids it sees: the spawner finds the same processes in the worker's own PID
namespace (`outer_pid`) before the pool signals any.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from docjobs.isolation.child_process import POLL_SECONDS, SPAWN_TIMEOUT_SECONDS, ChildCrashed, ChildProcess
from docjobs.isolation.confine import Confinement, python_inside, seccomp_filter
from docjobs.isolation.protocol import Forked
from docjobs.isolation.sandbox_child import (
    CONTROL_ENV,
    ENTRIES_ENV,
    FORK_REQUEST,
    MEMORY_ENV,
    PARENT_ENV,
    PRELOAD_ENV,
)
from docjobs.isolation.sandbox_root import SandboxRoot, open_sandbox_root

log = logging.getLogger("docjobs.sandbox")  # the name operators filter on: kept across the move

CODE_ROOT = Path(__file__).resolve().parents[2]  # the checkout: what the child needs on its PYTHONPATH
# What a child may inherit from the worker's environment: tool settings, never credentials.
ENV_ALLOWED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TESSDATA_PREFIX", "OMP_THREAD_LIMIT")


@dataclass
class Zygote:
    """The process every child of a pool is forked from (docjobs/isolation/sandbox_child.py)."""

    process: subprocess.Popen[bytes]
    control: socket.socket  # fork requests: one message, the child's two pipe ends attached
    root: SandboxRoot | None = None  # a confined zygote's writable root, reached from its first child

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Close its control socket, on which it kills its children and ends; wait for that. Its writable root goes
        once no attempt holds it."""
        self.control.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.root is not None:
            self.root.retire()


class ZygoteGone(Exception):
    """The zygote ended before it forked the child asked of it."""


def child_environment(
    memory_mb: int,
    control: int,
    entries: str,
    home: Path,
    confinement: Confinement | None = None,
    preload: tuple[str, ...] | None = None,
) -> dict[str, str]:
    """The zygote's whole environment (and so its children's): the allow-list, plus what the zygote needs.
    `preload`: the modules of its queue's stages that it imports ahead (None: those of every queue)."""
    env = {name: os.environ[name] for name in ENV_ALLOWED if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LC_ALL", "C.UTF-8")
    # Times a child writes are UTC, whatever the worker's zone: a visible signature's stamp shows its signing time,
    # and the release gate draws the same stamp to compare (docjobs/pdf/release_gate.py).
    env["TZ"] = "UTC"
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
        **({PRELOAD_ENV: ",".join(preload)} if preload is not None else {}),
        **(confinement.environment() if confinement is not None else {}),
    }


@dataclass
class Spawner:
    """One long-lived thread starts the zygote and asks it for every child: `PR_SET_PDEATHSIG` fires when the
    *thread* that started the zygote ends, so it must not be a thread that comes and goes (activity threads
    may). The zygote is touched by this thread only."""

    memory_mb: int
    entries: str  # the module whose ENTRIES the children serve
    home: Path
    confinement: Confinement | None
    preload: tuple[str, ...] | None = None  # the zygote's (child_environment)
    requests: queue.SimpleQueue[Future[ChildProcess] | None] = field(default_factory=queue.SimpleQueue)
    thread: threading.Thread | None = None
    zygote: Zygote | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="docjobs-child-spawner", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """End the thread, which stops the zygote (and with it the children still running a task)."""
        self.requests.put(None)
        if self.thread is not None:
            self.thread.join(timeout=SPAWN_TIMEOUT_SECONDS)

    def ask(self, future: Future[ChildProcess]) -> None:
        """Ask for a child, handed over in `future` (or the reason there is none)."""
        self.requests.put(future)

    def spawn(self) -> ChildProcess:
        """A new child, waited for."""
        future: Future[ChildProcess] = Future()
        self.ask(future)
        return future.result(timeout=SPAWN_TIMEOUT_SECONDS)

    def zygote_pid(self) -> int | None:
        zygote = self.zygote
        return zygote.process.pid if zygote is not None and zygote.alive() else None

    def live_root(self) -> SandboxRoot | None:
        """The writable root of the zygote's sandbox, while that zygote lives (confined pools only)."""
        zygote = self.zygote
        if zygote is None or not zygote.alive() or zygote.root is None or not zygote.root.live:
            return None
        return zygote.root

    def _loop(self) -> None:
        while (future := self.requests.get()) is not None:
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self._start_child())
            except Exception as error:  # noqa: BLE001 - handed to whoever waits for this child
                future.set_exception(error)
        if self.zygote is not None:
            self.zygote.stop()

    def _start_child(self) -> ChildProcess:
        """A child forked by the zygote; a zygote found dead is replaced (its children died with it)."""
        try:
            return self._fork(self._live_zygote())
        except ZygoteGone:
            return self._fork(self._live_zygote())

    def _live_zygote(self) -> Zygote:
        zygote = self.zygote
        if zygote is not None and zygote.alive():
            return zygote
        if zygote is not None:
            log.warning("document zygote %d ended (%s): starting another", zygote.process.pid, zygote.process.poll())
            zygote.stop()
        self.zygote = zygote = self._start_zygote()
        return zygote

    def _start_zygote(self) -> Zygote:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-P", "-m", "docjobs.isolation.sandbox_child"]
        env = child_environment(
            self.memory_mb, theirs.fileno(), self.entries, self.home, self.confinement, self.preload
        )
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
        return Zygote(process, ours)

    def _fork(self, zygote: Zygote) -> ChildProcess:
        """Ask the zygote for a child (its task pipe and channel attached); waits for the child's pid, which the
        zygote writes on the channel before anything else can be. The first request waits for its imports."""
        tasks_read, tasks_write = os.pipe()
        channel_read, channel_write = os.pipe()
        child = ChildProcess(0, os.fdopen(tasks_write, "wb"), channel_read)
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
                    raise ZygoteGone()
                raise ChildCrashed("the zygote could not fork a document child")
            forked = next((message for message in messages if isinstance(message, Forked)), None)
            if forked is not None:
                return self._found(zygote, child, forked.pid)
        child.ended = True  # no pid to signal: the zygote, stuck, is replaced with its children
        child.reap()
        zygote.process.kill()
        raise ChildCrashed("the document child did not start")

    def _found(self, zygote: Zygote, child: ChildProcess, pid: int) -> ChildProcess:
        """The child with the pid the worker knows it by (the zygote reported `pid`, as it sees it)."""
        outer = pid if self.confinement is None else outer_pid(zygote.process.pid, pid)
        if outer is None:  # never seen from here: a pid the worker must not signal
            child.ended = True
            child.reap()
            raise ChildCrashed("the document child could not be found from the worker")
        child.pid = outer
        if self.confinement is not None and zygote.root is None:
            try:  # its first child, which has read no task yet: the sandbox's processes are all still ours
                zygote.root = open_sandbox_root(outer, pid, self.confinement.writable)
            except OSError as error:
                child.kill()
                raise ChildCrashed("the sandbox's work folder could not be reached") from error
        child.root = zygote.root
        return child


def outer_pid(root: int, inner: int) -> int | None:
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
