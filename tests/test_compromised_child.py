"""A document child taken over by its document is still inside its boundary (issue 23, items 2 and 8).

A real worker (tests/fault_worker.py, `compromised-child`) whose `render` runs the attack a document plans,
inside its real, sandboxed child, during a real job (tests/faults/compromised_child.py). Every attempt must fail,
the worker must be unharmed, and the next job must succeed. Two tenants' tasks never meet in one child. And a
document that took over render, sign and verify at once gets no signature (`compromised-release`: the release gate).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pikepdf
import pytest

from docjobs.domain.errors import DocJobError
from docjobs.domain.job_status import JobStatus, TransitionRecord
from docjobs.domain.stage_cost import CpuBudget
from docjobs.domain.states import JobState, Stage
from docjobs.isolation.child_pool import ChildLimits, ChildPool
from docjobs.isolation.child_process import ChildCrashed
from docjobs.isolation.confine import Confinement
from docjobs.isolation.protocol import TaskUsage
from docjobs.isolation.tenant_pools import TenantPools, tenant_root
from docjobs.settings.tenants import add_tenant
from docjobs.signing.dev_ca import ensure_dev_signer
from docjobs.store.storage import copy_left_file, job_prefix
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.poller import validate_history
from tests.conftest import FAULT_WORKER, REPO, Env, StartWorker, WorkerProcess, wait_terminal
from tests.faults.compromised_child import DAEMON_MARKER, LOG_FOLDER, PLAN_PREFIX
from tests.faults.compromised_release import PLAN_PREFIX as RELEASE_PLAN_PREFIX
from tests.fixtures.samples import make_sample_pdf
from tests.fixtures.statuses import a_status
from tests.sandbox_entries import Order, Seen
from tests.sandbox_view import descendants, own_uid, sandbox_view, sandbox_views
from tests.test_jobs import job_files

QUEUE = "docjobs-compromised"
CANARY = f"canary-{uuid.uuid4().hex}"  # in the worker's environment: must never reach a child
NPROC = 128  # the sandbox's process limit (docjobs.isolation.confine.Confinement.max_processes)


@pytest.fixture(scope="module")
def attacked_worker(start_worker: StartWorker) -> WorkerProcess:
    return start_worker(
        QUEUE,
        script=FAULT_WORKER,
        DOCJOBS_FAULT="compromised-child",
        AWS_SECRET_ACCESS_KEY=CANARY,
        DOCJOBS_CODEC_TOKEN=CANARY,
    )


@pytest.fixture
async def queue_jobs(env: Env, attacked_worker: WorkerProcess) -> JobClient:
    settings = env.settings(DOCJOBS_TASK_QUEUE=QUEUE)
    return JobClient(await connect(settings), settings)


@pytest.fixture
def api_stand_in() -> Iterator[int]:
    """A listening TCP port on loopback, as the HTTP API's would be (any local port is as far out of reach)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield int(server.getsockname()[1])


@pytest.fixture
def secret_stand_in() -> Iterator[Path]:
    """A secret where compose mounts them from (ops/secrets/, gitignored), outside any temporary folder."""
    folder = REPO / "ops" / "secrets"
    folder.mkdir(parents=True, exist_ok=True)
    secret = folder / f"stand-in-{uuid.uuid4().hex}"
    secret.write_text(CANARY)
    yield secret
    secret.unlink()


def planned_document(path: Path, plan: dict[str, Any]) -> Path:
    make_sample_pdf(path, pages=1)
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        pdf.docinfo["/Subject"] = PLAN_PREFIX + json.dumps(plan)
        pdf.save(path)
    return path


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"{DAEMON_MARKER}={marker}".encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_until(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())


async def run_job(jobs: JobClient, document: Path, tenant: str) -> JobStatus:
    submitted = await jobs.submit(document, "standard", tenant=tenant, key=f"attack-{uuid.uuid4().hex}")
    return await wait_terminal(jobs, submitted.job_id)


async def test_a_compromised_child_reaches_nothing_and_the_worker_goes_on(
    env: Env,
    queue_jobs: JobClient,
    attacked_worker: WorkerProcess,
    moto_endpoint: str,
    api_stand_in: int,
    secret_stand_in: Path,
    tmp_path: Path,
) -> None:
    settings = queue_jobs.settings
    data_dir = settings.data_dir
    add_tenant(settings.tenants_file, f"probe-{uuid.uuid4().hex[:8]}")  # tenants.json exists, with a secret in it
    signer = ensure_dev_signer(data_dir / "signing")
    assert signer.key_path is not None
    tenant = "mallory"
    marker = uuid.uuid4().hex
    root = tenant_root(settings.work_dir / "general", tenant)  # as the sandbox sees it: a tmpfs of its own there
    other_root = tenant_root(settings.work_dir / "general", "victim")
    other_root.mkdir(parents=True, exist_ok=True)
    # The tenant's sandbox, started by a plain job; the test reaches its root as the worker does, through /proc.
    plain = tmp_path / "plain.pdf"
    make_sample_pdf(plain, pages=1)
    assert (await run_job(queue_jobs, plain, tenant)).state is JobState.SUCCEEDED

    def seen(path: Path) -> Path:
        """`path`, as the sandbox sees it, reached from here: through a process of the sandbox alive now (the one
        that served the last look may have ended since, a child retired after its attack), and there must be one."""
        if not path.is_relative_to(root):
            return path
        return sandbox_view(attacked_worker.process.pid, root / LOG_FOLDER).parent / path.relative_to(root)

    # Another job of the SAME tenant, running while the attacker's does: its attempt folder is in the same work
    # root, the same sandbox's, owned by the same uid. Planted there, open to every uid, so that only the child's
    # own Landlock rules (docjobs/isolation/landlock.py) keep it out.
    neighbour = root / f"render-neighbour-{marker}"
    seen(neighbour).mkdir(mode=0o777)
    seen(neighbour).chmod(0o777)
    (seen(neighbour) / "input.pdf").write_text(CANARY)
    (seen(neighbour) / "input.pdf").chmod(0o666)
    outside = {
        "blobs": data_dir / "blobs" / f"attack-{marker}",
        "work folder": settings.work_dir / f"attack-{marker}",
        "another tenant's folder": other_root / f"attack-{marker}",
        "code root": REPO / f"attack-{marker}",
        "beside its own folder": root / f"attack-{marker}",
        "another job's folder": neighbour / f"attack-{marker}",
    }
    code = REPO / "docjobs" / "isolation" / "stage_work.py"
    code_before = code.read_bytes()
    plan: dict[str, Any] = {
        "read": {
            "worker environ": f"/proc/{attacked_worker.process.pid}/environ",
            "tenants.json": str(settings.tenants_file),
            "signing key": str(signer.key_path),
            "secret": str(secret_stand_in),
            "/run/secrets": "/run/secrets/codec_keys",
            "another job's file": str(neighbour / "input.pdf"),
        },
        "list": {
            "data dir": str(data_dir),
            "run secrets": "/run/secrets",
            "worker's /proc": f"/proc/{attacked_worker.process.pid}",
            "another job's folder": str(neighbour),
            "its tenant's work root": str(root),
        },
        "connect": {
            "temporal": int(env.vars["DOCJOBS_TEMPORAL_PORT"]),
            "s3": int(moto_endpoint.rsplit(":", 1)[1]),
            "api": api_stand_in,
        },
        "write": {name: str(path) for name, path in outside.items()},
        "code": str(code),
        "worker_pid": attacked_worker.process.pid,
        "fork_bomb": 3 * NPROC,
        "daemon": marker,
        "label": "attack",
    }
    status = await run_job(queue_jobs, planned_document(tmp_path / "attack.pdf", plan), tenant)
    assert status.state is JobState.SUCCEEDED, status  # the attack failed; the document was rendered all the same

    log = seen(root / LOG_FOLDER)
    reports = [json.loads(path.read_text()) for path in log.glob("attack-*.json")]
    assert len(reports) == 1
    report = reports[0]
    expected = {f"read {name}" for name in plan["read"]} | {f"list {name}" for name in plan["list"]}
    expected |= {f"connect {name}" for name in plan["connect"]} | {f"write {name}" for name in outside}
    expected |= {"append to the code", "replace the code", "kill the worker", "raise its CPU limit", "fork-bomb"}
    expected |= {"make a user namespace", "mount a tmpfs"}
    assert expected <= set(report)
    succeeded = {name: outcome["detail"] for name, outcome in report.items() if outcome["succeeded"]}
    # The data dir's path exists inside only as the way to the tenant's own work root: nothing else is in it.
    assert succeeded.pop("list data dir", "['work']") == "['work']"
    assert set(succeeded) <= {"start a daemon"}, succeeded
    assert CANARY not in json.dumps(report)
    details = {name: str(outcome["detail"]) for name, outcome in report.items()}
    assert "No such file" in details["read worker environ"]  # the worker is not in its PID namespace
    assert "ProcessLookupError" in details["kill the worker"]
    # Its network namespace has only a loopback of its own (bwrap brings it up): nothing listens there; and its
    # Landlock rules (ABI 4 and later) refuse any TCP connect before that.
    refusals = ("Permission denied", "Connection refused")
    assert all(any(r in details[f"connect {name}"] for r in refusals) for name in plan["connect"]), details
    assert "No such file" in details["read signing key"] and "No such file" in details["read tenants.json"]
    assert "Permission denied" in details["append to the code"]  # not its uid's, and read-only besides
    assert "cross-device" in details["replace the code"]  # the code is another (read-only) mount
    assert "not allowed to raise" in details["raise its CPU limit"]  # hard = soft
    # The seccomp filter's answer (an unprivileged process could make a user namespace on this kernel otherwise).
    assert "Operation not permitted" in details["make a user namespace"]
    assert "Operation not permitted" in details["mount a tmpfs"]
    # Landlock: nothing of its own tenant's work root but its own folders (a job of its tenant, the same uid).
    for name in ("read another job's file", "list another job's folder", "list its tenant's work root"):
        assert "Permission denied" in details[name], (name, details[name])
    for name in ("write beside its own folder", "write another job's folder"):
        assert "Permission denied" in details[name], (name, details[name])
    assert [path.name for path in seen(neighbour).iterdir()] == ["input.pdf"]
    assert (seen(neighbour) / "input.pdf").read_text() == CANARY
    assert "stopped after" in str(report["fork-bomb"]["detail"])  # RLIMIT_NPROC, not the attacker, ended it
    assert int(str(report["fork-bomb"]["detail"]).split("after ")[1].split()[0]) < NPROC

    # It ran in a user namespace that is not the worker's (so `--disable-userns` applies: the filter is not the
    # only refusal), holding no capability: a root worker's sandbox too, whose bwrap set it up as root.
    worker_userns = os.readlink(f"/proc/{attacked_worker.process.pid}/ns/user")
    children = [json.loads(line) for line in (log / "children.jsonl").read_text().splitlines()]
    assert children and all(child["userns"] != worker_userns for child in children)
    held = [child["capabilities"] for child in children]
    assert all(sets["CapPrm"] == sets["CapEff"] == sets["CapInh"] == sets["CapAmb"] == 0 for sets in held), held

    # Nothing it tried left a trace outside, the code is intact, the worker is alive.
    assert not [name for name, path in outside.items() if seen(path).exists()]
    assert code.read_bytes() == code_before
    assert attacked_worker.process.poll() is None
    # Its daemon did not outlive the task: killed when its child was reaped, and it beats no more.
    assert "start a daemon" in succeeded  # it did start (inside), so its end is the sandbox's doing
    assert wait_until(lambda: not processes_with(marker), 10), processes_with(marker)
    beat = log / "daemon-beat"
    last = beat.read_text() if beat.exists() else ""
    time.sleep(0.5)  # it beat every 0.1 s while it lived
    assert (beat.read_text() if beat.exists() else "") == last

    # The next job on the same worker succeeds.
    assert (await run_job(queue_jobs, plain, tenant)).state is JobState.SUCCEEDED
    assert attacked_worker.process.poll() is None


RELEASE_QUEUE = "docjobs-compromised-release"


@pytest.fixture(scope="module")
def release_attacker(start_worker: StartWorker) -> WorkerProcess:
    """A worker whose render, sign and verify do what the document plans (tests/faults/compromised_release.py)."""
    return start_worker(RELEASE_QUEUE, script=FAULT_WORKER, DOCJOBS_FAULT="compromised-release")


@pytest.mark.parametrize(
    ("plan", "code"),
    [
        # Everything at once: the worker's comparison of the signature dictionary refuses first.
        ({"javascript": True, "no_watermark": True, "reason": "other-tenant"}, "signature.dictionary"),
        # An honest sign child: the gate's own reading finds the JavaScript render left.
        ({"javascript": True, "no_watermark": True}, "sanitize.residue"),
    ],
)
async def test_a_compromised_render_sign_and_verify_get_no_signature(
    env: Env, release_attacker: WorkerProcess, tmp_path: Path, plan: dict[str, Any], code: str
) -> None:
    """Security review H2, played on a real worker: render leaves JavaScript and no watermark, sign names another
    tenant in /Reason, verify answers "valid" without reading. The release gate (its own sandbox, pure-Python
    readers) and the worker's comparison refuse in `sign`, before the CMS: quarantined, nothing signed, staged or
    promoted, and verify (whose lie would pass anything) never runs."""
    settings = env.settings(DOCJOBS_TASK_QUEUE=RELEASE_QUEUE)
    jobs = JobClient(await connect(settings), settings)
    document = tmp_path / "attack.pdf"
    make_sample_pdf(document, pages=1)
    with pikepdf.open(document, allow_overwriting_input=True) as pdf:
        pdf.docinfo["/Subject"] = RELEASE_PLAN_PREFIX + json.dumps(plan)
        pdf.save(document)
    submitted = await jobs.submit(document, "standard", tenant="mallory", key=f"release-{uuid.uuid4().hex}")
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.QUARANTINED, code), status
    assert status.attempts.get("sign") == 1 and "verify" not in status.attempts  # refused at once, never retried
    assert status.output_sha256 is None and status.signature is None
    kept = job_files(env, submitted.job_id)
    assert "evidence.json" in kept and not [name for name in kept if name.endswith(".pdf")]  # no artifact promoted
    blobs = Path(env.vars["DOCJOBS_DATA_DIR"]) / "blobs" / job_prefix(submitted.job_id)
    stored = [path.read_bytes() for path in blobs.rglob("*") if path.is_file()]
    assert stored and not [data for data in stored if b"/ETSI.CAdES.detached" in data]  # no signature anywhere
    assert release_attacker.process.poll() is None


async def test_two_tenants_never_share_a_child(
    queue_jobs: JobClient, attacked_worker: WorkerProcess, tmp_path: Path
) -> None:
    """Each render records its child (pid, PID namespace, uid): one tenant's are never another's, and with a
    fresh child per task no two tasks of one tenant had the same one either."""
    tenants = ("tenant-alpha", "tenant-beta")
    for round_ in range(2):
        for tenant in tenants:
            document = planned_document(tmp_path / f"{tenant}-{round_}.pdf", {"label": f"{tenant}-{round_}"})
            assert (await run_job(queue_jobs, document, tenant)).state is JobState.SUCCEEDED
    seen: dict[str, list[dict[str, Any]]] = {}
    for tenant in tenants:
        root = tenant_root(queue_jobs.settings.work_dir / "general", tenant)
        log = sandbox_view(attacked_worker.process.pid, root / LOG_FOLDER / "children.jsonl")
        records = [json.loads(line) for line in log.read_text().splitlines()]
        seen[tenant] = [record for record in records if str(record["label"]).startswith(tenant)]
        assert len(seen[tenant]) == 2
    alpha, beta = seen["tenant-alpha"], seen["tenant-beta"]
    assert {r["pidns"] for r in alpha}.isdisjoint({r["pidns"] for r in beta})  # separate sandboxes
    assert {r["uid"] for r in alpha}.isdisjoint({r["uid"] for r in beta}) or os.geteuid() != 0  # separate uids
    for records in seen.values():
        assert len({record["pid"] for record in records}) == len(records)  # a fresh child per task
        assert all(record["uid"] != 0 for record in records)  # never root inside


def test_what_a_child_leaves_is_copied_only_as_a_regular_file(tmp_path: Path) -> None:
    """A symlink at output.pdf (to a worker's secret) or a FIFO (that would hold the worker) is refused."""
    secret = tmp_path / "worker-secret"
    secret.write_text(CANARY)
    folder = tmp_path / "attempt"
    folder.mkdir()
    (folder / "output.pdf").symlink_to(secret)
    os.mkfifo(folder / "fifo.pdf")
    (folder / "real.pdf").write_bytes(b"%PDF-1.7 left by the child")
    for name, message in (("output.pdf", "symbolic link"), ("fifo.pdf", "not a regular file")):
        with pytest.raises(DocJobError) as refused:
            copy_left_file(folder / name, tmp_path / f"copy-{name}")
        assert refused.value.code == "internal.error" and message in refused.value.message
        assert not (tmp_path / f"copy-{name}").exists()
    copy_left_file(folder / "real.pdf", tmp_path / "copy.pdf")
    assert (tmp_path / "copy.pdf").read_bytes() == b"%PDF-1.7 left by the child"


def test_a_childs_page_count_is_capped_at_max_pages(tmp_path: Path) -> None:
    """A child that claims more pages than the job may have is believed only up to `max_pages` (its CPU budget
    and the lease's page progress grow with that count)."""
    pool = ChildPool(ChildLimits(), home=tmp_path, warm=1, entries="tests.sandbox_entries")
    pool.start()
    reported: list[tuple[int, int]] = []
    try:
        pool.run(
            "pages",
            Order(pages=40),
            Seen,
            cpu=CpuBudget(base_seconds=5),
            on_progress=lambda done, total: reported.append((done, total)),
            max_pages=3,
        )
    finally:
        pool.close()
    assert reported and max(total for _, total in reported) == 3
    assert all(done <= total for done, total in reported)


def test_a_worker_without_its_sandbox_refuses_to_start_unless_told(
    env: Env, start_worker: StartWorker, tmp_path: Path
) -> None:
    """No bwrap to be found: the worker exits 2 naming why; DOCJOBS_SANDBOX=unconfined starts it, with a warning."""
    no_tools = tmp_path / "empty-path"
    no_tools.mkdir()
    refused = subprocess.run(
        [sys.executable, str(REPO / "worker.py"), "--task-queue", "docjobs-no-sandbox"],
        cwd=REPO,
        env=env.process_env(PATH=str(no_tools)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2
    assert "the document sandbox cannot be set up" in refused.stderr and "bubblewrap" in refused.stderr
    unconfined = start_worker("docjobs-unconfined", DOCJOBS_SANDBOX="unconfined")
    assert "DOCJOBS_SANDBOX=unconfined" in unconfined.log_path.read_text()
    unconfined.stop()


def test_each_tenant_has_a_pool_and_a_work_root_of_its_own(tmp_path: Path) -> None:
    """The tenant is the job ID's prefix; its pool is kept while used and reused by its next task; beyond
    `max_pools`, the least recently used idle pool is closed."""
    pools = TenantPools(
        lambda home, confinement: ChildPool(ChildLimits(), home=home, warm=0, confinement=confinement),
        tmp_path,
        confined=False,
        max_pools=2,
    )
    try:
        with pools.lease("alpha/job-1") as (alpha, alpha_root), pools.lease("alpha/job-2") as (again, _):
            assert again is alpha and alpha_root == tenant_root(tmp_path, "alpha") and alpha_root.is_dir()
        with pools.lease("beta/job-1") as (beta, beta_root):
            assert beta is not alpha and beta_root != alpha_root
        with pools.lease("gamma/job-1"):
            pass
        assert set(pools.pools()) == {"beta", "gamma"}  # alpha, the least recently used, was closed
    finally:
        pools.close()


def inner_pid(outer: int) -> int:
    """The pid a process of a sandbox has in its own PID namespace (what it reports of itself)."""
    for line in Path(f"/proc/{outer}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    raise AssertionError(f"no NSpid for {outer}")


def holds_landlock_rules(pid: int) -> bool:
    """True while the process holds a Landlock ruleset it has not enforced yet (a spare child, made ahead). A
    descriptor closed between listing and reading (the child still opens and closes files as it gets ready) is
    passed over: reading it failed the suite by chance (FileNotFoundError on /proc/<pid>/fd/33)."""
    for descriptor in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(FileNotFoundError):
            if "landlock-ruleset" in os.readlink(descriptor):
                return True
    return False


def spare_of(pool: ChildPool) -> int:
    """The pool's one idle child, once forked (a spare is forked in the background)."""
    assert wait_until(lambda: len(pool.idle_pids()) == 1, 10)
    [spare] = pool.idle_pids()
    return spare


def test_a_spare_child_serves_one_task_of_its_own_tenant(tmp_path: Path) -> None:
    """Each tenant's pool forks a spare ahead of need (confined, its Landlock rules made, waiting for one task):
    another tenant's task never runs in it, its own tenant's next task does, and only that one; the next spare is
    forked while the task runs. A retired tenant's pool and a closed worker's take their spares with them."""
    pools = TenantPools(
        lambda home, c: ChildPool(ChildLimits(), home=home, warm=1, entries="tests.sandbox_entries", confinement=c),
        tmp_path,
        confined=True,
        max_pools=1,
    )
    cpu = CpuBudget(base_seconds=30)
    try:
        with pools.lease("alpha/job-1") as (alpha, _):
            spare = spare_of(alpha)
            assert wait_until(lambda: holds_landlock_rules(spare), 10)
            with pools.lease("beta/job-1") as (beta, _):
                beta_spare = spare_of(beta)
                assert Path(f"/proc/{beta_spare}").stat().st_uid != Path(f"/proc/{spare}").stat().st_uid or (
                    os.geteuid() != 0  # unprivileged, every sandbox runs as the worker's own uid
                )
                beta_spare_inner = inner_pid(beta_spare)
                beta_seen = [beta.run("pages", Order(pages=1), Seen, cpu=cpu) for _ in range(2)]
                assert beta_seen[0].pid == beta_spare_inner != beta_seen[1].pid
                beta_next = spare_of(beta)
            assert wait_until(lambda: gone(beta_spare) and gone(beta_next), 10)  # beta's pool retired (max_pools)
            assert set(pools.pools()) == {"alpha"} and alpha.idle_pids() == [spare]  # untouched by beta's tasks
            spare_inner = inner_pid(spare)
            first = alpha.run("pages", Order(pages=1), Seen, cpu=cpu)
            assert first.pid == spare_inner
            assert wait_until(lambda: gone(spare), 10)  # used once, then gone
            successor = spare_of(alpha)
            successor_inner = inner_pid(successor)
            second = alpha.run("pages", Order(pages=1), Seen, cpu=cpu)
            assert second.pid == successor_inner != first.pid
            last_spare = spare_of(alpha)
    finally:
        pools.close()
    assert wait_until(lambda: gone(last_spare) and gone(successor), 10)


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def zygote_and_forks(worker: int) -> list[int]:
    """The worker's zygote and the children it forked (their command line is the zygote's; bwrap's only ends so)."""
    found = []
    for pid in descendants(worker):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"docjobs.isolation.sandbox_child" in argv and not argv[0].endswith(b"bwrap"):
            found.append(pid)
    return found


def test_a_confined_pool_dies_whole_with_its_worker(tmp_path: Path) -> None:
    """A SIGKILLed worker leaves nothing of its sandbox behind: bwrap, its init, the zygote, the child, its tool."""
    root = tmp_path / "tenant"
    root.mkdir()
    confinement = Confinement(root)
    own_uid(root, confinement.uid)
    # The attempt's folder, in the sandbox's own root: the only one of it the child may write (besides its private one).
    script = (
        "import os; from pathlib import Path; from docjobs.isolation.child_pool import ChildPool, ChildLimits; "
        "from docjobs.isolation.confine import Confinement; from docjobs.domain.stage_cost import CpuBudget; "
        "from tests.sandbox_entries import Order, Seen; from tests.sandbox_view import own_uid;"
        f"root = Path({str(root)!r}); confinement = Confinement(root);"
        "pool = ChildPool(ChildLimits(), home=root, entries='tests.sandbox_entries', confinement=confinement);"
        "pool.start(); held = pool.work_root(); attempt = held.__enter__().path / 'attempt'; attempt.mkdir();"
        "own_uid(attempt, confinement.uid);"
        "pool.run('block', Order(pid_file=str(attempt / 'pids')), Seen, cpu=CpuBudget(base_seconds=60), folder=attempt)"
    )
    worker = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})

    def pids() -> list[str]:
        views = sandbox_views(worker.pid, root / "attempt" / "pids")
        return views[0].read_text().split() if views else []

    try:
        assert wait_until(lambda: len(pids()) == 3, 60), "no child started"
        # The zygote, the blocked child and the spare forked for the next task while it runs.
        assert wait_until(lambda: len(zygote_and_forks(worker.pid)) == 3, 10)
        sandbox = descendants(worker.pid)
        assert len(sandbox) >= 6  # bwrap, its init, the zygote, the child, its tool, the spare
        worker.kill()
        worker.wait()
        assert wait_until(lambda: all(gone(pid) for pid in sandbox), 10), [pid for pid in sandbox if not gone(pid)]
    finally:
        worker.kill()


def test_a_confined_child_keeps_its_limits(confined_root: Path) -> None:
    """Inside the sandbox the CPU budget still ends a spinning document, and a file beyond the size limit is
    `input.too_complex`, as a limit should be (not a crash to retry)."""
    confinement = Confinement(confined_root, max_file_mb=1)
    pool = ChildPool(
        ChildLimits(), home=confined_root, warm=1, entries="tests.sandbox_entries", confinement=confinement
    )
    pool.start()
    try:
        with pytest.raises(DocJobError) as spun:
            pool.run("spin", Order(pages=0), Seen, cpu=CpuBudget(base_seconds=1, per_page_seconds=0))
        assert spun.value.code == "input.too_complex" and "CPU seconds" in spun.value.message
        with pytest.raises(DocJobError) as grown:
            pool.run("costly", Order(io_mb=4), Seen, cpu=CpuBudget(base_seconds=30))
        assert grown.value.code == "input.too_complex" and "1 MiB" in grown.value.message
        assert pool.run("pages", Order(pages=1), Seen, cpu=CpuBudget(base_seconds=5)).pid > 0
    finally:
        pool.close()


def test_a_sandbox_writes_in_a_bounded_root_of_its_own(confined_root: Path) -> None:
    """What the children of a sandbox write fills a tmpfs of its own of `max_work_mb`, never the worker's disk: a
    document that writes more fails as `input.too_complex` (a limit, not a crash to retry), the next task of the
    pool succeeds, and once the sandbox is gone (its pool closed) so are the files (the worker let go of its root)."""
    confinement = Confinement(confined_root, max_work_mb=16)
    pool = ChildPool(
        ChildLimits(), home=confined_root, warm=1, entries="tests.sandbox_entries", confinement=confinement
    )
    pool.start()
    try:
        with pool.work_root() as sandbox:
            assert sandbox is not None and sandbox.inside == confined_root
            attempt = sandbox.path / "render-attempt"
            attempt.mkdir()
            own_uid(attempt, confinement.uid)
            with pytest.raises(DocJobError) as filled:
                pool.run("fill", Order(fill=str(attempt)), Seen, cpu=CpuBudget(base_seconds=30), folder=attempt)
            assert filled.value.code == "input.too_complex" and "16 MiB" in filled.value.message
            written = sum(path.stat().st_size for path in attempt.iterdir())
            assert 12 << 20 <= written <= 16 << 20  # real bytes, up to the tmpfs's size
            assert not list(confined_root.iterdir())  # nothing on the worker's disk
            shutil.rmtree(attempt)  # the attempt's end (the worker removes its folder)
            assert pool.run("pages", Order(pages=1), Seen, cpu=CpuBudget(base_seconds=5)).pid > 0
    finally:
        pool.close()
    assert sandbox.free_bytes() is None  # its descriptor closed: the tmpfs is freed with its sandbox


def test_two_workers_sandboxes_share_a_tenant_root(confined_root: Path) -> None:
    """Workers of one machine share the work folder, so a tenant's root's path: their zygotes each count pids from 1
    in a namespace of their own, and their children's folders must not meet (they did once: same name, the same
    pid; each sandbox now writes in a tmpfs of its own there, and the names stay apart all the same)."""
    pools = [
        ChildPool(ChildLimits(), home=confined_root, warm=1, entries="tests.sandbox_entries", confinement=c)
        for c in (Confinement(confined_root), Confinement(confined_root))
    ]
    for pool in pools:
        pool.start()
    try:
        seen = [pool.run("pages", Order(pages=1), Seen, cpu=CpuBudget(base_seconds=5)) for pool in pools * 2]
    finally:
        for pool in pools:
            pool.close()
    assert len({record.folder for record in seen}) == len(seen)


def test_a_confined_task_reports_what_it_cost(confined_root: Path) -> None:
    """The child's own account of a task (its /proc/self files) still works after it dropped root."""
    confinement = Confinement(confined_root)
    pool = ChildPool(ChildLimits(), home=confined_root, entries="tests.sandbox_entries", confinement=confinement)
    pool.start()
    usages: list[TaskUsage] = []
    try:
        pool.run("costly", Order(io_mb=4, hold_mb=50), Seen, cpu=CpuBudget(base_seconds=30), on_usage=usages.append)
    finally:
        pool.close()
    assert usages[0].bytes_written >= 4 << 20 and usages[0].bytes_read >= 4 << 20
    assert usages[0].peak_memory_mb >= 50


def test_a_status_rebuilt_from_history_is_not_a_rewrite() -> None:
    """A worker restart (as when a worker is killed mid-stage) makes a poll read the status from history, whose
    step times are its events'; the next poll, answered by the new worker, has the workflow's: the same steps."""
    now = datetime.now(UTC)
    steps = [(JobState.QUEUED, None), (JobState.PROCESSING, Stage.RENDER)]

    def status(*times: datetime) -> JobStatus:
        records = [TransitionRecord(state=s, stage=g, at=t) for (s, g), t in zip(steps, times, strict=False)]
        return a_status(at=now, state=records[-1].state, stage=records[-1].stage, transitions=records)

    validate_history(status(now, now + timedelta(milliseconds=15)), status(now, now + timedelta(milliseconds=30)))


def test_a_confined_child_writes_only_its_attempts_folder(confined_root: Path) -> None:
    """Landlock, per child: the attempt folder the task names is writable, its sibling in the same work root is
    not, nor the root itself; a child (reused here, as only the benchmark does) never serves another folder. The
    root is the sandbox's own tmpfs: nothing of it is on the worker's disk."""
    uid = Confinement(confined_root).uid
    pool = ChildPool(
        ChildLimits(),
        home=confined_root,
        warm=1,
        entries="tests.sandbox_entries",
        confinement=Confinement(confined_root),
    )
    pool.recycle_after = 50
    pool.start()
    cpu = CpuBudget(base_seconds=30)
    try:
        with pool.work_root() as sandbox:  # as the worker reaches it
            assert sandbox is not None
            mine, theirs = (sandbox.path / name for name in ("render-mine", "render-theirs"))
            for folder in (mine, theirs):
                folder.mkdir()
                own_uid(folder, uid)

            def write_pids(path: Path) -> Seen:  # `block` writes its pids there, then returns at once (released)
                return pool.run("block", Order(pid_file=str(path), release_file=str(mine)), Seen, cpu=cpu, folder=mine)

            first = write_pids(mine / "pids")
            with pytest.raises(ChildCrashed):  # the file is in another job's folder of the same work root
                write_pids(theirs / "pids")
            with pytest.raises(ChildCrashed):  # beside its folder
                write_pids(sandbox.path / "pids")
            reused = pool.run("pages", Order(pages=1), Seen, cpu=cpu, folder=mine)
            with pytest.raises(ChildCrashed):  # a child already restricted to another attempt's folder
                pool.run("pages", Order(pages=1), Seen, cpu=cpu, folder=theirs)
            assert (mine / "pids").exists() and not (theirs / "pids").exists()
            assert not (sandbox.path / "pids").exists()
        assert not list(confined_root.iterdir())
    finally:
        pool.close()
    assert first.pid > 0 and reused.pid > 0
