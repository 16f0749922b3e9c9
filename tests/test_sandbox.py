"""The document children: limits that hold, kills that reach every process, nothing secret inherited.

Real child processes of a real pool, driven by the stage doubles in tests/sandbox_entries.py.
"""

from __future__ import annotations

import array
import ctypes
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from docjobs.domain.errors import DocJobError
from docjobs.domain.stage_cost import CpuBudget
from docjobs.isolation import prefault
from docjobs.isolation.child_pool import ChildLimits, ChildPool
from docjobs.isolation.child_process import ChildCrashed, ChildStopped
from docjobs.isolation.confine import Confinement
from docjobs.isolation.protocol import TaskUsage
from docjobs.isolation.tenant_pools import TenantPools, sibling_pools
from tests.sandbox_entries import SHARED_PAGES, Order, Seen

REPO = Path(__file__).resolve().parent.parent
SECRETS = {
    "DOCJOBS_CODEC_KEYS": "k1:c2VjcmV0",
    "DOCJOBS_SIGNING_P12_PASSPHRASE": "hunter2",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "AWS_ACCESS_KEY_ID": "id",
    "TEMPORAL_API_KEY": "key",
    "DOCJOBS_CODEC_TOKEN": "token",
}
QUICK = CpuBudget(base_seconds=1, per_page_seconds=0)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[ChildPool]:
    children = ChildPool(
        ChildLimits(memory_mb=512, stall_seconds=3), home=tmp_path, warm=1, entries="tests.sandbox_entries"
    )
    children.start()
    yield children
    children.close()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_no_secret_reaches_a_child(pool: ChildPool, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    pool.close()  # its warm child was started before the secrets were set
    fresh = ChildPool(ChildLimits(), home=pool.home, entries="tests.sandbox_entries")
    fresh.start()
    try:
        seen = fresh.run("environment", Order(), Seen, cpu=QUICK)
    finally:
        fresh.close()
    assert seen.pid != os.getpid()
    assert not set(SECRETS) & set(seen.names)
    assert not [name for name in seen.names if name.startswith(("AWS_", "TEMPORAL_"))]
    assert "PATH" in seen.names


def test_progress_is_relayed_and_a_clean_child_is_reused(pool: ChildPool) -> None:
    reported: list[tuple[int, int]] = []
    first = pool.run(
        "pages", Order(pages=3), Seen, cpu=QUICK, on_progress=lambda done, total: reported.append((done, total))
    )
    assert reported == [(0, 3), (1, 3), (2, 3), (3, 3)]
    second = pool.run("pages", Order(pages=1), Seen, cpu=QUICK)
    assert second.pid == first.pid  # warm and reused after a clean success
    assert pool.idle_pids() == [first.pid]


def test_a_task_reports_what_it_cost_tools_included(pool: ChildPool) -> None:
    """CPU of a tool the child ran, bytes written and read back, the child's peak memory; the peak is the task's
    own: the same child's next, smaller task reports less."""
    usages: list[TaskUsage] = []
    order = Order(tool_cpu_seconds=0.3, io_mb=8, hold_mb=200)
    first = pool.run("costly", order, Seen, cpu=CpuBudget(base_seconds=30), on_usage=usages.append)
    second = pool.run("costly", Order(), Seen, cpu=CpuBudget(base_seconds=30), on_usage=usages.append)
    assert second.pid == first.pid  # one child, two tasks: the kernel's account of it would mix them
    big, small = usages
    assert big.cpu_seconds >= 0.3 > small.cpu_seconds
    assert big.bytes_written >= 8 << 20 and big.bytes_read >= 8 << 20  # the child wrote, the tool (cat) read
    assert small.bytes_written < 1 << 20
    assert big.peak_memory_mb >= 200 > small.peak_memory_mb


def test_a_killed_child_is_accounted_by_the_kernel(pool: ChildPool) -> None:
    usages: list[TaskUsage] = []
    with pytest.raises(DocJobError):
        pool.run("spin", Order(pages=0), Seen, cpu=QUICK, on_usage=usages.append)
    assert usages[0].cpu_seconds >= 1  # its 1-second budget, used up: counted from wait4, not by the child


def test_cpu_limit_ends_the_child_as_too_complex(pool: ChildPool) -> None:
    with pytest.raises(DocJobError) as failure:
        pool.run("spin", Order(pages=0), Seen, cpu=QUICK)
    assert failure.value.code == "input.too_complex"
    assert "CPU seconds" in failure.value.message


def test_cpu_budget_grows_with_the_page_count(pool: ChildPool) -> None:
    """Base 1 s plus 1 s for each of 2 pages: the spinning child dies after about 3 CPU seconds, not 1."""
    started = time.process_time()
    wall = time.monotonic()
    with pytest.raises(DocJobError) as failure:
        pool.run("spin", Order(pages=2), Seen, cpu=CpuBudget(base_seconds=1, per_page_seconds=1))
    assert failure.value.code == "input.too_complex"
    assert "3 CPU seconds" in failure.value.message
    assert time.monotonic() - wall >= 2.5  # it got more than its base budget (CPU time is at most wall time)
    assert time.process_time() - started < 2  # the worker itself only waited


def test_memory_limit_ends_the_child_as_too_complex(pool: ChildPool) -> None:
    """The memory limit, not the CPU budget, ends it: with a 1-s budget, a busy machine's page faults used the
    second up before the child reached 512 MiB."""
    with pytest.raises(DocJobError) as failure:
        pool.run("grow", Order(), Seen, cpu=CpuBudget(base_seconds=30))
    assert failure.value.code == "input.too_complex"
    assert "512 MiB" in failure.value.message


def test_deep_nesting_is_too_complex(pool: ChildPool) -> None:
    with pytest.raises(DocJobError) as failure:
        pool.run("recurse", Order(), Seen, cpu=QUICK)
    assert failure.value.code == "input.too_complex"


def test_a_silent_child_is_killed_after_the_stall_limit(pool: ChildPool) -> None:
    with pytest.raises(DocJobError) as failure:
        pool.run("silent", Order(), Seen, cpu=CpuBudget(base_seconds=60))
    assert failure.value.code == "input.too_complex"
    assert "no progress for 3 s" in failure.value.message


def test_a_crash_or_a_lying_child_is_not_a_verdict(pool: ChildPool) -> None:
    with pytest.raises(ChildCrashed):
        pool.run("crash", Order(), Seen, cpu=QUICK)
    with pytest.raises(ChildCrashed):
        pool.run("lie", Order(), Seen, cpu=QUICK)  # its result does not fit the model: nothing is believed
    assert pool.run("pages", Order(pages=1), Seen, cpu=QUICK).pid > 0  # the pool goes on with fresh children


def test_stop_kills_the_child_and_its_tools(pool: ChildPool, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    stop = threading.Event()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            pool.run("block", Order(pid_file=str(pids)), Seen, cpu=CpuBudget(base_seconds=60), should_stop=stop.is_set)
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 30
    while not pids.exists() or len(pids.read_text().split()) < 3:
        assert time.monotonic() < deadline, "the child did not start its tool"
        time.sleep(0.05)
    child, tool, _ = (int(pid) for pid in pids.read_text().split())
    stop.set()
    thread.join(timeout=10)
    assert isinstance(outcome[0], ChildStopped)
    assert wait_gone(child) and wait_gone(tool)


def test_children_die_with_their_worker(tmp_path: Path) -> None:
    """A SIGKILLed worker leaves no zygote behind, no document child, no tool a child ran: the kernel signals
    the zygote (parent-death signal), which kills every child's group (and each child, signalled in turn by the
    zygote's death, ends its own)."""
    pids = tmp_path / "pids"
    script = (
        "import sys; from pathlib import Path; from docjobs.isolation.child_pool import ChildPool, ChildLimits;"
        "from docjobs.domain.stage_cost import CpuBudget; from tests.sandbox_entries import Order, Seen;"
        f"pool = ChildPool(ChildLimits(), home=Path({str(tmp_path)!r}), entries='tests.sandbox_entries'); pool.start();"
        f"pool.run('block', Order(pid_file={str(pids)!r}), Seen, cpu=CpuBudget(base_seconds=60))"
    )
    worker = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 30
        while not pids.exists() or len(pids.read_text().split()) < 3:
            assert time.monotonic() < deadline and worker.poll() is None, "the child did not start"
            time.sleep(0.05)
        child, tool, zygote = (int(pid) for pid in pids.read_text().split())
        assert zygote != worker.pid
        worker.kill()
        worker.wait()
        assert wait_gone(zygote) and wait_gone(child) and wait_gone(tool)
    finally:
        worker.kill()


def test_a_child_yields_the_cpu(pool: ChildPool) -> None:
    """Document work runs at a lower priority than the worker (and the API and Temporal beside it)."""
    child = pool.run("pages", Order(pages=0), Seen, cpu=QUICK).pid
    assert os.getpriority(os.PRIO_PROCESS, child) == os.getpriority(os.PRIO_PROCESS, 0) + 10


def test_children_are_forks_of_the_zygote_each_a_group_of_its_own(pool: ChildPool) -> None:
    seen = pool.run("pages", Order(), Seen, cpu=QUICK)
    zygote = pool.zygote_pid()
    assert zygote is not None and seen.parent == zygote != os.getpid()
    assert "docjobs.isolation.sandbox_child" in Path(f"/proc/{zygote}/cmdline").read_text()
    assert seen.group == seen.pid != os.getpgid(zygote)
    assert os.getsid(zygote) == zygote != os.getsid(0)  # the zygote's own session, away from the worker's
    assert Path(seen.folder).parent == pool.home  # the child works in a folder of its own


def test_a_fresh_child_per_task_sees_nothing_of_the_last(tmp_path: Path) -> None:
    """With `recycle_after=1` every task has a child of its own: what a task left in memory or in its folders is
    not there for the next one, and its folder is gone once the child is."""
    pool = ChildPool(ChildLimits(), home=tmp_path, warm=1, recycle_after=1, entries="tests.sandbox_entries")
    pool.start()
    try:
        first = pool.run("remember", Order(), Seen, cpu=QUICK)
        second = pool.run("remember", Order(), Seen, cpu=QUICK)
    finally:
        pool.close()
    assert first.names == second.names == ()
    assert first.pid != second.pid and first.folder != second.folder
    assert wait_gone(first.pid) and not Path(first.folder).exists()


def test_a_zygote_imports_ahead_its_queues_modules_only(tmp_path: Path) -> None:
    """A worker's pool asks for its queue's modules (`stage_work.PRELOAD_FOR`): its children have those, imported
    once by their zygote, and not another queue's; a pool that names none has every queue's."""
    seen = {}
    for preload in (("tabnanny",), None):
        home = tmp_path / ("asked" if preload else "every")
        home.mkdir()
        pool = ChildPool(ChildLimits(), home=home, entries="tests.sandbox_entries", preload=preload)
        pool.start()
        try:
            seen[preload] = pool.run("loaded", Order(), Seen, cpu=QUICK).names
        finally:
            pool.close()
    assert seen == {("tabnanny",): ("tabnanny",), None: ("pickletools", "tabnanny")}


def test_a_signed_job_s_task_opens_its_tenant_s_gate_pool_ahead(tmp_path: Path) -> None:
    """The release gate's pools follow the stages' (`sibling_pools`): the stage task of a job that will sign opens
    its tenant's gate pool too, in the background, so that its zygote imports beside the stage zygote's instead of
    after them, at the tenant's first `sign`. A job that does not sign opens none (a tenant that never signs pays
    for no gate zygote), another tenant's is not opened, and a second signed task opens nothing more."""
    stages = TenantPools(
        lambda home, confinement: ChildPool(ChildLimits(), home=home, entries="tests.sandbox_entries"),
        tmp_path,
        confined=False,
    )
    gate = sibling_pools(stages, "tests.sandbox_entries")
    assert isinstance(gate, TenantPools)
    try:
        with stages.lease("acme/unsigned") as (pool, _):
            assert pool.run("pages", Order(), Seen, cpu=QUICK).pid
        with stages.lease("globex/unsigned") as (pool, _):
            assert pool.run("pages", Order(), Seen, cpu=QUICK).pid
        # An opening ahead starts its thread within the lease: none, and no gate pool, means none was asked for.
        assert not gate.pools() and "docjobs-pool-ahead" not in {thread.name for thread in threading.enumerate()}
        with stages.lease("acme/signed", with_followers=True) as (pool, _):
            assert pool.run("pages", Order(), Seen, cpu=QUICK).pid
        deadline = time.monotonic() + 30
        while "acme" not in gate.pools() and time.monotonic() < deadline:
            time.sleep(0.05)
        opened = gate.pools()
        assert list(opened) == ["acme"] and opened["acme"].zygote_pid() is not None
        with stages.lease("acme/signed-again", with_followers=True) as (pool, _):
            pool.run("pages", Order(), Seen, cpu=QUICK)
        assert gate.pools() == opened  # the same pool: opened once
    finally:
        stages.close()
        gate.close()


def test_a_reused_child_remembers_its_earlier_tasks(pool: ChildPool) -> None:
    """What `recycle_after=1` is for: by default a child serves several tasks, and keeps what they left."""
    first = pool.run("remember", Order(), Seen, cpu=QUICK)
    again = pool.run("remember", Order(), Seen, cpu=QUICK)
    assert again.pid == first.pid and f"pid {first.pid}" in again.names


def test_a_killed_zygote_is_replaced_and_the_next_task_succeeds(pool: ChildPool) -> None:
    zygote = pool.zygote_pid()
    idle = pool.idle_pids()
    assert zygote is not None and idle
    os.kill(zygote, signal.SIGKILL)
    assert wait_gone(zygote) and all(wait_gone(child) for child in idle)  # its children died with it
    seen = pool.run("pages", Order(pages=2), Seen, cpu=QUICK)
    assert seen.parent == pool.zygote_pid() not in (None, zygote)


# --- copy-on-write faults taken ahead (docjobs/isolation/prefault.py) ------------------------------------------------


def _in_a_fork(work: Callable[[], list[int]]) -> list[int]:
    """`work()` run in a fork of this process: what it returned."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, array.array("Q", work()).tobytes())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        data = answer.read()
    os.waitpid(pid, 0)
    return array.array("Q", data).tolist()


def test_a_fork_reports_the_pages_it_wrote_and_those_copied_ahead() -> None:
    page = prefault.PAGE
    shared = mmap.mmap(-1, 8 * page, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    shared[::page] = b"p" * 8  # present here, so shared with a fork until it writes them
    start = ctypes.addressof(ctypes.c_char.from_buffer(shared))
    mapping = [(start, start + 8 * page)]

    def write_two_copy_one() -> list[int]:
        shared[2 * page] = shared[5 * page] = 1
        prefault.populate(prefault.runs([start + 6 * page]))
        return prefault.touched_pages(mapping)

    assert _in_a_fork(write_two_copy_one) == [start + 2 * page, start + 5 * page, start + 6 * page]
    assert _in_a_fork(lambda: prefault.touched_pages(mapping)) == []  # a fork that writes nothing maps nothing alone


def test_a_report_is_a_claim_only_pages_of_the_zygote_are_taken(tmp_path: Path) -> None:
    page = prefault.PAGE
    mappings = [(16 * page, 20 * page), (40 * page, 41 * page)]
    claimed = [16 * page, 19 * page, 20 * page, 40 * page, 16 * page + 1, 0, 2**63]
    (tmp_path / prefault.REPORT).write_bytes(array.array("Q", claimed).tobytes())
    assert prefault.read_report(tmp_path, mappings) == {16 * page, 19 * page, 40 * page}
    assert prefault.read_report(tmp_path / "missing", mappings) == set()
    for planted in ("link", "fifo"):  # what a compromised child may leave instead: neither is followed nor waited on
        folder = tmp_path / planted
        folder.mkdir()
        if planted == "link":
            (folder / prefault.REPORT).symlink_to(tmp_path / prefault.REPORT)
        else:
            os.mkfifo(folder / prefault.REPORT)
        assert prefault.read_report(folder, mappings) == set()
    assert prefault.runs([3 * page, 1 * page, 2 * page, 7 * page]) == [(page, 3 * page), (7 * page, page)]


def test_a_confined_pool_copies_ahead_the_pages_its_tasks_write(confined_root: Path) -> None:
    """A fresh child per task: the first tasks fault on every shared page they write; their reports teach the
    zygote those pages, and the spares forked after copy them while they wait, so later tasks fault on none."""
    confined = Confinement(confined_root)
    pool = ChildPool(ChildLimits(), home=confined_root, warm=1, entries="tests.sandbox_entries", confinement=confined)
    pool.start()
    try:
        faults = [pool.run("write_shared", Order(), Seen, cpu=QUICK).faults for _ in range(5)]
    finally:
        pool.close()
    assert faults[0] >= SHARED_PAGES and faults[-1] < SHARED_PAGES // 4, faults
