"""Landlock: a document child restricts its own file-system access before it runs its task (Linux >= 5.13).

Standard library only (ctypes system calls, x86_64 numbers): imported by the zygote (docjobs/isolation/sandbox_child.py)
before it imports anything else. Inside the tenant's bubblewrap sandbox every child of the tenant sees the same
writable work root; with Landlock each child may then read and execute only beneath the runtime the sandbox
mounts read-only, and read and write only beneath its own folders (its private folder, its attempt's folder):
never another job's folder of the same tenant, nor beside its own in the tenant's root.

Each child makes a domain of its own, so besides files it cannot ptrace (or read the memory of) a sibling, and
where the running ABI knows them (6+) it cannot signal a process outside its domain (a sibling, the zygote) nor
reach an abstract unix socket made outside it; from ABI 4 it may neither bind nor connect a TCP port. Access
rights and scopes the running ABI does not know are masked out (each ABI only adds rights).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import struct
from collections.abc import Iterable

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture but alpha
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
_FS_LATEST = (1 << 16) - 1  # ABI 5 and later
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the rights a rule on a file may grant

READ_EXECUTE = EXECUTE | READ_FILE | READ_DIR
READ_WRITE = _FS_LATEST
DEVICE = READ_FILE | WRITE_FILE | IOCTL_DEV
# The devices tools open (bwrap's fresh /dev has these and little else); never /dev/shm, which all the tenant's
# children share.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


class LandlockUnavailable(Exception):
    """The kernel cannot restrict this process (no Landlock, or it is disabled)."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The running kernel's Landlock ABI (0: none, or not on x86_64/aarch64, whose numbers these are)."""
    if platform.machine() not in ("x86_64", "aarch64"):
        return 0
    version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def _check(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


class Ruleset:
    """A Landlock ruleset being built: rules added one path at a time, then enforced on this process, once.

    Made ahead of the task by a spare child (the runtime's rules, its private folder, the devices), so that when
    its task arrives only the attempt folder's rule is added before the child restricts itself. A ruleset is this
    process's own: never made before a fork (a sibling adding a rule to a shared one would widen this one)."""

    def __init__(self) -> None:
        abi = abi_version()
        if abi < 1:
            raise LandlockUnavailable("Landlock is not available in this kernel")
        self.abi = abi
        self._handled_fs = _FS_BY_ABI.get(abi, _FS_LATEST)
        if abi >= 6:
            attr = struct.pack(
                "=QQQ", self._handled_fs, NET_BIND_TCP | NET_CONNECT_TCP, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            )
        elif abi >= 4:
            attr = struct.pack("=QQ", self._handled_fs, NET_BIND_TCP | NET_CONNECT_TCP)
        else:
            attr = struct.pack("=Q", self._handled_fs)
        self._libc = _libc()
        buffer = ctypes.create_string_buffer(attr, len(attr))
        self._fd: int | None = _check(
            self._libc.syscall(_SYS_CREATE_RULESET, buffer, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)), "ruleset"
        )

    def allow(self, paths: Iterable[str], access: int) -> None:
        """Grant `access` beneath each of `paths` (on a file, only the rights a file can have); a path that does
        not exist is skipped."""
        if self._fd is None:
            raise OSError(errno.EBADF, "this ruleset was enforced or closed already")
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not in this sandbox's view: nothing to allow
            try:
                allowed = access & self._handled_fs
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    allowed &= _FILE_RIGHTS
                rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
                ruleset = ctypes.c_int(self._fd)
                _check(self._libc.syscall(_SYS_ADD_RULE, ruleset, ctypes.c_int(_RULE_PATH_BENEATH), rule, 0), path)
            finally:
                os.close(fd)

    def enforce(self) -> int:
        """Restrict this process (and all it starts) to the rules added; returns the ABI used. `no_new_privs` must
        be set already (bwrap does)."""
        if self._fd is None:
            raise OSError(errno.EBADF, "this ruleset was enforced or closed already")
        try:
            _check(self._libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(self._fd), ctypes.c_uint32(0)), "restrict")
        finally:
            self.close()
        return self.abi

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def prepare(read_execute: Iterable[str], read_write: Iterable[str], devices: Iterable[str] = DEVICES) -> Ruleset:
    """A ruleset that lets this process read and execute beneath `read_execute`, any file access beneath
    `read_write`, read and write the `devices`; more may be added before it is enforced. Raises
    LandlockUnavailable where the kernel has none."""
    ruleset = Ruleset()
    try:
        ruleset.allow(read_execute, READ_EXECUTE)
        ruleset.allow(read_write, READ_WRITE)
        ruleset.allow(devices, DEVICE)
    except BaseException:
        ruleset.close()
        raise
    return ruleset
