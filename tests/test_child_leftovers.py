"""No child can harm its worker, its disk or another tenant with what it leaves (issue 39, part 3; the security
review's M1, M2 and L1).

- M1: a folder a taken-over child made unremovable (`chmod 000`, any depth) is removed by the zygote once its fork
  is reaped, and by the sweep of a starting worker; what still cannot be removed is logged and left, and the
  worker starts. As root, modes stop nothing: these run as an unprivileged owner (the sandbox's uid in a root
  worker's confined pool; uid 65534 in a subprocess for the sweep), as the image's worker is.
- M2: the worker copies out at most a cap per file, refused from `fstat` before a byte is copied and counted as
  it copies (a file longer than it says stops at the cap too).
- M5: no sandbox starts where there is no seccomp filter for the machine.
- L1: what a child leaves is reached from the work folder one name at a time, no link followed at any depth: a
  `checkpoints` folder swapped for a link to another folder gives nothing of that folder to the worker.

Real files, real subprocesses and a real confined pool: nothing here is a double of what can be run.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.attempt import OUTPUT_CAP, StoreStages
from activities.ocr_page_ranges import CHECKPOINT_MAX_BYTES, PageCheckpoints
from docjobs.domain.errors import DocJobError
from docjobs.domain.ocr_page_ranges import PageRange
from docjobs.domain.stage_cost import CpuBudget
from docjobs.isolation.child_pool import ChildLimits, ChildPool
from docjobs.isolation.confine import Confinement, SandboxUnavailable, check_sandbox, seccomp_filter
from docjobs.store.storage import (
    LEFT_FILE_FLOOR,
    FileBlobStore,
    RunScope,
    copy_left_file,
    left_file_cap,
    open_left_dir,
)
from tests.conftest import REPO
from tests.sandbox_entries import Order, Seen

NOBODY = 65534
DAY = 24 * 3600
QUICK = CpuBudget(base_seconds=5, per_page_seconds=0)
NAME_IN_A_FILE_NAME = "ssn-078-05-1120"  # what a child could put in a file name: never in a log line


# --- M1: removal whatever modes a child left ------------------------------------------------------------------


@pytest.fixture
def unprivileged_home() -> Iterator[Path]:
    """A folder the unprivileged uid owns and can reach (pytest's own folders are root's, mode 0700)."""
    home = Path(tempfile.mkdtemp(prefix="docjobs-leftovers-"))
    if os.geteuid() == 0:
        os.chown(home, NOBODY, NOBODY)
    try:
        yield home
    finally:
        shutil.rmtree(home)  # as root (or their owner): modes do not stop it


def run_unprivileged(body: str, **values: Any) -> subprocess.CompletedProcess[str]:
    """Run `body` in a new Python process that imports what it needs as root (the venv lives under /root), then
    becomes uid 65534 before anything else: the unprivileged owner of what it removes. `values` arrive as
    `values`; what the body prints is its answer (JSON)."""
    prelude = (
        "import errno, json, logging, os, shutil, sys, time\n"
        "from datetime import timedelta\n"
        "from pathlib import Path\n"
        "from docjobs.store.sweep import remove_tree, sweep_stale\n"
        "from docjobs.temporal.settings import TemporalSettings\n"
        "from docjobs.worker import sweep_leftovers\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "values = json.loads(sys.argv[1])\n"
        f"if os.geteuid() == 0:\n    os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})\n"
        "assert os.geteuid() != 0 and os.getuid() != 0\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + body, json.dumps(values)],
        cwd=REPO,
        env={**os.environ, **values.get("env", {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# Run by the unprivileged uid: what a taken-over child leaves, at `top` (its own folder, as a child's is).
LEAVE_LOCKED_TREE = """
def leave_locked_tree(top, outside, depth):
    top.mkdir()
    (top / "d").mkdir()
    (top / "d" / "f").write_text("plaintext")
    (top / "d" / values["name"]).write_text("plaintext")
    (top / "d" / "link").symlink_to(outside)  # removed, never followed
    (top / "link-to-file").symlink_to(outside / "keep")
    os.chmod(top / "d", 0)
    folder = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):  # deeper than the sweep holds descriptors for, every level mode 000
        os.mkdir("n", dir_fd=folder)
        inner = os.open("n", os.O_RDONLY | os.O_DIRECTORY, dir_fd=folder)
        os.fchmod(folder, 0)
        os.close(folder)
        folder = inner
    os.close(folder)
    os.chmod(top, 0)
    os.utime(top, (time.time() - 2 * 86400,) * 2)
"""


def test_the_sweep_removes_a_locked_deep_tree_as_an_unprivileged_owner(unprivileged_home: Path) -> None:
    """As the review measured, a plain `rmtree` leaves the child's `chmod 000` folder (and raises without
    `ignore_errors`); the sweep removes it, 300 levels deep, never following a link or changing a mode outside."""
    body = (
        LEAVE_LOCKED_TREE
        + """
home = Path(values["home"])
outside = home / "outside"
outside.mkdir()
(outside / "keep").write_text("another job's")
os.chmod(outside, 0o500)
control = home / "control"
control.mkdir()
(control / "d").mkdir()
(control / "d" / "f").write_text("plaintext")
os.chmod(control / "d", 0)
shutil.rmtree(control, ignore_errors=True)
left_by_rmtree = control.exists()
try:
    shutil.rmtree(control)
    raised = ""
except OSError as error:
    raised = type(error).__name__
os.utime(control, (time.time() - 2 * 86400,) * 2)
leave_locked_tree(home / "render-crashed", outside, 300)
started = time.monotonic()
removed = sweep_stale(home, timedelta(days=1))
print(json.dumps({
    "left_by_rmtree": left_by_rmtree, "raised": raised, "removed": removed,
    "seconds": time.monotonic() - started,
    "left": sorted(path.name for path in home.iterdir()),
    "outside_mode": oct(os.stat(outside).st_mode & 0o777), "kept": (outside / "keep").exists(),
}))
"""
    )
    done = run_unprivileged(body, home=str(unprivileged_home), name=NAME_IN_A_FILE_NAME)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["left_by_rmtree"] and answer["raised"] == "PermissionError"  # what M1 measured
    assert answer["removed"] == 2 and answer["left"] == ["outside"]
    assert answer["outside_mode"] == "0o500" and answer["kept"]
    assert NAME_IN_A_FILE_NAME not in done.stderr


def make_stale_root_folder(path: Path) -> None:
    """A folder of root's (the test runs as root), older than the sweep's age, with a file of root's in it."""
    path.mkdir()
    (path / "inside").write_text("root's")
    os.utime(path, (time.time() - 2 * DAY,) * 2)


def test_remove_tree_refuses_nothing_of_its_owner_and_raises_for_another_owners(unprivileged_home: Path) -> None:
    """What the uid does not own (a folder root made) cannot be made its own: `remove_tree` raises, and the sweep
    logs that entry, without its name, and goes on with the others."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a folder another owner's")
    theirs = unprivileged_home / f"upload-{NAME_IN_A_FILE_NAME}"
    make_stale_root_folder(theirs)
    body = (
        LEAVE_LOCKED_TREE
        + """
home = Path(values["home"])
leave_locked_tree(home / "render-crashed", home, 3)
try:
    remove_tree(home / values["theirs"])
    raised = ""
except OSError as error:
    raised = errno.errorcode[error.errno]
print(json.dumps({"raised": raised, "removed": sweep_stale(home, timedelta(days=1)),
                  "left": sorted(path.name for path in home.iterdir())}))
"""
    )
    done = run_unprivileged(body, home=str(unprivileged_home), theirs=theirs.name, name=NAME_IN_A_FILE_NAME)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["raised"] in {"EACCES", "EPERM"}
    assert answer["removed"] == 1 and answer["left"] == [theirs.name]
    assert "could not remove a stale entry" in done.stderr and NAME_IN_A_FILE_NAME not in done.stderr


def test_a_starting_worker_sweeps_what_children_locked_and_starts_anyway(unprivileged_home: Path) -> None:
    """The worker's start-up sweep (docjobs.worker.sweep_leftovers, run before it serves) as the image's
    unprivileged worker: a tenant root holding a locked tree and a folder it cannot remove at all. It returns
    (the start goes on), removes the tree and leaves the other, logged."""
    tenant_root = unprivileged_home / "work" / "general" / "tenant-0123456789abcdef"
    tenant_root.mkdir(parents=True)
    for folder in (unprivileged_home / "work", unprivileged_home / "work" / "general", tenant_root):
        if os.geteuid() == 0:
            os.chown(folder, NOBODY, NOBODY)
    stuck = tenant_root / "ocr-stuck"
    if os.geteuid() == 0:  # another owner's: nothing the unprivileged worker can do removes it
        make_stale_root_folder(stuck)
    body = (
        LEAVE_LOCKED_TREE
        + """
root = Path(values["tenant_root"])
leave_locked_tree(root / "render-crashed", root, 100)
sweep_leftovers(TemporalSettings.from_env())
print(json.dumps({"left": sorted(path.name for path in root.iterdir())}))
"""
    )
    done = run_unprivileged(
        body,
        tenant_root=str(tenant_root),
        name=NAME_IN_A_FILE_NAME,
        env={"DOCJOBS_DATA_DIR": str(unprivileged_home)},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["left"] == (["ocr-stuck"] if os.geteuid() == 0 else [])
    assert NAME_IN_A_FILE_NAME not in done.stderr


def test_a_confined_zygote_removes_the_folder_its_fork_locked(confined_root: Path) -> None:
    """A real confined pool (a root worker's: its zygote runs as the tenant's unprivileged uid). A fork that runs
    `mkdir d; touch d/f; chmod 000 d` in its private folder: the zygote removes that folder once it has reaped
    the fork (it used to leave it), and goes on serving."""
    confinement = Confinement(confined_root)
    pool = ChildPool(
        ChildLimits(), home=confined_root, warm=1, entries="tests.child_leftover_entries", confinement=confinement
    )
    pool.start()
    try:
        folders = [Path(pool.run("lock_out", Order(), Seen, cpu=QUICK).folder) for _ in range(2)]
        deadline = time.monotonic() + 20
        while any(folder.exists() for folder in folders) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(folder.exists() for folder in folders)
    finally:
        pool.close()
    assert all(folder.parent == confined_root for folder in folders)
    if os.geteuid() == 0:
        assert confinement.uid != 0  # the zygote that removed them was not root: modes bound it


# --- M2: a cap on what is copied out --------------------------------------------------------------------------


def test_a_sparse_2_gib_output_is_refused_before_a_byte_is_copied(tmp_path: Path) -> None:
    left = tmp_path / "attempt" / "output.pdf"
    left.parent.mkdir()
    with left.open("wb") as handle:
        handle.truncate(2 * 1024**3)  # costs the child nothing
    cap = left_file_cap(input_bytes=1024**2, pages=3)
    assert cap < 2 * 1024**3
    copy = tmp_path / "copy.pdf"
    started = time.monotonic()
    with pytest.raises(DocJobError) as refused:
        copy_left_file(left, copy, max_bytes=cap)
    assert time.monotonic() - started < 1
    assert refused.value.code == "internal.error" and "larger than" in refused.value.message
    assert not copy.exists() or copy.stat().st_size <= cap


def test_the_bytes_copied_are_counted_not_the_size_a_file_claims(tmp_path: Path) -> None:
    """A file that says it is empty and reads on (a procfs file: exactly what a file growing while it is copied
    looks like) stops at the cap; the partial copy is removed."""
    copy = tmp_path / "copy"
    assert os.stat("/proc/self/maps").st_size == 0
    with pytest.raises(DocJobError) as refused:
        copy_left_file(Path("/proc/self/maps"), copy, max_bytes=512)
    assert refused.value.code == "internal.error" and not copy.exists()
    assert copy_left_file(Path("/proc/self/maps"), copy, max_bytes=64 * 1024**2) == copy.stat().st_size > 512


def test_the_cap_follows_the_stage_input_with_a_floor() -> None:
    assert left_file_cap() == LEFT_FILE_FLOOR
    assert left_file_cap(input_bytes=10) == LEFT_FILE_FLOOR
    assert left_file_cap(input_bytes=100 * 1024**2) == 800 * 1024**2
    assert left_file_cap(input_bytes=10, pages=10) > left_file_cap(input_bytes=10)


def test_an_attempt_stores_at_most_its_cap(tmp_path: Path) -> None:
    """The activities' one way to store what a child left (`StoreStages._put_left`) applies the attempt's cap."""
    store = FileBlobStore(tmp_path / "blobs")
    workdir = tmp_path / "work"
    stages = StoreStages(store, workdir)
    attempt = workdir / "general" / "tenant-x" / "render-1"
    attempt.mkdir(parents=True)
    (attempt / "output.pdf").write_bytes(b"%PDF-1.7 " + b"x" * 4096)
    token = OUTPUT_CAP.set(1024)
    try:
        with pytest.raises(DocJobError):
            stages._put_left("jobs/x/staged-render.pdf", attempt / "output.pdf")
    finally:
        OUTPUT_CAP.reset(token)
    assert store.stat("jobs/x/staged-render.pdf") is None
    assert stages._put_left("jobs/x/staged-render.pdf", attempt / "output.pdf").size == 4105


# --- L1: no link followed at any depth ------------------------------------------------------------------------


def other_folder_with_checkpoints(tmp_path: Path) -> Path:
    """Another job's folder, holding files named as this range's checkpoints are."""
    other = tmp_path / "other-job" / "checkpoints"
    other.mkdir(parents=True)
    for page in (1, 2):
        (other / f"{page:06d}-{'a' * 64}.json").write_text('{"another job": "its words"}')
    return other


class Heartbeats:
    """Where PageCheckpoints names what it stored (the lease's heartbeat details, outside an activity)."""

    def __init__(self) -> None:
        self.details: list[dict[str, Any]] = []

    def note(self, **details: Any) -> None:
        self.details.append(details)


def test_a_checkpoints_folder_swapped_for_a_link_gives_nothing_of_the_other_folder(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    attempt = workdir / "ocr" / "tenant-x" / "ocr_chunk-1"
    attempt.mkdir(parents=True)
    other = other_folder_with_checkpoints(tmp_path)
    (attempt / "checkpoints").symlink_to(other)  # what the child does to the folder the worker made
    store = FileBlobStore(tmp_path / "blobs")
    run = RunScope(namespace="default", workflow_id="t/job", run_id="0b2c4b6e-8a53-4b8e-9d0c-2f1d3c4b5a69")
    heartbeats = Heartbeats()
    checkpoints = PageCheckpoints(run, PageRange(first=1, last=4), 1, attempt / "checkpoints", heartbeats)
    for within in (workdir, None):  # from the work folder (the activity's), from the attempt's (the default)
        with pytest.raises(DocJobError) as refused:
            checkpoints.new(within=within)
        assert refused.value.code == "internal.error"
    stages = StoreStages(store, workdir)
    for name in os.listdir(other):  # and named one by one (a listing taken before the swap): not copied either
        with pytest.raises(DocJobError):
            stages._put_left(f"jobs/x/{name}", attempt / "checkpoints" / name, max_bytes=CHECKPOINT_MAX_BYTES)
    assert not (tmp_path / "blobs").exists() or not any(path.is_file() for path in (tmp_path / "blobs").rglob("*"))
    assert heartbeats.details == []


def test_checkpoints_are_looked_at_on_the_open_file(tmp_path: Path) -> None:
    """In the real folder: a checkpoint-named link (to a file elsewhere), a FIFO and an oversized file are left out;
    the regular file is listed."""
    workdir = tmp_path / "work"
    folder = workdir / "ocr" / "tenant-x" / "ocr_chunk-1" / "checkpoints"
    folder.mkdir(parents=True)
    other = other_folder_with_checkpoints(tmp_path)
    good, link, fifo, big = (f"{page:06d}-{'b' * 64}.json" for page in (1, 2, 3, 4))
    (folder / good).write_text("{}")
    (folder / link).symlink_to(other / os.listdir(other)[0])
    os.mkfifo(folder / fifo)
    with (folder / big).open("wb") as handle:
        handle.truncate(CHECKPOINT_MAX_BYTES + 1)
    run = RunScope(namespace="default", workflow_id="t/job", run_id="0b2c4b6e-8a53-4b8e-9d0c-2f1d3c4b5a69")
    checkpoints = PageCheckpoints(run, PageRange(first=1, last=4), 1, folder, Heartbeats())
    assert checkpoints.new(within=workdir) == [good]


def test_a_link_at_any_depth_below_the_work_folder_is_not_followed(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    attempt = workdir / "general" / "tenant-x" / "render-1"
    attempt.mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "output.pdf").write_text("the worker's")
    (attempt / "sub").symlink_to(secret)
    with pytest.raises(DocJobError) as refused:
        copy_left_file(attempt / "sub" / "output.pdf", tmp_path / "copy", within=workdir)
    assert refused.value.code == "internal.error" and not (tmp_path / "copy").exists()
    with pytest.raises(DocJobError):
        os.close(open_left_dir(attempt / "sub", within=workdir))
    os.close(open_left_dir(attempt, within=workdir))
    with pytest.raises(ValueError):  # a path outside the folder it must be reached from
        copy_left_file(secret / "output.pdf", tmp_path / "copy", within=workdir)


# --- M5: no sandbox without a seccomp filter ------------------------------------------------------------------


def test_no_sandbox_starts_where_there_is_no_seccomp_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off x86_64 (this machine is not: the architecture is the one thing faked) a confined worker refuses to start
    and no sandbox is built, instead of running children that may make namespaces of their own."""
    assert seccomp_filter() is not None  # here, on x86_64, there is one
    check_sandbox(tmp_path / "check")  # and the sandbox starts
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert seccomp_filter() is None
    with pytest.raises(SandboxUnavailable, match="seccomp"):
        check_sandbox(tmp_path / "check")
    with pytest.raises(SandboxUnavailable, match="seccomp"):
        Confinement(tmp_path).command(["/bin/true"], None)
