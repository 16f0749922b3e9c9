"""A live sandbox's writable root, as the worker reaches it.

A confined pool's sandbox writes only in a tmpfs of its own (docjobs/isolation/confine.py, `max_work_mb` at most),
mounted at the tenant's work root in the sandbox's mount namespace: nothing a child writes reaches the worker's
disk, and all of it goes when the sandbox does. The worker puts each attempt's folder there, through a descriptor
of that tmpfs opened from one of the sandbox's own processes (`/proc/PID/root`), and hands its children the same
paths as they see them (`inside`).

The descriptor is opened once per sandbox, from its first child, which has not read a task yet (so not been taken
over), through `/proc/PID` held open: the pid cannot be another process's by then, and its NSpid is checked. No link
is followed on the way down, and the folder reached must be a mount of its own. The worker's path to it is
`/proc/self/fd/N`; while an attempt holds it, the tmpfs lives on even if its sandbox ended (its attempt then fails
as a crash, and is retried in the next sandbox), and once its sandbox is replaced and no attempt holds it, the
descriptor is closed, which frees the tmpfs.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DIRECTORY_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SandboxRootGone(Exception):
    """The sandbox's root was released (its sandbox replaced or stopped) before it could be held."""


class SandboxRoot:
    """The writable root of one sandbox: `path` for the worker, `inside` for the sandbox's processes."""

    def __init__(self, fd: int, inside: Path) -> None:
        self._fd = fd
        self.inside = inside
        self.path = Path(f"/proc/self/fd/{fd}")
        self._holders = 0
        self._retired = False
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def held(self) -> Iterator[SandboxRoot]:
        """Keep the root (its descriptor, so its tmpfs) while the block runs, even if its sandbox is replaced."""
        with self._lock:
            if self._fd < 0:
                raise SandboxRootGone("the sandbox's work folder was released")
            self._holders += 1
        try:
            yield self
        finally:
            with self._lock:
                self._holders -= 1
                self._close_if_done()

    def retire(self) -> None:
        """Its sandbox ended: closed once no attempt holds it."""
        with self._lock:
            self._retired = True
            self._close_if_done()

    @property
    def live(self) -> bool:
        return not self._retired

    def to_inside(self, path: Path) -> Path | None:
        """`path` (the worker's, below `path`) as the sandbox's processes see it; None if it is not below it."""
        if not path.is_relative_to(self.path):
            return None
        return self.inside / path.relative_to(self.path)

    def rebase(self, value: Any) -> Any:
        """`value` (a task's work, as JSON) with every path below the worker's `path` given as seen inside."""
        if isinstance(value, str):
            inside = self.to_inside(Path(value)) if value.startswith(f"{self.path}") else None
            return str(inside) if inside is not None else value
        if isinstance(value, dict):
            return {key: self.rebase(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.rebase(item) for item in value]
        return value

    def free_bytes(self) -> int | None:
        """What is left of the tmpfs (None once it is closed)."""
        with self._lock:
            if self._fd < 0:
                return None
            stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize

    def _close_if_done(self) -> None:
        if self._retired and self._holders == 0 and self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_sandbox_root(pid: int, inner_pid: int, writable: Path) -> SandboxRoot:
    """The writable root `writable` of the sandbox whose process is `pid` here and `inner_pid` in its own PID
    namespace. Raises OSError if it cannot be reached as it must be (the pid gone or another's, a link on the way,
    no mount of its own)."""
    proc = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    opened: list[int] = []
    try:
        status = os.open("status", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc)
        try:
            lines = os.read(status, 1 << 16).decode().splitlines()
        finally:
            os.close(status)
        ids = next((line.split()[1:] for line in lines if line.startswith("NSpid:")), [])
        if len(ids) < 2 or int(ids[-1]) != inner_pid:
            raise OSError(f"process {pid} is not the sandbox's {inner_pid}")
        opened.append(os.open("root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=proc))
        for part in writable.parts[1:]:
            opened.append(os.open(part, DIRECTORY_FLAGS, dir_fd=opened[-1]))
        if len(opened) < 2 or os.fstat(opened[-1]).st_dev == os.fstat(opened[-2]).st_dev:
            raise OSError(f"{writable} is not a mount of the sandbox's own")
        return SandboxRoot(opened.pop(), writable)
    finally:
        for fd in [*opened, proc]:
            os.close(fd)
