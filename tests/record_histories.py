"""Records the job histories that tests/test_replay.py replays (tests/histories/), from real jobs on a dev server
of their own, and prints what each history holds (events by kind, workflow tasks, activities, markers).

    python -m tests.record_histories [DIR] [NAME ...]   (default: tests/histories, every name below; the batch
                                                        histories are left alone)

Re-record when a workflow change ships as a new build (docs/operations.md, Shipping a workflow change): the committed
histories are then the ones jobs on the new build write. Each covers one path: `succeeded` (a 1-page job with
the public input: resolve, the release gates, publish, the wrap-up), `release-succeeded` (a pinned policy in
the internal request, 2 pages), `failed` (an unreadable input), `canceled-deadline` (a render held until the
job's deadline cancels it), `ocr-succeeded` (a scan through the OCR queue) and `ocr-chunks-succeeded` (a 3-page scan
OCR'd in ranges of one page: the chunks and the merge), `lta-succeeded` (a B-LTA job signed with a TSA whose
certificate lives days: it opens its archive), `archive-renewed` (that archive's first run: due at once, it renews on
the archive workers' queue and continues as new) and `archive-asleep` (its next run, on its durable timer). The
B-LTA paths sign with certomancer's PKI on loopback (tests/fixtures/test_pki.py).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory

from docjobs.domain.policy import SignLevel, SignPolicy
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient, Submitted, connect
from docjobs.temporal.devserver import ensure_dev_server, stop_dev_server
from docjobs.temporal.poller import WaitEnd, wait_for_job
from tests.conftest import FAULT_WORKER, REPO, Env, WorkerProcess, free_port
from tests.fixtures.archives import archive_of, archive_status
from tests.fixtures.policy_files import name_policy, named
from tests.fixtures.samples import make_garbage, make_sample_pdf
from tests.fixtures.scans import KNOWN_WORDS, make_scan_pdf
from tests.fixtures.test_pki import TestPki, serving_test_pki

QUEUE = "docjobs"
HELD_QUEUE = "docjobs-held"  # its worker holds every render until the job's deadline cancels it
DEADLINE_SECONDS = 3
LTA_QUEUE = "docjobs-lta"  # its worker signs with the short-lived TSA: the archives it opens are due at once
RENEWALS_QUEUE = "docjobs-archive-renewals"  # the deployment's archive workers, with the long-lived TSA
ARCHIVE_TENANT = "archivist"
NAMES = (
    "succeeded",
    "release-succeeded",
    "failed",
    "canceled-deadline",
    "ocr-succeeded",
    "ocr-chunks-succeeded",
    "lta-succeeded",
    "archive-renewed",
    "archive-asleep",
)


@dataclass(frozen=True)
class Recorded:
    name: str
    state: str  # the job's state, or the archive run's status
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
        history = await client.get_workflow_handle(job.job_id).fetch_history()
        recorded.append(Recorded(name, state.value, history))
    return recorded


async def record_archive(env: Env, samples: Path, lta_policy_file: Path, lta_policy: str) -> list[Recorded]:
    """A B-LTA job, the archive it opens, renewed once by itself, and that archive asleep until its next renewal."""
    settings = env.settings(DOCJOBS_TASK_QUEUE=LTA_QUEUE, DOCJOBS_POLICY_FILE=str(lta_policy_file))
    client = await connect(settings)
    jobs = JobClient(client, settings)
    job = await jobs.submit(samples / "one-page.pdf", lta_policy, tenant=ARCHIVE_TENANT, key="lta-succeeded")
    state = await ended(jobs, job)
    archive_id = await archive_of(jobs, ARCHIVE_TENANT, job.job_id)
    await archive_status(jobs, archive_id, versions=2)
    runs = {
        execution.status.name.lower() if execution.status else "": execution.run_id
        async for execution in client.list_workflows(f"WorkflowId = '{archive_id}'")
    }
    recorded = [Recorded("lta-succeeded", state.value, await client.get_workflow_handle(job.job_id).fetch_history())]
    for name, run in (("archive-renewed", "continued_as_new"), ("archive-asleep", "running")):
        history = await client.get_workflow_handle(archive_id, run_id=runs[run]).fetch_history()
        recorded.append(Recorded(name, run, history))
    return recorded


def lta_workers(env: Env, folder: Path, pki: TestPki, policy_file: Path) -> list[WorkerProcess]:
    """The B-LTA job's worker (short-lived TSA, its archives renewed on RENEWALS_QUEUE) and the archive workers'."""
    signing = Env({**env.vars, **pki.worker_env(), "DOCJOBS_POLICY_FILE": str(policy_file)})
    short_lived = {"DOCJOBS_TSA_URL": pki.short_tsa_url, "DOCJOBS_ARCHIVE_TASK_QUEUE": RENEWALS_QUEUE}
    return [
        WorkerProcess(Env({**signing.vars, **short_lived}), LTA_QUEUE, folder / "lta.log"),
        WorkerProcess(signing, RENEWALS_QUEUE, folder / "renewals.log"),
    ]


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else REPO / "tests" / "histories"
    wanted = set(argv[1:]) or set(NAMES)
    if wanted - set(NAMES):
        print(f"unknown histories: {sorted(wanted - set(NAMES))}; known: {', '.join(NAMES)}", file=sys.stderr)
        return 2
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
        recorded: list[Recorded] = []
        with ExitStack() as stack:
            stack.callback(stop_dev_server, settings)
            if wanted & set(NAMES[:6]):
                plain = WorkerProcess(env, QUEUE, folder / "worker.log")
                stack.callback(plain.stop)
                held = WorkerProcess(
                    env,
                    HELD_QUEUE,
                    folder / "held.log",
                    "--queue",
                    "general",
                    script=FAULT_WORKER,
                    DOCJOBS_FAULT="hold-render",
                )
                stack.callback(held.stop)
                recorded += asyncio.run(record(env, samples))
            if wanted & set(NAMES[6:]):
                pki = stack.enter_context(serving_test_pki(folder / "pki"))
                lta_file = folder / "lta-policies.toml"  # a worker refuses a file asking a level it cannot make
                shutil.copyfile(settings.policy_file, lta_file)
                standard = PolicyBook.load(lta_file).get("standard")
                signing = SignPolicy(enabled=True, level=SignLevel.B_LTA)
                lta = name_policy(lta_file, standard.model_copy(update={"sign": signing}))
                for worker in lta_workers(env, folder, pki, lta_file):
                    stack.callback(worker.stop)
                recorded += asyncio.run(record_archive(env, samples, lta_file, lta))
    out.mkdir(parents=True, exist_ok=True)
    for job in recorded:
        if job.name in wanted:
            (out / f"{job.name}.json").write_text(job.history.to_json() + "\n")
            print(json.dumps({"history": job.name, "state": job.state, **summary(job.history)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
