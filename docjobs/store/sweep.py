"""Leftovers of a crash: plaintext documents must not outlive the jobs they belonged to.

Stage attempts and API uploads remove their folders when they end; a process that is killed cannot. What it
left is swept when a worker starts: anything older than the longest a job may live (its deadline plus the
grace Temporal gives it) cannot belong to a job still running.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Collection
from datetime import timedelta
from pathlib import Path

log = logging.getLogger("docjobs.sweep")


def sweep_stale(folder: Path, older_than: timedelta, keep: Collection[str] = ()) -> int:
    """Remove the entries of `folder` not modified for `older_than`, except those named in `keep` (folders swept
    on their own); returns how many were removed."""
    cutoff = time.time() - older_than.total_seconds()
    removed = 0
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return 0
    for entry in entries:
        if entry.name in keep:
            continue
        try:
            if entry.lstat().st_mtime >= cutoff:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed += 1
        except FileNotFoundError:
            continue  # removed meanwhile by its owner
    if removed:
        log.info("swept %d stale entr%s from %s", removed, "y" if removed == 1 else "ies", folder.name)
    return removed
