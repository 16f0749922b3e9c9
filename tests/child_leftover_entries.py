"""A stage double for tests/test_child_leftovers.py: a document child taken over by its document, that leaves its
private folder as hard to remove as it can."""

from __future__ import annotations

import os
from pathlib import Path

from docjobs.domain.base import Frozen
from docjobs.isolation.stage_work import Entry
from tests.sandbox_entries import Order, ProgressFn, Seen


def lock_out(order: Order, progress: ProgressFn) -> Seen:
    """In its private folder (its working folder): `mkdir d; touch d/f; chmod 000 d`, what the review measured
    (M1), and a folder its owner may not even enter, below one it may not list."""
    Path("d").mkdir()
    Path("d/f").write_text("left by a taken-over child")
    Path("d/inner").mkdir()
    os.chmod("d/inner", 0)
    os.chmod("d", 0)
    return Seen(pid=os.getpid(), folder=os.getcwd())


ENTRIES = {"lock_out": Entry("lock_out", Order, Frozen, lock_out)}
