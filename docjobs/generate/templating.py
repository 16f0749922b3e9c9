"""A template rendered with JSON data in Jinja's sandbox, under a time limit.

The template is the tenant's, the data is document content; neither is trusted. Jinja's sandbox (the
`ImmutableSandboxedEnvironment` kind of `SandboxedEnvironment`) refuses unsafe attribute access and calls (no
`__class__`, no `__globals__`, no method that changes the data or reaches outside it); `StrictUndefined` turns
a missing value into an error instead of an empty string; autoescape keeps the data from writing HTML. The
loader reads only the template's own folder (includes too), and a wall-clock limit ends a template that loops
without bound. A failure names the kind of error and the template's line, never a value of the data (the
exception's own message may quote one).
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jinja2 import FileSystemLoader, StrictUndefined, TemplateError, TemplateSyntaxError, UndefinedError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range

from docjobs.domain.errors import DocJobError, FailureCode

MAX_DATA_BYTES = 16 * 1024 * 1024


class TemplateTimeout(Exception):
    pass


class _Deadline:
    """The template's wall-clock limit, checked where a template can spend time without bound: every
    iteration of `range` and every call the sandbox makes (macros included). No signal is used, so the
    limit holds in any thread and leaves the process's own alarms alone."""

    def __init__(self, seconds: float) -> None:
        self._end = time.monotonic() + seconds

    def check(self) -> None:
        if time.monotonic() > self._end:
            raise TemplateTimeout

    def range(self, *args: int) -> Iterator[int]:
        for value in safe_range(*args):
            self.check()
            yield value


class _TimedEnvironment(ImmutableSandboxedEnvironment):
    def __init__(self, deadline: _Deadline, **options: Any) -> None:
        super().__init__(**options)
        self._deadline = deadline
        self.globals["range"] = deadline.range

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        self._deadline.check()
        return super().call(__context, __obj, *args, **kwargs)


def load_data(path: Path) -> dict[str, Any]:
    """The job's data: a JSON object, whose keys are the template's variables."""
    if path.stat().st_size > MAX_DATA_BYTES:
        raise DocJobError(FailureCode.INPUT_TOO_LARGE, f"the template data is larger than {MAX_DATA_BYTES} bytes")
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the template data is not valid JSON") from None
    if not isinstance(data, dict):
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the template data is not a JSON object")
    return data


def _template_line(error: BaseException, folder: Path) -> int | None:
    """The line of the template (or an included one) where `error` arose: Jinja maps its frames to them."""
    if isinstance(error, TemplateSyntaxError):
        return error.lineno
    lines = [
        line
        for frame, line in traceback.walk_tb(error.__traceback__)
        if frame.f_code.co_filename.startswith(str(folder))
    ]
    return lines[-1] if lines else None


def _kind(error: BaseException, seconds: float) -> str:
    if isinstance(error, TemplateSyntaxError):
        return "a syntax error"
    if isinstance(error, SecurityError):
        return "an operation the sandbox refuses"
    if isinstance(error, UndefinedError):
        return "an undefined value"
    if isinstance(error, TemplateTimeout):
        return f"no end within its {seconds:g}-second limit"
    if isinstance(error, RecursionError):
        return "recursion too deep"
    return f"an error ({type(error).__name__})"


def render_template(folder: Path, entry: str, data: dict[str, Any], *, seconds: float) -> str:
    """The HTML that template `entry` in `folder` makes of `data`; template.invalid if it cannot."""
    folder = folder.resolve()  # the loader's file names, which the error's frames carry, are under it
    environment = _TimedEnvironment(
        _Deadline(seconds),
        loader=FileSystemLoader(folder, followlinks=False),
        undefined=StrictUndefined,
        autoescape=True,
        auto_reload=False,
    )
    try:
        return environment.get_template(entry).render(data)
    except (
        TemplateError,
        TemplateTimeout,
        RecursionError,
        ArithmeticError,
        LookupError,
        TypeError,
        ValueError,
    ) as error:
        line = _template_line(error, folder)
        where = f" at line {line}" if line is not None else ""
        raise DocJobError(FailureCode.TEMPLATE_INVALID, f"the template has {_kind(error, seconds)}{where}") from None
