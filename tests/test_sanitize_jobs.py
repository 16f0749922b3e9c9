"""Sanitization end to end: a document with active content is never released signed with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pypdf import PdfReader

from docjobs.cli.output import describe
from docjobs.domain.policy import Policy
from docjobs.domain.states import JobState
from docjobs.pdf.sanitize import find_active_content
from docjobs.settings.policies import PolicyBook
from docjobs.signing.evidence import envelope_evidence
from docjobs.temporal.client import JobClient
from tests.active_content import ACTIVE_COUNTS, make_active_pdf
from tests.conftest import FAULT_WORKER, Env, StartWorker, run_starter, wait_terminal
from tests.fixtures.policy_files import named
from tests.fixtures.samples import LINK_URL
from tests.test_jobs import job_files
from tests.test_release_jobs import pdfsig
from tests.test_sanitize import ACTIVE_NAMES, link_actions, qpdf_names


@pytest.fixture(scope="module")
def active(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("active-jobs") / "active.pdf"
    make_active_pdf(path)
    return path


def with_sanitize(policy: Policy, **changes: object) -> Policy:
    body = policy.model_dump()
    body["sanitize"].update(changes)
    return Policy.model_validate(body)


async def test_active_pdf_comes_back_signed_without_it(
    jobs: JobClient, env: Env, policies: PolicyBook, active: Path, tmp_path: Path
) -> None:
    submitted = await jobs.submit(active, "standard", key="sanitize-standard")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status
    assert status.sanitized == ACTIVE_COUNTS
    assert run_starter(env, "status", submitted.job_id)[1]["sanitized"] == ACTIVE_COUNTS
    assert "active content removed: embedded_file x3, goto_remote x1," in describe(status)
    assert status.signature is not None and status.signature.bottom_line is True
    assert {"no_active_content", "links", "text_kept"} <= set(status.fidelity_checks)
    await jobs.fetch(submitted.job_id, out := tmp_path / "out.pdf")
    assert "Signature Validation: Signature is Valid." in pdfsig(out)
    assert find_active_content(out) == {}  # pikepdf
    assert not qpdf_names(out) & ACTIVE_NAMES  # qpdf, every object of the file
    reader = PdfReader(out)  # pypdf
    assert reader.attachments == {} and "/OpenAction" not in reader.root_object
    assert ("/URI", LINK_URL) in link_actions(out)[0] and ("/GoTo", "") in link_actions(out)[0]

    envelope = tmp_path / "evidence.json"
    assert run_starter(env, "evidence", submitted.job_id, "-o", str(envelope))[0] == 0
    assert envelope_evidence(envelope.read_bytes()).sanitized == ACTIVE_COUNTS
    code, checked, _ = run_starter(env, "verify-evidence", submitted.job_id)
    assert (code, checked["ok"], checked["broken"]) == (0, True, [])


async def test_fail_mode_refuses_the_input(jobs: JobClient, env: Env, policies: PolicyBook, active: Path) -> None:
    policy = with_sanitize(policies.get("standard"), mode="fail")
    submitted = await jobs.submit(active, named(jobs, policy), key="sanitize-fail")
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "input.active_content"), status
    assert status.attempts["render"] == 1 and status.output_sha256 is None  # deterministic: not retried
    assert job_files(env, submitted.job_id) == ["commitment.salt", "evidence.json", "run.json"]


async def test_raster_mode_has_no_document_level_content(
    jobs: JobClient, policies: PolicyBook, active: Path, tmp_path: Path
) -> None:
    submitted = await jobs.submit(active, "preview", key="sanitize-raster")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status
    assert status.sanitized == ACTIVE_COUNTS and "no_active_content" in status.fidelity_checks
    await jobs.fetch(submitted.job_id, out := tmp_path / "raster.pdf")
    assert find_active_content(out) == {} and not qpdf_names(out) & ACTIVE_NAMES
    root = PdfReader(out).root_object
    assert not {"/OpenAction", "/AA", "/Names", "/AF"} & set(root.keys())


async def test_the_release_gate_catches_a_render_that_strips_nothing(
    jobs: JobClient, env: Env, policies: PolicyBook, active: Path, start_worker: StartWorker
) -> None:
    """Render leaves the active content in: the release gate finds it in `sign`, before anything is signed (verify's
    readers, after signing, would too)."""
    queue = "docjobs-keeps-active"
    start_worker(queue, script=FAULT_WORKER, DOCJOBS_FAULT="keep-active-content")
    on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    submitted = await on_queue.submit(active, "standard", key="sanitize-residue")
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.QUARANTINED, "sanitize.residue"), status
    assert status.attempts.get("sign") == 1 and "verify" not in status.attempts  # refused at once, never signed
    assert job_files(env, submitted.job_id) == ["commitment.salt", "evidence.json", "run.json"]  # nothing released
