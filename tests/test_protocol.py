"""The messages between a worker and its document children (docjobs/isolation/protocol.py): each one round-trips,
what a child may not send is refused as it always was, and a real pool answers a compromised child's lines so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from docjobs.domain.errors import FailureCode
from docjobs.domain.stage_cost import CpuBudget
from docjobs.isolation.child_pool import ChildLimits, ChildPool
from docjobs.isolation.child_process import MAX_MESSAGE_BYTES, ChildCrashed
from docjobs.isolation.protocol import (
    Crash,
    Exited,
    Failure,
    Forked,
    MalformedMessage,
    Progress,
    Result,
    Task,
    TaskUsage,
    UnreadableMessage,
    read_child_message,
    read_task,
    task_usage,
)
from tests.sandbox_entries import Order, Seen

USAGE = TaskUsage(cpu_seconds=0.25, peak_memory_mb=12.5, bytes_read=10, bytes_written=20)
CHILD_MESSAGES: list[BaseModel] = [
    Forked(pid=42),
    Progress(done=3, total=7),
    Result(value={"pid": 7, "folder": "/x"}, usage=USAGE.model_dump()),
    Failure(code=FailureCode.INPUT_TOO_COMPLEX, message="too deep", usage=USAGE.model_dump()),
    Failure(code=FailureCode.INPUT_TOO_COMPLEX, message="out of memory"),  # the zygote's, prepared: no usage
    Crash(error="KeyError", usage=USAGE.model_dump()),
    Crash(error="Landlock: OSError"),
    Exited(status=9, cpu=1.5, maxrss_kb=2048),
]


@pytest.mark.parametrize("message", CHILD_MESSAGES, ids=lambda message: type(message).__name__)
def test_every_child_message_round_trips(message: Forked | Progress | Result | Failure | Crash | Exited) -> None:
    line = message.line()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert read_child_message(line.rstrip(b"\n")) == message


def test_a_task_round_trips_and_carries_its_kind() -> None:
    task = Task(entry="render", work={"source": "/a/in.pdf"}, cpu=CpuBudget(base_seconds=5), max_pages=3, folder="/a")
    assert b'"kind":"task"' in task.line()
    assert read_task(task.line()) == task


@pytest.mark.parametrize(
    "line",
    [
        b'{"entry":"render","work":{},"cpu":{},"max_pages":3}',  # no kind: as tasks were written before
        b'{"kind":"progress","entry":"render","work":{},"cpu":{},"max_pages":3}',
        b'{"kind":"task","work":{},"cpu":{},"max_pages":3}',
        b'{"kind":"task","entry":"render","work":[],"cpu":{},"max_pages":3}',
        b'{"kind":"task","entry":"render","work":{},"cpu":{},"max_pages":-1}',
        b'{"kind":"task","entry":"render","work":{},"cpu":{"base_seconds":0},"max_pages":3}',
        b'{"kind":"task","entry":"render","work":{},"cpu":{},"max_pages":"3"}',
        b"not json",
    ],
)
def test_a_child_refuses_a_malformed_task(line: bytes) -> None:
    with pytest.raises(ValidationError):
        read_task(line)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (b'{"kind":"progress","done":"1","total":2}', "progress"),  # no string is taken for a number
        (b'{"kind":"progress","done":true,"total":2}', "progress"),
        (b'{"kind":"progress","done":3,"total":2}', "progress"),
        (b'{"kind":"progress","done":-1,"total":2}', "progress"),
        (b'{"kind":"progress","done":1}', "progress"),
        (b'{"kind":"failure","code":"made.up","message":"x"}', "failure"),
        (b'{"kind":"failure","code":"input.too_complex"}', "failure"),
        (b'{"kind":"failure","code":"input.too_complex","message":5}', "failure"),
        (b'{"kind":"crash","error":5}', "crash"),
        (b'{"kind":"forked","pid":0}', "forked"),
        (b'{"kind":"exited","status":"0","cpu":1.0,"maxrss_kb":1}', "exited"),
    ],
)
def test_a_malformed_message_is_refused_by_its_kind(line: bytes, kind: str) -> None:
    with pytest.raises(MalformedMessage) as refused:
        read_child_message(line)
    assert refused.value.kind == kind and str(refused.value) == f"malformed {kind}"


@pytest.mark.parametrize("line", [b"not json", b"", b"[1, 2]", b'"result"', b"5", b"\xff", b"[" * 100_000])
def test_what_is_no_json_object_is_unreadable(line: bytes) -> None:
    with pytest.raises(UnreadableMessage):
        read_child_message(line)


@pytest.mark.parametrize("line", [b'{"kind":"surprise","value":1}', b'{"value":1}', b'{"kind":5}', b'{"kind":"task"}'])
def test_a_message_of_an_unknown_kind_is_ignored(line: bytes) -> None:
    """A kind this build does not know (none is sent: both sides are one build) is dropped, as before; a task is
    never something a child sends."""
    assert read_child_message(line) is None


def test_usage_is_accounting_never_a_verdict() -> None:
    """A malformed usage leaves its message valid, and counts as none."""
    message = read_child_message(b'{"kind":"result","value":{"pid":1},"usage":{"cpu_seconds":-1}}')
    assert isinstance(message, Result) and message.value == {"pid": 1}
    for usage in ({"cpu_seconds": -1}, {"bytes_read": "many"}, "lots", None, [1]):
        assert task_usage(usage) is None
    assert task_usage(USAGE.model_dump()) == USAGE


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[ChildPool]:
    children = ChildPool(ChildLimits(stall_seconds=30), home=tmp_path, warm=1, entries="tests.sandbox_entries")
    children.start()
    yield children
    children.close()


QUICK = CpuBudget(base_seconds=30)


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("order", "reason"),
    [
        (Order(lines=('{"kind":"progress","done":"1","total":2}',)), "malformed progress"),
        (Order(lines=('{"kind":"failure","code":"made.up","message":"x"}',)), "malformed failure"),
        (Order(lines=("not json",)), "unreadable message"),
        (Order(lines=("[1]",)), "unreadable message"),
        (Order(unterminated_mb=(MAX_MESSAGE_BYTES >> 20) + 1), "message too large"),
    ],
    ids=["progress", "failure", "not-json", "not-an-object", "too-large"],
)
def test_a_compromised_childs_malformed_lines_are_crashes(pool: ChildPool, order: Order, reason: str) -> None:
    """A real child writes them on its channel: the worker's verdict is the crash it always was, by its reason."""
    with pytest.raises(ChildCrashed) as crashed:
        pool.run("forge", order, Seen, cpu=QUICK)
    assert str(crashed.value) == reason
    assert pool.run("pages", Order(pages=1), Seen, cpu=QUICK).pid > 0  # the pool goes on


@pytest.mark.e2e
def test_unknown_kinds_are_ignored_and_a_malformed_usage_counts_as_none(pool: ChildPool) -> None:
    usages: list[TaskUsage] = []
    lines = (
        '{"kind":"surprise"}',
        '{"no kind":1}',
        '{"kind":"result","value":{"pid":7},"usage":{"cpu_seconds":-1}}',
    )
    seen = pool.run("forge", Order(lines=lines), Seen, cpu=QUICK, on_usage=usages.append)
    assert seen.pid == 7
    assert len(usages) == 1 and usages[0].cpu_seconds >= 0  # the kernel's account, or none: never the child's -1


@pytest.mark.e2e
@pytest.mark.parametrize(
    "line",
    [b'{"entry":"pages","work":{},"cpu":{},"max_pages":3}\n', b'{"kind":"task","entry":"pages","work":{}}\n'],
    ids=["no-kind", "no-budget"],
)
def test_a_child_runs_no_malformed_task(pool: ChildPool, line: bytes) -> None:
    """What reaches a child on its task pipe is validated before anything runs: it answers with a crash and ends."""
    child = pool._acquire()
    try:
        child.tasks.write(line)
        child.tasks.flush()
        heard: list[object] = []
        while (messages := child.read(5)) is not None:
            heard += messages
        assert heard == [Crash(error="malformed task")]
        assert child.account is not None and child.account.status == 0  # it ended by itself, nothing ran
    finally:
        child.kill()
