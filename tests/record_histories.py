"""Records the job histories that tests/test_replay.py replays (tests/histories/), from real jobs on a dev server
of their own, and prints what each history holds (events by kind, workflow tasks, activities, markers).

    python -m tests.record_histories [DIR]   (default: tests/histories; the batch histories are left alone)

Re-record when a workflow change ships as a new build (docs/operations.md, Shipping a workflow change): the committed
histories are then the ones jobs on the new build write. Each covers one path: `succeeded` (a 1-page job with
the public input: resolve, the release gates, publish, the wrap-up), `release-succeeded` (a pinned policy in
the internal request, 2 pages), `failed` (an unreadable input), `canceled-deadline` (a render held until the
job's deadline cancels it), `ocr-succeeded` (a scan through the OCR queue) and `ocr-chunks-succeeded` (a 3-page scan
OCR'd in ranges of one page: the chunks and the merge).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient, Submitted, connect
from docjobs.temporal.devserver import ensure_dev_server, stop_dev_server
from docjobs.temporal.poller import WaitEnd, wait_for_job
from tests.conftest import FAULT_WORKER, REPO, Env, WorkerProcess, free_port
from tests.fixtures.policy_files import named
from tests.fixtures.samples import make_garbage, make_sample_pdf
from tests.fixtures.scans import KNOWN_WORDS, make_scan_pdf

QUEUE = "docjobs"
HELD_QUEUE = "docjobs-held"  # its worker holds every render until the job's deadline cancels it
DEADLINE_SECONDS = 3


@dataclass(frozen=True)
class Recorded:
    name: str
    state: JobState
    history: WorkflowHistory


def summary(history: WorkflowHistory) -> dict[str, object]:
    """The counts that say what a history costs the server: events, and of them workflow tasks, activities
    (each scheduled, started, closed), markers (local activities, patches) and search-attribute upserts."""
    kinds = Counter(EventType.Name(event.event_type).removeprefix("EVENT_TYPE_") for event in history.events)
    return {
        "events": len(history.events),
        "workflow_tasks": kinds["WORKFLOW_TASK_COMPLETED"],
        "activities": kinds["ACTIVITY_TASK_SCHEDULED"],
        "markers": kinds["MARKER_RECORDED"],
        "upserts": kinds["UPSERT_WORKFLOW_SEARCH_ATTRIBUTES"],
        "by_kind": dict(sorted(kinds.items())),
    }


async def ended(jobs: JobClient, submitted: Submitted) -> JobState:
    result = await wait_for_job(lambda: jobs.status(submitted.job_id), timeout=300, max_polls=100_000, max_delay=0.5)
    assert result.end is WaitEnd.TERMINAL and result.status is not None, submitted.job_id
    return result.status.state


async def record(env: Env, samples: Path) -> list[Recorded]:
    settings = env.settings()
    client = await connect(settings)
    jobs = JobClient(client, settings)
    held = JobClient(client, env.settings(DOCJOBS_TASK_QUEUE=HELD_QUEUE))
    policies = PolicyBook.load(settings.policy_file)
    scan = policies.get("scan")
    by_page = scan.model_copy(update={"ocr": scan.ocr.model_copy(update={"chunk_pages": 1})})
    submitted = {
        "succeeded": await jobs.submit(samples / "one-page.pdf", "standard", key="succeeded"),
        "release-succeeded": await jobs.submit(samples / "two-pages.pdf", "standard", key="release"),
        "failed": await jobs.submit(samples / "garbage.bin", "standard", key="failed"),
        "canceled-deadline": await held.submit(
            samples / "one-page.pdf", "standard", key="canceled-deadline", deadline_seconds=DEADLINE_SECONDS
        ),
        "ocr-succeeded": await jobs.submit(samples / "scan.pdf", "scan", key="ocr-succeeded"),
        "ocr-chunks-succeeded": await jobs.submit(
            samples / "long-scan.pdf", named(jobs, by_page), key="ocr-chunks-succeeded"
        ),
    }
    recorded = []
    for name, job in submitted.items():
        state = await ended(jobs, job)
        recorded.append(Recorded(name, state, await client.get_workflow_handle(job.job_id).fetch_history()))
    return recorded


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else REPO / "tests" / "histories"
    with tempfile.TemporaryDirectory(prefix="record-histories-") as tmp:
        folder = Path(tmp)
        (samples := folder / "samples").mkdir()
        make_sample_pdf(samples / "one-page.pdf", pages=1, marker="recorded history")
        make_sample_pdf(samples / "two-pages.pdf", pages=2, marker="recorded history")
        make_garbage(samples / "garbage.bin", size=4096)
        make_scan_pdf(samples / "scan.pdf", [list(KNOWN_WORDS[:12])], ["upright"])
        make_scan_pdf(samples / "long-scan.pdf", [list(KNOWN_WORDS[12 * n : 12 * n + 12]) for n in range(3)], dpi=150)
        env = Env(
            {
                "DOCJOBS_DATA_DIR": str(folder / "data"),
                "DOCJOBS_TEMPORAL_PORT": str(free_port()),
                "DOCJOBS_TEMPORAL_UI_PORT": str(free_port()),
                "DOCJOBS_TASK_QUEUE": QUEUE,
                "DOCJOBS_HOLD_DIR": str(folder / "holds"),
            }
        )
        (folder / "holds").mkdir()
        settings = env.settings()
        ensure_dev_server(settings)
        workers = []
        try:
            workers.append(WorkerProcess(env, QUEUE, folder / "worker.log"))
            workers.append(
                WorkerProcess(
                    env,
                    HELD_QUEUE,
                    folder / "held.log",
                    "--queue",
                    "general",
                    script=FAULT_WORKER,
                    DOCJOBS_FAULT="hold-render",
                )
            )
            recorded = asyncio.run(record(env, samples))
        finally:
            for worker in workers:
                worker.stop()
            stop_dev_server(settings)
    out.mkdir(parents=True, exist_ok=True)
    for job in recorded:
        (out / f"{job.name}.json").write_text(job.history.to_json() + "\n")
        print(json.dumps({"history": job.name, "state": job.state.value, **summary(job.history)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
