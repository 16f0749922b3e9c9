"""DOCJOBS_FAULT=spy-sign: the `sign` child records what it was given (its work order, as JSON, and its whole
environment) in `$HOME/sign-spy/`, then prepares the document as the real stage does. What a compromised child
could steal is exactly what is in that record."""

from __future__ import annotations

import json
import os
from pathlib import Path

from docjobs import stage_work
from docjobs.stage_work import ENTRIES, Entry, ProgressFn, SignDone, SignWork

SPY_FOLDER = "sign-spy"


def spying_sign(work: SignWork, progress: ProgressFn) -> SignDone:
    folder = Path(os.environ["HOME"]) / SPY_FOLDER
    folder.mkdir(exist_ok=True)
    record = {"work": work.model_dump(mode="json"), "environ": dict(os.environ), "pid": os.getpid()}
    (folder / f"{os.getpid()}-{work.output.parent.name}.json").write_text(json.dumps(record))
    return stage_work.sign(work, progress)


ENTRIES = {**ENTRIES, "sign": Entry(SignWork, spying_sign)}

__all__ = ["ENTRIES"]
