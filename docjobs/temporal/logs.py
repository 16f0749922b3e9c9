"""Process logging: plain text for people, JSON lines for log pipelines, never a traceback.

A JSON line carries `ts`, `level`, `logger`, `message` and, when it was logged inside a stage or the job
workflow (docjobs' own loggers included, and the lease thread, which runs in a copy of the activity's
context), the job it belongs to: `job_id`, `run_id`, `attempt`, `stage`, `task_queue`, plus the `worker`
identity, and, inside a span, its `trace_id` and `span_id`. An exception is logged by its type only:
exception messages and tracebacks may quote document content. The SDK core's own warnings are forwarded into
Python logging, so every line has one format.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, Literal

from temporalio import activity, workflow
from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter

from docjobs.settings.config import ConfigError, read_environment
from docjobs.temporal.tracing import current_ids

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
QUIETED = {"pyhanko": logging.CRITICAL}  # pyHanko's warnings can quote PDF dictionaries
_process: dict[str, str] = {}  # fields of every JSON line (the worker identity, once connected)


def default_log_format() -> LogFormat:
    """DOCJOBS_LOG_FORMAT, else text."""
    chosen = read_environment().log_format
    if chosen not in LOG_FORMATS:
        raise ConfigError(f"DOCJOBS_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}")
    return chosen


def identify(worker: str) -> None:
    """Name the worker (its Temporal client identity) on every JSON line from now on."""
    _process["worker"] = worker


def temporal_context() -> dict[str, Any]:
    """The job, attempt and stage of the activity or workflow the calling code runs in, if any."""
    if activity.in_activity():
        info = activity.info()
        return {
            "job_id": info.workflow_id,
            "run_id": info.workflow_run_id,
            "attempt": info.attempt,
            "stage": info.activity_type,
            "task_queue": info.task_queue,
        }
    if workflow.in_workflow():
        details = workflow.info()
        return {
            "job_id": details.workflow_id,
            "run_id": details.run_id,
            "attempt": details.attempt,
            "task_queue": details.task_queue,
        }
    return {}


def _exception_type(record: logging.LogRecord) -> str | None:
    kind = record.exc_info[0] if record.exc_info else None
    return kind.__name__ if kind else None


def _without_traces(record: logging.LogRecord) -> logging.LogRecord:
    """A copy without exception text or stack (the record itself may go on to other handlers)."""
    if not (record.exc_info or record.exc_text or record.stack_info):
        return record
    copy = logging.makeLogRecord(record.__dict__)
    copy.exc_info, copy.exc_text, copy.stack_info = None, None, None
    return copy


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(_without_traces(record))
        error = _exception_type(record)
        return f"{line} [{error}]" if error else line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **temporal_context(),
            **current_ids(),
            **_process,
        }
        error = _exception_type(record)
        if error:
            entry["error"] = error
        return json.dumps(entry, default=str)


def core_log_config() -> LoggingConfig:
    """SDK core (Rust) warnings, forwarded to the `temporalio.core` logger instead of its own stderr lines.

    A process that builds its own Runtime passes this as its TelemetryConfig's `logging`."""
    return LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
    )


def configure_logging(format: LogFormat, level: int = logging.INFO) -> None:
    """One stderr handler in `format` for the whole process; call it before connecting to Temporal."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name, quieter in QUIETED.items():
        logging.getLogger(name).setLevel(quieter)
    logging.captureWarnings(True)  # Python warnings too, instead of raw stderr text
    Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=core_log_config())), error_if_already_set=False)
