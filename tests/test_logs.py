"""Structured logs: JSON lines that name the job, attempt and stage, and never carry a traceback."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.logs import JsonFormatter, TextFormatter
from tests.conftest import Env, StartWorker, wait_terminal
from tests.fixtures.samples import make_garbage


def failing_record() -> logging.LogRecord:
    try:
        raise ValueError("page 3 says: Patient Jane Roe")
    except ValueError:
        return logging.LogRecord("docjobs.x", logging.ERROR, __file__, 1, "stage %s broke", ("render",), sys.exc_info())


def test_formatters_keep_the_exception_type_only() -> None:
    record = failing_record()
    record.stack_info = "Stack (most recent call last): Jane Roe"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "stage render broke" and line["error"] == "ValueError"
    assert {"ts", "level", "logger"} <= line.keys() and "job_id" not in line  # not inside a stage
    text = TextFormatter().format(record)
    assert text.endswith("stage render broke [ValueError]")
    assert "Jane Roe" not in json.dumps(line) + text and "Traceback" not in text


async def test_worker_writes_json_lines_with_job_context(
    env: Env, start_worker: StartWorker, policies: PolicyBook, tmp_path: Path
) -> None:
    queue = "logs-test"
    worker = start_worker(queue, "--log-format", "json", DOCJOBS_TASK_QUEUE=queue)
    settings = env.settings(DOCJOBS_TASK_QUEUE=queue)
    jobs = JobClient(await connect(settings), settings)
    make_garbage(tmp_path / "garbage.bin")
    submitted = await jobs.submit(tmp_path / "garbage.bin", "standard", key="logs-garbage")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.FAILED
    await jobs.handle(submitted.job_id).result()  # the wrap-up (clean-up) has run too
    worker.stop()

    output = worker.log_path.read_text()
    lines = [json.loads(line) for line in output.splitlines()]  # every line is one JSON object
    (ready,) = [line["message"] for line in lines if line["message"].startswith("worker ready")]
    # What its start spent: the phases add up to the total it names, the interpreter's start and imports first.
    told = re.search(r", in ([\d.]+) s \((.+)\)$", ready)
    assert told is not None, ready
    phases = {name: float(seconds) for name, seconds in re.findall(r"([a-z ]+) ([\d.]+)(?:, |$)", told[2])}
    started = ["start and imports", "policies", "connection", "leftovers swept", "sandbox check and pollers"]
    assert list(phases) == started
    assert phases["start and imports"] > 0 and abs(sum(phases.values()) - float(told[1])) < 0.1
    stage_lines = [line for line in lines if line["logger"] == "docjobs.activities"]
    assert stage_lines, output
    for line in stage_lines:  # the render failure, the clean-up's report
        assert line["job_id"] == submitted.job_id and line["attempt"] == 1 and line["stage"] in ("render", "cleanup")
        assert line["task_queue"] == queue and line["run_id"] and line["worker"]
    assert any(line["stage"] == "render" and "failed" in line["message"] for line in stage_lines)
    assert "Traceback" not in output
