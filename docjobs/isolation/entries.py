"""What a document child serves: an `Entry` per task name. Kept apart from the stage work (stage_work.py, which
imports the C/C++ PDF readers) so that a zygote whose entries must not load them (gate_work.py) can name its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

ProgressFn = Callable[[int, int], None]
WorkT = TypeVar("WorkT", bound=BaseModel)
DoneT = TypeVar("DoneT", bound=BaseModel)


@dataclass(frozen=True)
class Entry(Generic[WorkT, DoneT]):
    """What a document child runs under `name`: the function, the model its work order is validated as (in
    the child), and the model its result is validated as (in the worker)."""

    name: str
    work_type: type[WorkT]
    done_type: type[DoneT]
    run: Callable[[WorkT, ProgressFn], DoneT]
