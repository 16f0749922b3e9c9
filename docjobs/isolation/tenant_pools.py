"""One pool of document children per tenant, so that no child ever serves two tenants, and the folders and uids
that keep tenants apart: each tenant's work root, its attempts' folders handed to its sandbox's uid, and a uid slot
per tenant among the open pools. `sibling_pools` makes the release gate's pools beside the stages' ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from docjobs.isolation.child_pool import ChildPool
from docjobs.isolation.child_process import ChildCrashed
from docjobs.isolation.confine import Confinement


def tenant_of(job_id: str) -> str:
    """The tenant a job belongs to: its ID's prefix (`tenant/key`); jobs started without a tenant share ''."""
    tenant, separator, _ = job_id.partition("/")
    return tenant if separator else ""


def tenant_root(work_dir: Path, tenant: str) -> Path:
    """Where a tenant's attempts keep their folders, in a queue's work folder (named by a digest: any tenant name
    is a safe folder name)."""
    return work_dir / f"tenant-{hashlib.sha256(tenant.encode()).hexdigest()[:16]}"


def hand_over(folder: Path, confinement: Confinement | None) -> None:
    """Give an attempt's folder (and what the worker put in it) to the sandbox's uid, when it is not the worker's."""
    if confinement is None or confinement.uid == os.geteuid():
        return
    uid = confinement.uid
    os.chown(folder, uid, uid, follow_symlinks=False)
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            os.chown(os.path.join(parent, name), uid, uid, follow_symlinks=False)


PoolFactory = Callable[[Path, Confinement | None], ChildPool]
# The uid slots of the open pools, across every queue's TenantPools of this process: a slot (so a uid) per tenant,
# derived from its name (the same on every worker of a machine), never shared with another tenant's open pool.
SLOT_RANGE = 60_000
_SLOTS: dict[int, tuple[str, int]] = {}  # slot -> (tenant, open pools)
_SLOTS_LOCK = threading.Lock()


def _take_slot(tenant: str) -> int:
    with _SLOTS_LOCK:
        slot = int(hashlib.sha256(tenant.encode()).hexdigest()[:8], 16) % SLOT_RANGE
        while slot in _SLOTS and _SLOTS[slot][0] != tenant:
            slot = (slot + 1) % SLOT_RANGE
        _, count = _SLOTS.get(slot, (tenant, 0))
        _SLOTS[slot] = (tenant, count + 1)
        return slot


def _free_slot(slot: int) -> None:
    with _SLOTS_LOCK:
        tenant, count = _SLOTS.get(slot, ("", 1))
        if count <= 1:
            _SLOTS.pop(slot, None)
        else:
            _SLOTS[slot] = (tenant, count - 1)


@dataclass
class _TenantPool:
    pool: ChildPool
    root: Path
    slot: int
    in_use: int = 0
    last_used: float = 0.0


class TenantPools:
    """A pool of document children per tenant, so that no child ever serves two tenants: made on first use (its
    zygote confined to the tenant's own work root when `confined`), and closed, the least recently used first,
    once more than `max_pools` are open and idle. Each attempt's folder is made inside its tenant's root."""

    def __init__(self, make_pool: PoolFactory, work_dir: Path, *, confined: bool, max_pools: int = 16) -> None:
        self.make_pool = make_pool
        self.work_dir = work_dir
        self.confined = confined
        self.max_pools = max_pools
        self._pools: dict[str, _TenantPool] = {}
        self._lock = threading.Lock()
        self._closed = False
        # Pools a tenant's task here may say it will need next (a signed job's release gate): opened as soon as
        # the task's lease is taken, each zygote's imports beside the others' instead of after them.
        self.followers: list[TenantPools] = []

    def root(self, tenant: str) -> Path:
        return tenant_root(self.work_dir, tenant)

    @contextlib.contextmanager
    def lease(self, job_id: str, *, with_followers: bool = False) -> Iterator[tuple[ChildPool, Path | None]]:
        """The job's tenant's pool and work root, kept open while the block runs; `with_followers`: the job will
        need the followers' pools too (a signed job), and each that its tenant has not open is opened ahead.
        Not for every job: a gate zygote costs a tenant whose jobs never sign its imports and its memory."""
        with self._lock:
            if self._closed:
                raise ChildCrashed("the worker is stopping")
            tenant = tenant_of(job_id)
            if with_followers:
                for follower in self.followers:
                    follower.open_ahead(tenant)
            entry = self._pools.get(tenant)
            if entry is None:
                entry = self._open(tenant)
            entry.in_use += 1
        try:
            with entry.pool.work_root() as root:  # confined: the tenant's live sandbox's own root, else its folder
                yield entry.pool, root.path if root is not None else entry.root
        finally:
            with self._lock:
                entry.in_use -= 1
                entry.last_used = time.monotonic()
                idle = self._evictable()
            for evicted in idle:
                evicted.pool.close()
                _free_slot(evicted.slot)

    def open_ahead(self, tenant: str) -> None:
        """Open `tenant`'s pool in the background, if it is not open: its first task here finds it made, or waits
        for it as it would have (a failure is left for that task to meet)."""

        def open_it() -> None:
            with self._lock:
                if self._closed or tenant in self._pools:
                    return
                with contextlib.suppress(Exception):
                    self._open(tenant)

        with self._lock:
            if self._closed or tenant in self._pools:  # the common case: no thread for a pool already open
                return
        threading.Thread(target=open_it, name="docjobs-pool-ahead", daemon=True).start()

    def pools(self) -> dict[str, ChildPool]:
        with self._lock:
            return {tenant: entry.pool for tenant, entry in self._pools.items()}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            entries, self._pools = list(self._pools.values()), {}
        for entry in entries:
            entry.pool.close()
            _free_slot(entry.slot)

    def _open(self, tenant: str) -> _TenantPool:
        """A new tenant's pool (under the lock: a tenant's first task waits for its zygote's imports)."""
        root = self.root(tenant)
        root.mkdir(parents=True, exist_ok=True)
        slot = _take_slot(tenant)
        confinement = Confinement(root, slot=slot) if self.confined else None
        if confinement is not None and confinement.uid != os.geteuid():
            os.chown(root, confinement.uid, confinement.uid)
        root.chmod(0o700)
        pool = self.make_pool(root, confinement)
        try:
            pool.start()
        except BaseException:
            pool.close()
            _free_slot(slot)
            raise
        entry = self._pools[tenant] = _TenantPool(pool, root, slot, last_used=time.monotonic())
        return entry

    def _evictable(self) -> list[_TenantPool]:
        """Idle pools beyond `max_pools`, least recently used first, taken out (closed by the caller)."""
        idle = sorted((e.last_used, tenant) for tenant, e in self._pools.items() if e.in_use == 0)
        excess = len(self._pools) - self.max_pools
        return [self._pools.pop(tenant) for _, tenant in idle[: max(excess, 0)]]


def sibling_pools(pools: ChildPool | TenantPools, entries: str) -> ChildPool | TenantPools:
    """Pools like `pools` (the same limits and tenants' work roots; confined alike: each tenant's sandbox, uid,
    limits and Landlock rules) whose zygotes import `entries` instead of the stage work, each in a sandbox of its
    own (its own PID namespace: no process of the stages' children is in it), with a fresh child for every task.
    The release gate's (docjobs/isolation/gate_work.py): a child that never loaded a C/C++ PDF reader, and never
    made the bytes it reads."""
    if isinstance(pools, TenantPools):
        make = pools.make_pool
        sibling = TenantPools(
            lambda home, confinement: _sibling(make(home, confinement), entries),
            pools.work_dir,
            confined=pools.confined,
            max_pools=pools.max_pools,
        )
        pools.followers.append(sibling)  # a signed job's stage opens its sibling ahead
        return sibling
    return _sibling(pools, entries)


def _sibling(pool: ChildPool, entries: str) -> ChildPool:
    confinement = pool.confinement
    if confinement is not None:  # the packages of its own entries are bound, not those of `pool`'s
        confinement = dataclasses.replace(confinement, code=())
    return ChildPool(
        pool.limits, home=pool.home, warm=pool.warm, recycle_after=1, entries=entries, confinement=confinement
    )
