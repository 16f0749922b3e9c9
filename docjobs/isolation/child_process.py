"""The worker's side of one document child: the pipes it was forked with, the messages it sends, its end.

A child (forked by its pool's zygote, docjobs/isolation/zygote.py) reads tasks on its task pipe and answers on its
channel in JSON lines, each a message of docjobs/isolation/protocol.py that is validated here: a line beyond
MAX_MESSAGE_BYTES, unreadable or malformed is a crash. The zygote writes on the channel too, first the child's pid
and, once it has reaped the child, the kernel's account of it (exit status, CPU seconds, peak memory) as the
channel's last message. So the channel reaches its end only once the child's pid is free: until then, a signal to
its process group cannot reach anyone else.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from docjobs.isolation.protocol import (
    ChildMessage,
    Exited,
    MalformedMessage,
    Task,
    TaskUsage,
    UnreadableMessage,
    read_child_message,
    task_usage,
)
from docjobs.isolation.sandbox_root import SandboxRoot

log = logging.getLogger("docjobs.sandbox")  # the name operators filter on: kept across the move

POLL_SECONDS = 0.2
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
SPAWN_TIMEOUT_SECONDS = 60.0


class ChildStopped(Exception):
    """The caller asked to stop (cancel or lost lease): the child's process group was killed."""


class ChildCrashed(Exception):
    """The child failed outside the failure codes (a bug, a signal): transient until proven otherwise."""


@dataclass(frozen=True)
class KernelAccount:
    """The kernel's account of a child that ended, as its zygote reaped it."""

    status: int  # as os.wait4 gives it
    cpu_seconds: float  # the child's and its tools' together, over its whole life
    peak_memory_mb: float


def kernel_account(exited: Exited) -> KernelAccount:
    return KernelAccount(exited.status, max(exited.cpu, 0.0), max(exited.maxrss_kb, 0) / 1024)


@dataclass
class ChildProcess:
    pid: int
    tasks: BinaryIO  # write end of the child's task pipe
    channel: int  # read end of the child's message pipe (the zygote writes in it too: first and last)
    tasks_done: int = 0
    buffer: bytes = b""
    ended: bool = False  # the channel reached its end: the zygote has reaped the child, its pid may be reused
    account: KernelAccount | None = None
    cpu_accounted: float = 0.0  # CPU seconds (tools included) the child had used when its current task began
    reported: TaskUsage | None = None  # what the current task cost, as the child reported it
    root: SandboxRoot | None = None  # a confined child's: its sandbox's writable root (isolation/sandbox_root.py)

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
        return [message for line in lines if (message := self._message(line)) is not None]

    def _message(self, line: bytes) -> ChildMessage | None:
        """The message of one line; None for one of an unknown kind and for the zygote's account (kept)."""
        try:
            message = read_child_message(line)
        except UnreadableMessage:
            raise ChildCrashed("unreadable message") from None
        except MalformedMessage as malformed:
            if malformed.kind != "exited":
                raise ChildCrashed(str(malformed)) from None
            self.account = None  # the kernel's account unreadable: as if the zygote had ended
            return None
        if isinstance(message, Exited):
            self.account = kernel_account(message)
            return None
        return message

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
