"""DOCJOBS_FAULT=spy-sign: the `sign` and `verify` children record what they were given (the work order, as JSON,
and the whole environment) in `sign-spy/` in the tenant's work root (the folder these test children may write
besides their own: `WRITABLE_IN_ROOT`; their HOME goes with them), then do the real work. What a compromised child
could steal is exactly what is in those records."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel

from docjobs.domain.models import VerifyDone
from docjobs.isolation import stage_work
from docjobs.isolation.stage_work import ENTRIES, ProgressFn, SignDone, SignWork, VerifyWork

SPY_FOLDER = "sign-spy"
WRITABLE_IN_ROOT = (SPY_FOLDER,)  # read by the zygote (docjobs/isolation/sandbox_child.py)


def _record(stage: str, work: BaseModel, folder: Path) -> None:
    spied = Path(os.environ["HOME"]).parent / SPY_FOLDER  # HOME is the child's private folder in the work root
    record = {"work": work.model_dump(mode="json"), "environ": dict(os.environ), "pid": os.getpid()}
    (spied / f"{stage}-{os.getpid()}-{folder.name}.json").write_text(json.dumps(record))


def spying_sign(work: SignWork, progress: ProgressFn) -> SignDone:
    _record("sign", work, work.output.parent)
    return stage_work.sign(work, progress)


def spying_verify(work: VerifyWork, progress: ProgressFn) -> VerifyDone:
    _record("verify", work, work.workdir)
    return stage_work.verify(work, progress)


ENTRIES = {
    **ENTRIES,
    "sign": replace(stage_work.SIGN, run=spying_sign),
    "verify": replace(stage_work.VERIFY, run=spying_verify),
}

__all__ = ["ENTRIES"]
