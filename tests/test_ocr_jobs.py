"""The OCR stage end to end: scans in, searchable PDFs out, under the same leases, cancels and fencing."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import pytest

from docjobs.domain.states import JobState, Stage
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient
from tests.ci_skips import needs_tools
from tests.conftest import FAULT_WORKER, Env, StartWorker, run_starter, wait_terminal
from tests.fixtures.scans import KNOWN_WORDS, make_scan_jpeg, make_scan_pdf, make_scan_tiff
from tests.ocr_sessions import call_processes
from tests.test_jobs import job_files

needs_ocr_tools = needs_tools("tesseract", "gs")  # the worker's OCR stage runs OCRmyPDF on them


def words_for(pages: int, per_page: int = 12, offset: int = 0) -> list[list[str]]:
    return [list(KNOWN_WORDS[offset + i * per_page : offset + (i + 1) * per_page]) for i in range(pages)]


def searchable_words(path: Path) -> set[str]:
    text = subprocess.run(["pdftotext", "-raw", str(path), "-"], capture_output=True, text=True, check=True).stdout
    return {word.strip(".,;:").lower() for word in text.split()}


def ocr_processes(tag: str) -> list[int]:
    """PIDs of the OCR call tagged `tag` (OCRmyPDF, its page workers, Tesseract, Ghostscript): tests/ocr_sessions.py."""
    return sorted(call_processes(tag))


async def wait_for_ocr_processes(jobs: JobClient, job_id: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ocr_processes(job_id):
            return
        status = await jobs.status(job_id)
        assert status.state in (JobState.QUEUED, JobState.PROCESSING), status
        await asyncio.sleep(0.2)
    raise AssertionError("OCR never started")


@needs_ocr_tools
@pytest.mark.parametrize("kind", ["tiff", "jpeg"])
async def test_image_scans_become_searchable_pdfs(
    kind: str, jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    pages = words_for(2 if kind == "tiff" else 1)
    source = tmp_path / f"scan.{kind}"
    if kind == "tiff":
        make_scan_tiff(source, pages, ["upright", "upright"])
    else:
        make_scan_jpeg(source, pages, ["upright"])
    submitted = await jobs.submit(source, "scan")
    status = await wait_terminal(jobs, submitted.job_id, timeout=240)
    assert status.state is JobState.SUCCEEDED, status
    assert status.page_count == len(pages)
    assert status.pages_ocred == list(range(1, len(pages) + 1))
    assert status.ocr_text_sha256 and len(status.ocr_text_sha256) == 64
    out = tmp_path / "out.pdf"
    await jobs.fetch(submitted.job_id, out)
    expected = {word.lower() for page in pages for word in page}
    found = searchable_words(out)
    assert len(expected & found) >= 0.9 * len(expected)
    assert "confidential" in found  # stamped after OCR: the watermark is there and did not block OCR


@needs_ocr_tools
async def test_text_pdf_under_skip_is_not_ocred(jobs: JobClient, policies: PolicyBook, samples: Path) -> None:
    submitted = await jobs.submit(samples / "sample.pdf", "scan")
    status = await wait_terminal(jobs, submitted.job_id, timeout=240)
    assert status.state is JobState.SUCCEEDED, status
    assert status.pages_ocred == []


@needs_ocr_tools
async def test_cancel_during_ocr_kills_the_process_tree(
    jobs: JobClient, env: Env, policies: PolicyBook, tmp_path: Path
) -> None:
    source = tmp_path / "long-scan.pdf"
    make_scan_pdf(source, words_for(6), ["upright"] * 6)
    submitted = await jobs.submit(source, "scan", key="ocr-cancel")
    await wait_for_ocr_processes(jobs, submitted.job_id)
    assert (await jobs.status(submitted.job_id)).stage is Stage.OCR
    code, _, _ = await asyncio.to_thread(run_starter, env, "cancel", submitted.job_id)
    assert code == 0
    # Counted from the accepted cancel (a command that starts slowly on a loaded machine is not the worker's
    # delay): the stage hears it at its next heartbeat and kills its child's process group.
    accepted = time.monotonic()
    while ocr_processes(submitted.job_id) and time.monotonic() - accepted < 10:
        await asyncio.sleep(0.1)
    killed_after = time.monotonic() - accepted
    assert ocr_processes(submitted.job_id) == [], f"OCR still running {killed_after:.1f}s after the cancel"
    status = await wait_terminal(jobs, submitted.job_id, timeout=60)
    assert (status.state, status.cancel_reason) == (JobState.CANCELED, "requested")
    # only the signed record of the outcome
    assert job_files(env, submitted.job_id) == ["commitment.salt", "evidence.json", "run.json"]


@needs_ocr_tools
async def test_worker_killed_during_ocr_another_finishes(
    jobs: JobClient, env: Env, policies: PolicyBook, start_worker: StartWorker, tmp_path: Path
) -> None:
    queue = "docjobs-ocr-kill"
    doomed = start_worker(queue, script=FAULT_WORKER, DOCJOBS_FAULT="none")  # real stages
    source = tmp_path / "kill-scan.pdf"
    make_scan_pdf(source, words_for(3), ["upright"] * 3)
    submitted = await JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue)).submit(
        source, "scan", key="ocr-kill"
    )
    await wait_for_ocr_processes(jobs, submitted.job_id)
    doomed.kill()
    deadline = time.monotonic() + 10
    while ocr_processes(submitted.job_id) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert ocr_processes(submitted.job_id) == []  # a dead worker leaves no OCR orphans behind
    start_worker(queue)
    status = await wait_terminal(jobs, submitted.job_id, timeout=300)
    assert status.state is JobState.SUCCEEDED, status
    assert status.attempts["ocr"] >= 2
    assert job_files(env, submitted.job_id) == [
        "artifact.pdf",
        "commitment.salt",
        "evidence.json",
        "run.json",
        "text.json",
    ]


def test_worker_serves_any_subset_of_queues(start_worker: StartWorker) -> None:
    both = start_worker("docjobs-subset")
    served = (
        "task queues docjobs-subset, docjobs-subset-notify, docjobs-subset-ocr, docjobs-subset-ocr-chunks, "
        "docjobs-subset-batch at"
    )
    assert served in both.log_path.read_text()  # the general queue brings its callbacks', the OCR its ranges'
    ocr_only = start_worker("docjobs-subset", "--queue", "ocr")
    assert "task queues docjobs-subset-ocr, docjobs-subset-ocr-chunks at" in ocr_only.log_path.read_text()
    assert (both.stop(), ocr_only.stop()) == (0, 0)
