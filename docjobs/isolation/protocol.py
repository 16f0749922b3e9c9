"""The messages between a worker and its document children: one JSON object a line, each a pydantic model told
apart by its `kind`.

The worker writes a `Task` on a child's task pipe; the child validates it before it runs anything. On the child's
channel come, first, the zygote's `Forked` (the child's pid), then the child's `Progress` reports and its verdict
(`Result`, `Failure` or `Crash`), last the zygote's `Exited` (the kernel's account of the child, once reaped). The
child runs tenants' documents, so the worker trusts nothing it reads there: `read_child_message` validates each
line as `ChildMessage` (strict: no string is taken for a number), a line that is no JSON object is unreadable, one
of a known kind that does not match its model is malformed (`MalformedMessage`), and one of an unknown kind is
ignored. What a task cost (`usage`) is accounting, never a verdict: it stays any JSON in the messages and is
validated on its own (`TaskUsage`), a malformed one counting as none.

Both sides are the same build: the worker starts its zygote from its own code folder (`zygote.CODE_ROOT`), so the
protocol needs no versions. The zygote imports this module (and pydantic) only once it has limited itself, with
the stage work, before it forks: no child pays for the import.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from docjobs.domain.errors import FailureCode
from docjobs.domain.stage_cost import CpuBudget


class TaskUsage(BaseModel):
    """What one task cost in its child: CPU seconds (user + system, the tools it ran included), peak resident
    memory, bytes read and written. Reported by the child, which may lie about it (only to its own accounts)."""

    cpu_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    peak_memory_mb: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    bytes_read: int = Field(default=0, ge=0)
    bytes_written: int = Field(default=0, ge=0)


class Message(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True)

    def line(self) -> bytes:
        """The message as written on a pipe: one line of compact JSON."""
        return self.model_dump_json().encode() + b"\n"


class Task(Message):
    """A work order, worker to child: the entry to run (`ENTRIES` of the pool's entries module), its work order as
    JSON (validated by the entry's model), the CPU budget, the most pages the task may claim, and the attempt's
    folder (the one a confined child may write besides its own)."""

    kind: Literal["task"] = "task"
    entry: str
    work: dict[str, Any]
    cpu: CpuBudget
    max_pages: int = Field(ge=0)
    folder: str | None = None


class Forked(Message):
    """The zygote forked the child: its pid, as the zygote sees it (inside a sandbox, in its PID namespace)."""

    kind: Literal["forked"] = "forked"
    pid: int = Field(gt=0)


class Progress(Message):
    """Pages done of the document's total (the CPU budget grows with the total, the lease is renewed)."""

    kind: Literal["progress"] = "progress"
    done: int = Field(ge=0)
    total: int

    @model_validator(mode="after")
    def _done_within_total(self) -> Progress:
        if self.done > self.total:
            raise ValueError("more pages done than there are")
        return self


class Result(Message):
    """The task's result, validated by the worker as the entry's result model; and what the task cost."""

    kind: Literal["result"] = "result"
    value: Any = None
    usage: Any = None


class Failure(Message):
    """The document failed with one of the failure codes (docjobs/domain/errors.py), a safe message."""

    kind: Literal["failure"] = "failure"
    code: FailureCode
    message: str
    usage: Any = None


class Crash(Message):
    """The child failed outside the failure codes: named by the exception's type only (a message may quote the
    document)."""

    kind: Literal["crash"] = "crash"
    error: str = "unknown"
    usage: Any = None


class Exited(Message):
    """The zygote reaped the child: its wait status, CPU seconds (its tools' included) and peak memory."""

    kind: Literal["exited"] = "exited"
    status: int
    cpu: float
    maxrss_kb: int


# What a child reads on its task pipe: tagged too, so that a line without its kind is refused (the defaults only
# spare the sender from naming the kind it builds).
WorkerMessage = Annotated[Task, Field(discriminator="kind")]
_WORKER_MESSAGE: TypeAdapter[WorkerMessage] = TypeAdapter(WorkerMessage)
ChildMessage = Annotated[Forked | Progress | Result | Failure | Crash | Exited, Field(discriminator="kind")]
_CHILD_MESSAGE: TypeAdapter[ChildMessage] = TypeAdapter(ChildMessage)
_UNKNOWN_KIND = frozenset({"union_tag_invalid", "union_tag_not_found"})


class UnreadableMessage(Exception):
    """A line that is not a JSON object."""


class MalformedMessage(Exception):
    """A message of a known kind that does not match its model: `kind` names which."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"malformed {kind}")
        self.kind = kind


def read_task(line: bytes) -> Task:
    """One line of a child's task pipe as its task. Raises ValidationError."""
    return _WORKER_MESSAGE.validate_json(line)


def read_child_message(line: bytes) -> ChildMessage | None:
    """One line of a child's channel as its message; None for a kind this build does not know (ignored).

    Raises UnreadableMessage or MalformedMessage."""
    try:
        return _CHILD_MESSAGE.validate_json(line)
    except ValidationError as error:
        first = error.errors()[0]
        if first["type"] in _UNKNOWN_KIND:
            return None
        if not first["loc"]:  # not JSON, or not an object
            raise UnreadableMessage() from None
        raise MalformedMessage(str(first["loc"][0])) from None  # a tagged union's errors start with the tag


def task_usage(usage: Any) -> TaskUsage | None:
    """The cost a message reports, or None when it is missing or malformed."""
    try:
        return TaskUsage.model_validate(usage)
    except ValidationError:
        return None
