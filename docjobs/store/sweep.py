"""Leftovers of a crash: plaintext documents must not outlive the jobs they belonged to.

Stage attempts and API uploads remove their folders when they end; a process that is killed cannot. What it
left is swept when a worker starts: anything older than the longest a job may live (its deadline plus the
grace Temporal gives it) cannot belong to a job still running.

What is swept was written by document children, which a document may have taken over: a folder may have any
mode (`chmod 000`), any depth, any names. `remove_tree` removes it anyway, never following a link, and the
sweep goes on past anything it still cannot remove: a child must never be able to stop its worker from starting.
"""

from __future__ import annotations

import errno
import logging
import os
import time
import uuid
from collections.abc import Collection
from datetime import timedelta
from pathlib import Path

log = logging.getLogger("docjobs.sweep")

_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_FOLDER_NOFOLLOW = _FOLDER | os.O_NOFOLLOW
# Descriptors held at once while emptying a tree (one a level): a deeper folder is moved up to the tree's top and
# emptied from there, so no depth a child can make runs the worker out of descriptors or stack.
MAX_OPEN_LEVELS = 64


def remove_tree(path: Path | str) -> None:
    """Remove `path` (a file, a link, or a folder with everything in it) whatever modes its owner gave it.

    A folder is made its owner's again (u+rwx, as `tempfile.TemporaryDirectory` does when it cleans up) before it
    is listed and emptied: a child that ran `chmod 000` on a folder it made cannot make it stay. Everything is
    reached through folder descriptors and removed by name: a link is removed, never followed, and the mode of
    nothing outside the tree is ever changed. Raises OSError for what still cannot be removed (another owner's
    folder, for a worker that is not root)."""
    path = Path(path)
    parent = os.open(path.parent, _FOLDER)
    try:
        if _unlink(parent, path.name):
            return
        _make_ours(parent, path.name)
        top = os.open(path.name, _FOLDER_NOFOLLOW, dir_fd=parent)
        try:
            _empty(top)
        finally:
            os.close(top)
        os.rmdir(path.name, dir_fd=parent)
    finally:
        os.close(parent)


def _unlink(folder: int, name: str) -> bool:
    """Remove `name` if it is not a folder (gone already counts as removed); False for a folder."""
    try:
        os.unlink(name, dir_fd=folder)
    except IsADirectoryError:
        return False
    except FileNotFoundError:
        pass
    return True


def _make_ours(folder: int, name: str) -> None:
    """Give the folder `name` (in `folder`) the modes its owner needs to list and empty it. Never through a link:
    a link put there meanwhile is refused (ValueError from the C library's no-follow chmod, raised as OSError)."""
    try:
        os.chmod(name, 0o700, dir_fd=folder, follow_symlinks=False)
    except ValueError:
        raise OSError(errno.ELOOP, "not a folder any more") from None


def _empty(top: int) -> None:
    """Remove everything in the folder `top` (its descriptor), depth first, without recursion."""
    levels: list[tuple[int, str]] = [(top, "")]  # (descriptor, name in the level above) of the folders open
    try:
        while levels:
            current, _ = levels[-1]
            inner = _first_folder_left(current, top, deep=len(levels) >= MAX_OPEN_LEVELS)
            if inner is not None:
                levels.append((os.open(inner, _FOLDER_NOFOLLOW, dir_fd=current), inner))
                continue
            if len(levels) == 1:
                return
            emptied, name = levels.pop()
            os.close(emptied)
            os.rmdir(name, dir_fd=levels[-1][0])
    finally:
        for opened, _ in levels[1:]:
            os.close(opened)


def _first_folder_left(current: int, top: int, *, deep: bool) -> str | None:
    """Remove what `current` holds that is not a non-empty folder; return the first such folder (made ours), or
    None once `current` is empty. At the deepest level held open (`deep`), a folder is moved up to `top` instead."""
    for name in os.listdir(current):
        if _unlink(current, name):
            continue
        _make_ours(current, name)
        if deep:
            os.rename(name, f".swept-{uuid.uuid4().hex}", src_dir_fd=current, dst_dir_fd=top)
            continue
        try:
            os.rmdir(name, dir_fd=current)
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            return name
    return None


def sweep_stale(folder: Path, older_than: timedelta, keep: Collection[str] = ()) -> int:
    """Remove the entries of `folder` not modified for `older_than`, except those named in `keep` (folders swept
    on their own); returns how many were removed.

    Never raises: what cannot be listed or removed is logged (the kind of entry and the error's kind, never a
    name: a child chose the names) and left for the next start."""
    cutoff = time.time() - older_than.total_seconds()
    removed = 0
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return 0
    except Exception as error:  # noqa: BLE001 - a folder the sweep cannot list must not stop the worker's start
        log.warning("could not list %s for stale entries: %s", folder.name, _kind_of(error))
        return 0
    for entry in entries:
        if entry.name in keep:
            continue
        try:
            if entry.lstat().st_mtime >= cutoff:
                continue
            remove_tree(entry)
            removed += 1
        except FileNotFoundError:
            continue  # removed meanwhile by its owner
        except Exception as error:  # noqa: BLE001 - left for the next start: the worker starts anyway
            log.warning("could not remove a stale entry of %s: %s", folder.name, _kind_of(error))
    if removed:
        log.info("swept %d stale entr%s from %s", removed, "y" if removed == 1 else "ies", folder.name)
    return removed


def _kind_of(error: Exception) -> str:
    """An error without the path it names (a child chose the names in a tenant's folder)."""
    code = getattr(error, "errno", None)
    return f"{type(error).__name__} ({errno.errorcode.get(code, code)})" if code else type(error).__name__
