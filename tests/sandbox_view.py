"""A live sandbox's files, as a test reads them: each sandbox writes in a tmpfs of its own, mounted at its tenant's
work root in its mount namespace only (docjobs/isolation/sandbox_root.py), so the host's folder stays empty and a
test looks through /proc/PID/root of one of the sandbox's processes, as the worker does."""

from __future__ import annotations

import os
from pathlib import Path


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (children of children too), from /proc."""
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                continue
            found.update(children)
            frontier += children
    return found


def sandbox_views(worker: int, path: Path) -> list[Path]:
    """`path` (absolute, as a sandbox sees it) in each live sandbox below the process `worker` where it exists:
    one path a sandbox, reached through one of its processes."""
    views: dict[tuple[int, int], Path] = {}
    for pid in sorted(descendants(worker)):
        view = Path(f"/proc/{pid}/root") / path.relative_to("/")
        try:
            found = view.stat()
        except OSError:  # not there, or the process ended meanwhile
            continue
        views.setdefault((found.st_dev, found.st_ino), view)
    return list(views.values())


def sandbox_view(worker: int, path: Path) -> Path:
    """`path` in the one live sandbox below `worker` that has it."""
    views = sandbox_views(worker, path)
    assert len(views) == 1, f"{path} is in {len(views)} sandboxes of process {worker}"
    return views[0]


def own_uid(path: Path, uid: int) -> None:
    """Give `path` to the sandbox's uid, when it is not the test's (a root worker's sandbox runs as its own)."""
    if uid != os.geteuid():
        os.chown(path, uid, uid)
