"""DOCJOBS_FAULT=compromised-child: a document child taken over by its document (a parser exploit's stand-in).

`render` reads an attack plan from the document's /Subject (`docjobs-attack:{json}`), if it has one, and runs it as
attacker code inside its real child before it renders for real: read the worker's environment, the data dir's
tenants file, the signing key and secrets; connect to local ports; write outside its folder and over the code;
leave a daemon behind (`setsid`), kill the worker, raise its own CPU limit, fork-bomb. What each attempt got is
written to `attack-<pid>.json` in the `attack-log` folder of the tenant's work root, for the test to read: the one
folder, besides its own, that Landlock lets these test children write (`WRITABLE_IN_ROOT`; the shipped stage work
has none), since their attempt folders are gone with their attempts. Every render, planned or not, also appends who
ran it (pid, PID namespace, uid) to `children.jsonl` there.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pikepdf

from docjobs.domain.models import RenderDone
from docjobs.isolation import stage_work
from docjobs.isolation.stage_work import ENTRIES, ProgressFn, RenderWork, render

PLAN_PREFIX = "docjobs-attack:"
DAEMON_MARKER = "DOCJOBS_ATTACK_DAEMON"
LOG_FOLDER = "attack-log"
WRITABLE_IN_ROOT = (LOG_FOLDER,)  # read by the zygote (docjobs/isolation/sandbox_child.py)
# The daemon: beats in the log folder for two minutes, unless something kills it first.
DAEMON = (
    "import sys,time\nfor _ in range(1200):\n    open(sys.argv[1],'w').write(str(time.time()))\n    time.sleep(0.1)\n"
)


def read_plan(source: Path, prefix: str = PLAN_PREFIX) -> dict[str, Any]:
    """The attack a document plans: the JSON after `prefix` in its /Subject (none: {})."""
    with contextlib.suppress(Exception), pikepdf.open(source) as pdf:
        subject = str(pdf.docinfo.get("/Subject", ""))
        if subject.startswith(prefix):
            plan = json.loads(subject[len(prefix) :])
            if isinstance(plan, dict):
                return plan
    return {}


def fork_bomb(count: int) -> str:
    """Fork `count` sleeping processes (killed again at once): succeeds only if nothing stops it first."""
    forked: list[int] = []
    try:
        while len(forked) < count:
            pid = os.fork()
            if pid == 0:
                try:
                    time.sleep(60)
                finally:
                    os._exit(0)
            forked.append(pid)
    except OSError as error:
        raise OSError(error.errno, f"stopped after {len(forked)} forks: {error.strerror}") from None
    finally:
        for pid in forked:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    return f"{len(forked)} forks"


def raise_cpu_limit() -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    higher = 10**6 if hard == resource.RLIM_INFINITY else hard + 3600
    resource.setrlimit(resource.RLIMIT_CPU, (higher, higher))
    return f"raised from soft {soft} hard {hard}"


def replace_code(path: str) -> str:
    staged = Path(os.environ.get("TMPDIR", "/tmp")) / "evil.py"
    staged.write_text("raise SystemExit('owned')\n")
    os.replace(staged, path)
    return "replaced"


def read(path: str) -> str:
    return Path(path).read_bytes()[:4096].decode("latin-1")


def connect(port: int) -> str:
    socket.create_connection(("127.0.0.1", port), timeout=3).close()
    return "connected"


def capabilities() -> dict[str, int]:
    """This process's capability sets (/proc/self/status: permitted, effective, inheritable, ambient, bounding)."""
    lines = Path("/proc/self/status").read_text().splitlines()
    return {line[:6]: int(line.split()[1], 16) for line in lines if line.startswith("Cap")}


def libc_call(name: str, *args: object) -> str:
    """A system call through the C library (what shellcode would do): raises what it answered."""
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return f"{name} succeeded"


def attack(plan: dict[str, Any], root: Path) -> dict[str, dict[str, object]]:
    report: dict[str, dict[str, object]] = {}

    def attempt(name: str, action: Callable[[], object]) -> None:
        try:
            report[name] = {"succeeded": True, "detail": str(action())[:300]}
        except BaseException as error:  # noqa: BLE001 - what stopped it is the finding
            report[name] = {"succeeded": False, "detail": f"{type(error).__name__}: {error}"[:300]}

    for name, path in plan.get("read", {}).items():
        attempt(f"read {name}", functools.partial(read, path))
    for name, folder in plan.get("list", {}).items():
        attempt(f"list {name}", functools.partial(os.listdir, folder))
    for name, port in plan.get("connect", {}).items():
        attempt(f"connect {name}", functools.partial(connect, port))
    for name, path in plan.get("write", {}).items():
        attempt(f"write {name}", functools.partial(Path(path).write_bytes, b"written by a document child"))
    if code := plan.get("code"):
        attempt("append to the code", lambda: open(code, "ab").write(b"\nraise SystemExit('owned')\n"))  # noqa: SIM115
        attempt("replace the code", lambda: replace_code(code))
    if worker := plan.get("worker_pid"):
        attempt("kill the worker", lambda: os.kill(int(worker), signal.SIGKILL))
    attempt("raise its CPU limit", raise_cpu_limit)
    attempt("make a user namespace", functools.partial(libc_call, "unshare", 0x10000000))  # CLONE_NEWUSER
    attempt("mount a tmpfs", functools.partial(libc_call, "mount", b"none", b"/tmp", b"tmpfs", 0, None))
    if count := plan.get("fork_bomb"):
        attempt("fork-bomb", lambda: fork_bomb(int(count)))
    if plan.get("daemon"):
        environment = {**os.environ, DAEMON_MARKER: str(plan["daemon"])}
        beat = str(root / "daemon-beat")
        attempt(
            "start a daemon",
            lambda: subprocess.Popen([sys.executable, "-c", DAEMON, beat], start_new_session=True, env=environment).pid,
        )
    return report


def attacked_render(work: RenderWork, progress: ProgressFn) -> RenderDone:
    root = work.workdir.parent / LOG_FOLDER  # in the tenant's work root, where every attempt's folder is
    plan = read_plan(work.source)
    who = {"pid": os.getpid(), "pidns": os.readlink("/proc/self/ns/pid"), "uid": os.getuid()}
    who["userns"] = os.readlink("/proc/self/ns/user")
    who["capabilities"] = capabilities()
    who["label"] = plan.get("label")
    with (root / "children.jsonl").open("a") as log:
        log.write(json.dumps(who) + "\n")
    if plan:
        report = attack(plan, root)
        (root / f"attack-{os.getpid()}.json").write_text(json.dumps(report))
    return render(work, progress)


ENTRIES = {**ENTRIES, "render": replace(stage_work.RENDER, run=attacked_render)}
