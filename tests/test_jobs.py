"""Jobs end to end on a real dev server with real worker processes and real PDFs."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pikepdf

from docjobs.domain.models import JobOverrides
from docjobs.domain.states import JobState
from docjobs.store.storage import RUNS_FOLDER, job_prefix, source_key
from docjobs.temporal.client import JobClient
from tests.conftest import (
    FAULT_WORKER,
    Env,
    HeldQueue,
    StartWorker,
    WorkerProcess,
    run_starter,
    wait_terminal,
)
from tests.fault_worker import Hold
from tests.fixtures.samples import make_encrypted_pdf, make_garbage, make_sample_pdf, page_word, truncate_pdf


def page_geometry(path: Path) -> list[tuple[list[float], list[float], int]]:
    with pikepdf.open(path) as pdf:
        return [
            ([float(v) for v in page.mediabox], [float(v) for v in page.cropbox], int(page.obj.get("/Rotate", 0)))
            for page in pdf.pages
        ]


def pdftotext(path: Path, page: int) -> str:
    return subprocess.run(
        ["pdftotext", "-f", str(page), "-l", str(page), str(path), "-"], capture_output=True, text=True, check=True
    ).stdout


def job_files(env: Env, job_id: str) -> list[str]:
    """The files of the job's one run folder (a job ID's runs each have their own)."""
    runs = Path(env.vars["DOCJOBS_DATA_DIR"]) / "blobs" / job_prefix(job_id) / RUNS_FOLDER
    folders = list(runs.iterdir()) if runs.exists() else []
    assert len(folders) <= 1, folders
    return sorted(str(p.relative_to(folders[0])) for p in folders[0].rglob("*") if p.is_file()) if folders else []


async def fetched(jobs: JobClient, job_id: str, tmp_path: Path) -> Path:
    out = tmp_path / "out.pdf"
    await jobs.fetch(job_id, out)
    return out


async def test_structure_mode_keeps_the_document_and_stamps_every_page(
    jobs: JobClient, env: Env, samples: Path, tmp_path: Path
) -> None:
    source = samples / "sample.pdf"
    submitted = await jobs.submit(source, "standard", overrides=JobOverrides(watermark_text="DOCJOBS-STRUCT"), key="s1")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status
    steps = [(r.state.value, r.stage.value if r.stage else None) for r in status.transitions]
    assert steps == [
        ("queued", None),
        ("processing", "render"),
        ("processing", "sign"),
        ("processing", "verify"),
        ("processing", "publish"),
        ("succeeded", "publish"),
    ]
    out = await fetched(jobs, submitted.job_id, tmp_path)
    assert page_geometry(out) == page_geometry(source)
    assert subprocess.run(["qpdf", "--check", str(out)], capture_output=True).returncode == 0
    for number in range(1, 5):
        text = pdftotext(out, number)
        assert "DOCJOBS-STRUCT" in text and page_word(number) in text
    with pikepdf.open(out) as pdf:
        assert any(annot.get("/Subtype") == "/Link" for annot in pdf.pages[0].get("/Annots", []))
    # staged attempts are cleaned up
    assert job_files(env, submitted.job_id) == ["artifact.pdf", "commitment.salt", "evidence.json", "run.json"]


async def test_raster_mode_rebuilds_pages_with_the_same_geometry(
    jobs: JobClient, samples: Path, tmp_path: Path
) -> None:
    source = samples / "sample.pdf"
    submitted = await jobs.submit(source, "preview", overrides=JobOverrides(watermark_dpi=72), key="r1")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status
    assert status.watermark_mode == "raster"
    out = await fetched(jobs, submitted.job_id, tmp_path)
    assert page_geometry(out) == page_geometry(source)
    assert subprocess.run(["qpdf", "--check", str(out)], capture_output=True).returncode == 0
    assert page_word(1) not in pdftotext(out, 1)  # flattened: no text layer survives


async def test_raster_mode_renders_a_long_document_in_page_ranges_in_page_order(
    jobs: JobClient, tmp_path: Path
) -> None:
    """Ten pages, each of its own width: the document child renders them in page ranges at once (one fork per
    core, inside its sandbox); each released page draws the rendering of its own source page."""
    source = tmp_path / "widths.pdf"
    with pikepdf.new() as pdf:
        for number in range(10):
            pdf.add_blank_page(page_size=(300 + 20 * number, 400))
        pdf.save(source)
    submitted = await jobs.submit(source, "preview", overrides=JobOverrides(watermark_dpi=72), key="r-ranges")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status
    out = await fetched(jobs, submitted.job_id, tmp_path)
    with pikepdf.open(out) as pdf:
        widths = [int(page.Resources.XObject.Im0.Width) for page in pdf.pages]
    assert widths == [300 + 20 * number for number in range(10)]  # 72 dpi: a pixel a point


async def test_same_key_gives_one_job_even_under_concurrency(jobs: JobClient, samples: Path) -> None:
    policy = "standard"
    first = await jobs.submit(samples / "sample.pdf", policy, key="same-key")
    again = await jobs.submit(samples / "sample.pdf", policy, key="same-key")
    assert (first.created, again.created, again.job_id) == (True, False, first.job_id)

    racers = await asyncio.gather(*(jobs.submit(samples / "sample.pdf", policy, key="race") for _ in range(20)))
    assert sum(r.created for r in racers) == 1
    assert {r.job_id for r in racers} == {"default/race"}
    assert (await wait_terminal(jobs, "default/race")).state is JobState.SUCCEEDED


def bad_inputs(folder: Path, sample: Path) -> dict[str, Path]:
    make_garbage(folder / "garbage.bin")
    truncate_pdf(sample, folder / "truncated.pdf")
    make_encrypted_pdf(sample, folder / "locked.pdf", user_password="secret", owner_password="owner")
    return {
        "input.unsupported": folder / "garbage.bin",
        "input.malformed": folder / "truncated.pdf",
        "input.encrypted": folder / "locked.pdf",
    }


async def test_bad_inputs_fail_fast_with_their_codes(jobs: JobClient, samples: Path, tmp_path: Path) -> None:
    policy = "standard"
    for code, path in bad_inputs(tmp_path, samples / "sample.pdf").items():
        submitted = await jobs.submit(path, policy)
        status = await wait_terminal(jobs, submitted.job_id)
        assert (status.state, status.failure_code) == (JobState.FAILED, code), status
        assert status.attempts == {"render": 1}  # deterministic: never retried
        assert status.output_sha256 is None

    # A resubmit after failure returns the failed job, it does not start another.
    again = await jobs.submit(tmp_path / "garbage.bin", policy)
    assert not again.created
    assert (await jobs.status(again.job_id)).failure_code == "input.unsupported"


async def test_permissions_only_encryption_is_processed_and_recorded(
    jobs: JobClient, samples: Path, tmp_path: Path
) -> None:
    locked = tmp_path / "permissions-only.pdf"
    make_encrypted_pdf(samples / "sample.pdf", locked, user_password="", owner_password="owner")
    submitted = await jobs.submit(locked, "standard")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status
    assert status.input_encryption == "permissions_only"


async def test_deadline_cancels_the_job_and_cleans_up(
    jobs: JobClient, env: Env, held: HeldQueue, samples: Path
) -> None:
    """Its render holds until it is canceled: the job's deadline, not a document's size, ends it."""
    on_held = JobClient(jobs.client, held.settings())
    submitted = await on_held.submit(samples / "sample.pdf", "standard", key="deadline", deadline_seconds=3)
    status = await wait_terminal(jobs, submitted.job_id, timeout=60)
    assert (status.state, status.cancel_reason) == (JobState.CANCELED, "deadline_exceeded"), status
    assert held.hold(submitted.job_id).has("canceled")  # the running stage was stopped, not left to finish
    # no artifact, no staging leftovers
    assert job_files(env, submitted.job_id) == ["commitment.salt", "evidence.json", "run.json"]


async def test_cancel_request_ends_canceled(jobs: JobClient, env: Env, held: HeldQueue, samples: Path) -> None:
    on_held = JobClient(jobs.client, held.settings())
    submitted = await on_held.submit(samples / "sample.pdf", "standard", key="cancel-me")
    hold = held.hold(submitted.job_id)
    await asyncio.to_thread(hold.wait, "held")  # the render is running, and stays so until canceled
    code, payload, _ = await asyncio.to_thread(run_starter, env, "cancel", submitted.job_id)
    assert (code, payload.get("cancel_requested")) == (0, True)
    status = await wait_terminal(jobs, submitted.job_id, timeout=60)
    assert (status.state, status.cancel_reason) == (JobState.CANCELED, "requested"), status
    assert hold.has("canceled")
    # only the signed record of the outcome
    assert job_files(env, submitted.job_id) == ["commitment.salt", "evidence.json", "run.json"]


def holding_worker(start_worker: StartWorker, queue: str, folder: Path, *extra_args: str) -> WorkerProcess:
    """A worker on `queue` whose render holds (renewing its lease) until released: one to kill mid-stage."""
    folder.mkdir(exist_ok=True)
    return start_worker(
        queue, *extra_args, script=FAULT_WORKER, DOCJOBS_FAULT="hold-render", DOCJOBS_HOLD_DIR=str(folder)
    )


async def test_killed_worker_loses_its_lease_and_another_finishes(
    jobs: JobClient, env: Env, samples: Path, start_worker: StartWorker, tmp_path: Path
) -> None:
    queue = "docjobs-kill"
    doomed = holding_worker(start_worker, queue, tmp_path / "holds")
    jobs_on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    submitted = await jobs_on_queue.submit(samples / "sample.pdf", "standard", key="kill-me")
    await asyncio.to_thread(Hold(tmp_path / "holds", submitted.job_id).wait, "held")
    doomed.kill()  # mid-render, its lease held
    start_worker(queue)
    status = await wait_terminal(jobs, submitted.job_id, timeout=180)
    assert status.state is JobState.SUCCEEDED, status
    assert status.attempts["render"] >= 2  # the killed attempt's lease expired, a new attempt won
    story = [entry["text"] for entry in await jobs.timeline(submitted.job_id)]
    assert any(
        "attempt 1 of render stopped renewing its lease; attempt 2 of render started" in line for line in story
    ), story
    assert story[-1].startswith("succeeded; artifact released")
    # exactly one artifact, no leftovers
    assert job_files(env, submitted.job_id) == ["artifact.pdf", "commitment.salt", "evidence.json", "run.json"]


async def test_changed_source_after_acceptance_is_quarantined(
    jobs: JobClient, env: Env, samples: Path, start_worker: StartWorker, tmp_path: Path
) -> None:
    queue = "docjobs-tamper"  # no worker yet: the job waits, queued, while its source is changed
    jobs_on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    source = tmp_path / "to-tamper.pdf"
    make_sample_pdf(source, pages=2, marker="tamper")
    submitted = await jobs_on_queue.submit(source, "standard", key="tamper")
    blob = Path(env.vars["DOCJOBS_DATA_DIR"]) / "blobs" / source_key(submitted.input_sha256)
    tampered = bytearray(blob.read_bytes())
    tampered[len(tampered) // 2] ^= 0x01  # one bit, same name, same size
    blob.write_bytes(bytes(tampered))
    start_worker(queue)
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.QUARANTINED, "source.digest_mismatch"), status
    assert status.output_sha256 is None
