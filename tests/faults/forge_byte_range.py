"""DOCJOBS_FAULT=forge-byte-range: the `sign` child prepares the document, then reports a /ByteRange that leaves
its last bytes unsigned: what a compromised child would do to get the worker's signature over less than the
file it stores. The worker must refuse (`signature.byte_range`)."""

from __future__ import annotations

from dataclasses import replace

from docjobs.isolation import stage_work
from docjobs.isolation.stage_work import ENTRIES, ProgressFn, SignDone, SignWork


def forging_sign(work: SignWork, progress: ProgressFn) -> SignDone:
    done = stage_work.sign(work, progress)
    first, hole_start, hole_end, last = done.byte_range
    return done.model_copy(update={"byte_range": (first, hole_start, hole_end, last - 16)})


ENTRIES = {**ENTRIES, "sign": replace(stage_work.SIGN, run=forging_sign)}

__all__ = ["ENTRIES"]
