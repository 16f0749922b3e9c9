"""The boundary around a tenant's document children: bubblewrap (`bwrap`, Debian's `bubblewrap`).

A pool's zygote (docjobs/isolation/sandbox_child.py), and so every child it forks and every tool a child runs, starts
inside a bwrap sandbox that has

- its own network namespace (no interface: not even loopback is up), PID, IPC, UTS and cgroup namespaces: it
  sees only its own processes, cannot signal the worker or another tenant's children, and everything in it dies
  with its zygote (bwrap's init is the namespace's PID 1);
- a file system of its own: the runtime read-only (/usr and the system libraries, the Python installation and
  the virtualenv, the code, the few /etc files tools read), a fresh /dev, a private /proc, small tmpfs /tmp and
  /dev/shm, and one writable folder, the tenant's work root, where the worker puts each attempt's folder: a tmpfs
  of the sandbox's own (`max_work_mb`, DOCJOBS_SANDBOX_WORK_MB), which the worker reaches through /proc
  (docjobs/isolation/sandbox_root.py): nothing a child writes reaches the worker's disk. No data dir (blobs,
  tenants.json, signing/), no /run/secrets, no other tenant's folders, no home;
- no root, and a user namespace of its own that cannot make another (`--unshare-user`, `--disable-userns`). An
  unprivileged worker's bwrap makes it, as the worker's uid. A root worker's bwrap sets the sandbox up as root
  (it binds what root may reach), with only CAP_SETUID/CAP_SETGID, and runs one program in it: `setpriv`, which
  becomes the tenant's own unprivileged uid (`SANDBOX_UID_BASE` + a slot derived from the tenant's name: another
  tenant's pool never has it) with no group, capability or bounding set left, and runs a second, unprivileged
  bwrap that makes the user namespace (`--dev-bind / /`: the same file system) and starts the zygote in it. Nothing
  of the tenant's runs before that: the zygote never holds root or a capability;
- `no_new_privs` (bwrap sets it), a new session (no TIOCSTI into the worker's terminal), death with the worker
  (`--die-with-parent`), and a seccomp filter that refuses mount, namespaces, ptrace, BPF, keyrings,
  modules, kexec, userfaultfd, io_uring and the like. It exists for x86_64 only: elsewhere no sandbox starts, and a
  confined worker refuses to. In a root worker's sandbox the filter is the inner bwrap's, loaded last.

The limits inside (hard CPU = soft, processes, file size) are set by the zygote and its children
(docjobs/isolation/sandbox_child.py), from the environment this module adds. So are each child's Landlock rules
(docjobs/isolation/landlock.py): the paths bound read-only here (`READABLE_ENV`) are all it may read besides /proc and
its own folders; it may write only its private folder and its attempt's folder, no other job's of the tenant.
"""

from __future__ import annotations

import os
import platform
import shutil
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SANDBOX_MODES = ("bwrap", "unconfined")
SANDBOX_UID_BASE = 200_000  # a root worker's sandboxes run as SANDBOX_UID_BASE + slot (a slot per tenant)
NPROC_ENV = "DOCJOBS_CHILD_MAX_PROCESSES"
FSIZE_ENV = "DOCJOBS_CHILD_MAX_FILE_MB"
CONFINED_ENV = "DOCJOBS_CHILD_CONFINED"
READABLE_ENV = "DOCJOBS_CHILD_READABLE"  # what a child's Landlock rules let it read (os.pathsep between paths)
TMPFS_BYTES = 64 << 20  # /tmp and /dev/shm inside: the work happens in the attempt folder

# What tools read from /etc; nothing else of it is visible (no shadow, no machine secrets).
ETC_ENTRIES = (
    "alternatives",
    "ca-certificates",
    "fonts",
    "ghostscript",
    "group",
    "ImageMagick-6",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "libpaper.d",
    "libreoffice",  # LibreOffice's shared configuration (its share/registry links here)
    "localtime",
    "magic",
    "mime.types",
    "nsswitch.conf",
    "papersize",
    "passwd",
    "ssl",
)
SYSTEM_DIRS = ("/usr", "/var/lib/ghostscript", "/var/cache/fontconfig")
MERGED_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# seccomp: x86_64 system calls a document child never needs, refused with EPERM.
_X86_64_DENIED = {
    "ptrace": 101,
    "vhangup": 153,
    "pivot_root": 155,
    "adjtimex": 159,
    "chroot": 161,
    "acct": 163,
    "settimeofday": 164,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "iopl": 172,
    "ioperm": 173,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "lookup_dcookie": 212,
    "clock_settime": 227,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}
_X86_64_CLONE, _X86_64_CLONE3 = 56, 435
_AUDIT_ARCH_X86_64 = 0xC000003E
_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_RET_KILL, _RET_ALLOW, _RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06


class SandboxUnavailable(Exception):
    """The boundary cannot be set up on this machine (no bwrap, namespaces refused)."""


def seccomp_filter() -> bytes | None:
    """The BPF program (struct sock_filter[]) bwrap loads with `--seccomp`; None where there is none (not x86_64).

    Refused with EPERM: the calls in `_X86_64_DENIED`, `clone` asking for a namespace, and x32 calls;
    `clone3` answers ENOSYS (its flags cannot be inspected), so the C library falls back to `clone`."""
    if platform.machine() != "x86_64":
        return None
    program: list[tuple[int, int, int, int]] = []  # (code, jt, jf, k); jt/jf are filled in once targets are known
    jumps: list[tuple[int, str | None, str | None]] = []  # instruction index, its jt and jf targets by label

    def emit(code: int, k: int, jt: str | None = None, jf: str | None = None) -> None:
        if jt is not None or jf is not None:
            jumps.append((len(program), jt, jf))
        program.append((code, 0, 0, k))

    emit(_LD_ABS_W, 4)  # seccomp_data.arch
    emit(_JEQ, _AUDIT_ARCH_X86_64, jf="kill")
    emit(_LD_ABS_W, 0)  # seccomp_data.nr
    emit(_JGE, 0x40000000, jt="eperm")  # the x32 ABI
    for number in sorted(_X86_64_DENIED.values()):
        emit(_JEQ, number, jt="eperm")
    emit(_JEQ, _X86_64_CLONE3, jt="enosys")
    emit(_JEQ, _X86_64_CLONE, jf="allow")
    emit(_LD_ABS_W, 16)  # seccomp_data.args[0], low 32 bits: clone's flags
    emit(_JSET, _NAMESPACE_FLAGS, jt="eperm", jf="allow")
    labels = {"allow": len(program), "eperm": len(program) + 1, "enosys": len(program) + 2, "kill": len(program) + 3}
    program += [
        (_RET, 0, 0, _RET_ALLOW),
        (_RET, 0, 0, _RET_ERRNO | _EPERM),
        (_RET, 0, 0, _RET_ERRNO | _ENOSYS),
        (_RET, 0, 0, _RET_KILL),
    ]
    for index, jt, jf in jumps:
        code, _, _, k = program[index]
        program[index] = (
            code,
            labels[jt] - index - 1 if jt else 0,
            labels[jf] - index - 1 if jf else 0,
            k,
        )
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


def _bwrap() -> str:
    return _tool("bwrap", "bubblewrap")


def _tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SandboxUnavailable(f"{name} (Debian package {package}) is not installed")
    return path


@dataclass(frozen=True)
class Confinement:
    """One pool's sandbox: `writable` is the only folder it may write (a tmpfs of `max_work_mb` mounted at that
    path), `slot` picks the uid a root worker's sandbox runs as."""

    writable: Path
    code: tuple[Path, ...] = ()  # the packages the zygote imports (docjobs, the entries' package), not the checkout
    slot: int = 0
    max_processes: int = 128
    max_file_mb: int = 2048
    max_work_mb: int = 2048

    @property
    def uid(self) -> int:
        return SANDBOX_UID_BASE + self.slot if os.geteuid() == 0 else os.geteuid()

    def environment(self) -> dict[str, str]:
        """What the zygote needs to know of its boundary (added to its allow-listed environment)."""
        env = {NPROC_ENV: str(self.max_processes), FSIZE_ENV: str(self.max_file_mb), CONFINED_ENV: "1"}
        readable = [destination for _, destination in self._read_only()] + list(MERGED_DIRS)
        env[READABLE_ENV] = os.pathsep.join(readable)
        return env

    @property
    def zygote_parent(self) -> int:
        """The zygote's parent in the sandbox's PID namespace: its init (bwrap, pid 1), or in a root worker's sandbox
        the inner bwrap that init starts (pid 2). Both die with the worker."""
        return 2 if os.geteuid() == 0 else 1

    def _read_only(self) -> list[tuple[str, str]]:
        """The runtime bound read-only inside (source, destination): also all a child's Landlock rules let it read
        (besides /proc and its own folders)."""
        binds: list[tuple[str, str]] = [(directory, directory) for directory in SYSTEM_DIRS if Path(directory).is_dir()]
        binds += [(f"/etc/{entry}", f"/etc/{entry}") for entry in ETC_ENTRIES if Path(f"/etc/{entry}").exists()]
        binds += [(str(path), str(path)) for path in runtime_paths(self.code)]
        return binds

    def command(self, argv: Sequence[str], seccomp_fd: int | None) -> list[str]:
        """`argv` run inside the sandbox (run from an absolute path: bwrap's own PATH lookup is the host's).

        Never without a seccomp filter (`seccomp_fd`, from `seccomp_filter`): with `--disable-userns` it refuses a
        child a user or network namespace of its own (and the kernel code only they reach). Where there is none
        (not x86_64) no sandbox starts: SandboxUnavailable."""
        if seccomp_fd is None:
            raise SandboxUnavailable(f"there is no seccomp filter for this machine ({platform.machine()}), only x86_64")
        args = [_bwrap(), "--die-with-parent", "--new-session"]
        args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        own_namespace = ["--unshare-user", "--uid", str(self.uid), "--disable-userns", "--seccomp", str(seccomp_fd)]
        if os.geteuid() == 0:  # set up as root, then the inner, unprivileged bwrap below (the module's docstring)
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            args += [*own_namespace, "--gid", str(os.getegid())]
        args += ["--hostname", "docjobs-child"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--size", str(TMPFS_BYTES), "--tmpfs", "/tmp", "--size", str(TMPFS_BYTES), "--tmpfs", "/dev/shm"]
        binds = self._read_only()
        # The folders leading to what is bound are made by bwrap, readable by the sandbox's uid too.
        destinations = [Path(destination) for _, destination in binds] + [self.writable]
        for folder in sorted({parent for path in destinations for parent in path.parents if parent != Path("/")}):
            args += ["--perms", "0755", "--dir", str(folder)]
        for directory in MERGED_DIRS:
            path = Path(directory)
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), directory]
            elif path.is_dir():
                binds.append((directory, directory))
        for source, destination in binds:
            args += ["--ro-bind", source, destination]
        # The writable root is a tmpfs of the sandbox's own, `max_work_mb` at most: what a child writes fills it, not
        # the worker's disk, and dies with the sandbox. A root worker's tenant uid (set below) must write in it.
        mode = "0777" if os.geteuid() == 0 else "0700"
        args += ["--perms", mode, "--size", str(self.max_work_mb << 20), "--tmpfs", str(self.writable)]
        args += ["--chdir", str(self.writable)]
        if os.geteuid() == 0:
            uid = str(self.uid)
            args += ["--", _tool("setpriv", "util-linux"), "--reuid", uid, "--regid", uid, "--clear-groups"]
            args += ["--inh-caps=-all", "--bounding-set=-all", _bwrap(), *own_namespace, "--gid", uid]
            args += ["--dev-bind", "/", "/", "--chdir", str(self.writable)]  # the same view, its /dev included
        return [*args, "--", *argv]


def runtime_paths(code: Sequence[Path]) -> list[Path]:
    """What Python and the code are made of, read-only inside: the installation, the virtualenv, the code's
    packages (never the whole checkout: it may hold a data dir or ops/secrets), the OCR language data
    (TESSDATA_PREFIX). A symlinked path is bound at its target."""
    candidates = [Path(sys.base_prefix), Path(sys.prefix), *code]
    if tessdata := os.environ.get("TESSDATA_PREFIX"):
        candidates.append(Path(tessdata))
    paths: list[Path] = []
    for candidate in candidates:
        resolved = candidate.resolve()
        if not resolved.is_dir() or any(resolved.is_relative_to(known) for known in paths):
            continue
        if any(str(resolved).startswith(prefix + "/") for prefix in SYSTEM_DIRS):
            continue
        paths = [known for known in paths if not known.is_relative_to(resolved)] + [resolved]
    return sorted(paths)


def python_inside() -> str:
    """The Python the sandbox runs: the virtualenv's, by its resolved folder (only that one is bound inside)."""
    executable, prefix = Path(sys.executable), Path(sys.prefix)
    if executable.is_relative_to(prefix):
        return str(prefix.resolve() / executable.relative_to(prefix))
    return str(executable)


def check_sandbox(writable: Path) -> None:
    """Start a throwaway sandbox that proves the boundary can be set up here; raises SandboxUnavailable if not.

    A machine with no seccomp filter (not x86_64) cannot: without one a taken-over child could make a user and a
    network namespace of its own (Landlock does not restrict that), and from there reach kernel code that only
    namespaces reach, the usual way to root. The worker then refuses to start confined (`worker.sandbox_ready`)."""
    writable.mkdir(parents=True, exist_ok=True)
    confinement = Confinement(writable, code=(Path(__file__).resolve().parents[1],))  # docjobs/
    program = seccomp_filter()
    if program is None:
        raise SandboxUnavailable(f"there is no seccomp filter for this machine ({platform.machine()}), only x86_64")
    read_end = os.memfd_create("docjobs-seccomp")
    os.write(read_end, program)
    os.lseek(read_end, 0, os.SEEK_SET)
    pass_fds = (read_end,)
    # Asks for the Landlock ABI its children restrict themselves with (docjobs/isolation/landlock.py): exit status 3
    # where there is none.
    probe = "import sys; from docjobs.isolation.landlock import abi_version; sys.exit(0 if abi_version() >= 1 else 3)"
    try:
        done = subprocess.run(
            confinement.command([python_inside(), "-S", "-c", probe], read_end),
            env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
            pass_fds=pass_fds,
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SandboxUnavailable(f"bwrap could not be run: {error}") from None
    finally:
        os.close(read_end)
    if done.returncode == 3:
        raise SandboxUnavailable("Landlock (Linux 5.13 or later, enabled in the kernel's LSM list) is not available")
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise SandboxUnavailable(f"bwrap could not set up the sandbox: {reason[-1] if reason else done.returncode}")
