"""The `DocumentJob` workflow as an API: the names any Temporal client uses, and the JSON Schemas of what it
sends and gets back (generated from the models; published in `schemas/`, printed by `starter.py schema`).

A service in any language starts a job with its own Temporal SDK: workflow type `DocumentJob` on the task
queue `DOCJOBS_TASK_QUEUE` (default `docjobs`), workflow ID `{tenant}/{key}`, one argument: a
`DocumentJobInput` (version 1). It reads the job with the `status` query (the workflow's result has the same
shape) and cancels it with the `cancel` signal or the `cancel_job` update. docs/workflow-api.md: "Start a job from your
own service".
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode

from docjobs.domain.job_status import JobStatus
from docjobs.domain.models import CancelAnswer, DocumentJobInput

WORKFLOW_TYPE = "DocumentJob"
DEFAULT_TASK_QUEUE = "docjobs"  # DOCJOBS_TASK_QUEUE
STATUS_QUERY = "status"  # -> JobStatus
CANCEL_SIGNAL = "cancel"  # no argument: the job ends `canceled` (reason `requested`)
CANCEL_UPDATE = "cancel_job"  # no argument -> CancelAnswer; refused once the job has ended
CALLER_WAIT_ENDED_SIGNAL = "caller_wait_ended"  # docjobs' own poller: a caller's wait budget ran out
# Beyond its own deadline a job gets this long to cancel its stages and clean up; after that Temporal itself times
# the workflow out (docjobs' clients start each run with that execution timeout), so not even a wedged workflow can
# stay active forever. A run started without one still ends its clean-up by then.
DEADLINE_GRACE = timedelta(minutes=10)

# file name in schemas/ -> (model, whether it is read (validation) or written (serialization) by the workflow)
SCHEMAS: dict[str, tuple[type[BaseModel], JsonSchemaMode]] = {
    "document-job-input.v1.json": (DocumentJobInput, "validation"),
    "job-status.json": (JobStatus, "serialization"),  # the `status` query's answer and the workflow's result
    "cancel-answer.json": (CancelAnswer, "serialization"),  # the `cancel_job` update's answer
}


def published_schemas() -> dict[str, dict[str, Any]]:
    """Each published JSON Schema by its file name in `schemas/`, generated from the models."""
    schemas = {}
    for name, (model, mode) in SCHEMAS.items():
        schema = model.model_json_schema(mode=mode)
        schemas[name] = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    return schemas


def job_summary(document_class: str, watermark_mode: str, pages: int = 0) -> str:
    """A job's one-line summary in the Web UI: its class, mode and pages when known, never a name or content."""
    return f"{document_class}: {watermark_mode}" + (f", {pages} pages" if pages else "")
