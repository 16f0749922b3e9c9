"""The workflow calls activities by typed declarations (workflows/stages.py): each one has exactly one
implementation registered by the worker, under its name, with its parameter and return types."""

from __future__ import annotations

import ast
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from docjobs.domain.states import Stage
from docjobs.isolation.sandbox import ChildLimits, ChildPool
from docjobs.temporal.settings import TemporalSettings
from docjobs.worker import QUEUES, stage_activities
from workflows import document_job, stages
from workflows.stages import DECLARATIONS, activity_name

# The activity names of recorded histories (tests/histories): a rename would break every job in flight.
RECORDED_NAMES = {
    "resolve",
    "generate",
    "render",
    "ocr",
    "redact",
    "sign",
    "verify",
    "publish",
    "evidence",
    "cleanup",
    "notify",
    "ocr_chunk",
    "ocr_merge",
}


def types_of(function: Callable[..., Any]) -> tuple[list[Any], Any]:
    """(parameter types, return type) of a function or bound method, its annotations resolved."""
    hints = typing.get_type_hints(function)
    parameters = [hints[name] for name in inspect.signature(function).parameters]
    return parameters, hints["return"]


@pytest.fixture
def registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Callable[..., Any]]]:
    monkeypatch.setenv("DOCJOBS_DATA_DIR", str(tmp_path))
    settings = TemporalSettings.from_env()
    pools = {queue: ChildPool(ChildLimits(), home=tmp_path, warm=0, recycle_after=1) for queue in QUEUES}  # unstarted
    return stage_activities(settings, pools)


def test_every_declaration_has_exactly_one_implementation_of_its_types(
    registered: dict[str, list[Callable[..., Any]]],
) -> None:
    implementations = [function for functions in registered.values() for function in functions]
    for declaration in DECLARATIONS:
        name = activity_name(declaration)
        matching = [function for function in implementations if activity_name(function) == name]
        assert len(matching) == 1, f"{name}: {len(matching)} implementations registered"
        assert types_of(matching[0]) == types_of(declaration), name
    assert {activity_name(function) for function in implementations} == {activity_name(d) for d in DECLARATIONS}
    assert {activity_name(declaration) for declaration in DECLARATIONS} == RECORDED_NAMES
    # OCR has its own queue, with the parts of a long document's OCR (workflows/ocr_chunks.py)
    assert [activity_name(function) for function in registered["ocr"]] == ["ocr", "ocr_chunk", "ocr_merge"]


def test_every_stage_is_declared() -> None:
    for stage in Stage:
        assert activity_name(getattr(stages, stage.value)) == stage.value


def test_the_workflow_calls_activities_only_by_declaration() -> None:
    tree = ast.parse(Path(document_job.__file__).read_text())
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith(("execute_activity", "start_activity"))
    ]
    assert calls
    for call in calls:
        first = call.args[0]
        assert not isinstance(first, ast.Constant), f"line {call.lineno}: an activity called by a string name"
        assert all(keyword.arg != "result_type" for keyword in call.keywords), "the declaration gives the type"
