"""The release gate's work, served by a sandbox of its own (docjobs/pdf/release_gate.py says what it checks).

A pool whose zygote imports this module (`ENTRIES_MODULE`), not docjobs/isolation/stage_work.py: its children are
confined like every document child (the tenant's sandbox, uid and limits, Landlock to the gate's folder), but the
only PDF code they ever load is pure Python (pypdf, pyHanko's reader). They never ran a C/C++ parser on a
document, and none of them made the bytes they read: a fresh child for every gate, in a PID namespace of its own,
apart from the children of the stages (docjobs/isolation/tenant_pools.py, `sibling_pools`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docjobs.domain.base import Frozen
from docjobs.domain.models import ReleaseGateSettings
from docjobs.isolation.entries import Entry, ProgressFn
from docjobs.pdf.release_gate import GateReport, read_gate

ENTRIES_MODULE = __name__  # what a gate pool's zygote imports
GATE_ENTRY = "release_gate"


class GateWork(Frozen):
    document: Path  # the worker's checked copy of the file prepared for signing, in the gate's own folder
    settings: ReleaseGateSettings


def release_gate(work: GateWork, progress: ProgressFn) -> GateReport:
    """Read the prepared document with the pure-Python readers and report what the gate found."""
    return read_gate(work.document, work.settings, on_pages=lambda pages: progress(0, pages))


GATE = Entry(GATE_ENTRY, GateWork, GateReport, release_gate)
ENTRIES: dict[str, Entry[Any, Any]] = {GATE.name: GATE}
# Modules the gate imports only on first use: the zygote imports them too, so no child pays for them per task.
PRELOAD = (
    "encodings.ascii",
    "pypdf._page",
    "pypdf.filters",
    "pyhanko.pdf_utils.filters",
)
