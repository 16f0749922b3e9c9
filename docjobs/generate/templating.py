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
import signal
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from jinja2 import FileSystemLoader, StrictUndefined, TemplateError, TemplateSyntaxError, UndefinedError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from docjobs.errors import DocJobError

MAX_DATA_BYTES = 16 * 1024 * 1024


class TemplateTimeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise TemplateTimeout in this (the main) thread after `seconds` of wall-clock time."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise TemplateTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def load_data(path: Path) -> dict[str, Any]:
    """The job's data: a JSON object, whose keys are the template's variables."""
    if path.stat().st_size > MAX_DATA_BYTES:
        raise DocJobError("input.too_large", f"the template data is larger than {MAX_DATA_BYTES} bytes")
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError):
        raise DocJobError("input.malformed", "the template data is not valid JSON") from None
    if not isinstance(data, dict):
        raise DocJobError("input.malformed", "the template data is not a JSON object")
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
    environment = ImmutableSandboxedEnvironment(
        loader=FileSystemLoader(folder, followlinks=False),
        undefined=StrictUndefined,
        autoescape=True,
        auto_reload=False,
    )
    try:
        with _time_limit(seconds):
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
        raise DocJobError("template.invalid", f"the template has {_kind(error, seconds)}{where}") from None
