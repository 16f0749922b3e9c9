"""How an activity implementation is registered: under its spec (docjobs/domain/stage_specs.py), the one place its name
and types are declared. `workflows.stages.activity_name` reads the spec back, with no SDK internals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from temporalio import activity

from docjobs.domain.stage_specs import ActivitySpec, mark_spec

FunctionT = TypeVar("FunctionT", bound=Callable[..., Any])


def implements(spec: ActivitySpec[Any, Any]) -> Callable[[FunctionT], FunctionT]:
    """The decorator of `spec`'s implementation: a Temporal activity under the spec's name, marked with the spec."""

    def register(function: FunctionT) -> FunctionT:
        return activity.defn(name=spec.name)(mark_spec(spec)(function))

    return register
