"""Real-world documents (tests/fixtures/realworld.py) as jobs through the real worker and the standard policy:
each succeeds, signed and verified, with its repair or its encryption in the status; a truncated upload
still fails `input.malformed`, and a policy may refuse inputs encrypted with an empty password."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from docjobs.domain.policy import Policy
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient
from tests.conftest import wait_terminal
from tests.fixtures import realworld
from tests.fixtures.policy_files import named

CASES: dict[str, Callable[[], bytes]] = {**realworld.REPAIRED, **realworld.ACCEPTED}


def _policy(policies: PolicyBook, name: str, **changes: object) -> Policy:
    return Policy.model_validate({**policies.get(name).model_dump(), **changes})


async def _run(jobs: JobClient, folder: Path, make: Callable[[], bytes], policy: Policy) -> tuple[str, Path]:
    """Submit the fixture's bytes under a fresh key; returns the job ID and the input's path."""
    source = folder / f"{uuid.uuid4().hex}.pdf"
    source.write_bytes(make())
    submitted = await jobs.submit(source, named(jobs, policy), key=f"realworld-{uuid.uuid4().hex[:12]}")
    return submitted.job_id, source


async def test_readable_inputs_succeed_with_their_repair_recorded(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    standard = policies.get("standard")
    started = {name: await _run(jobs, tmp_path, make, standard) for name, make in CASES.items()}
    preview = await _run(jobs, tmp_path, realworld.direct_page_kid, policies.get("preview"))
    statuses = await asyncio.gather(*(wait_terminal(jobs, job_id) for job_id, _ in [*started.values(), preview]))

    for name, status in zip([*started, "direct page-tree kid, raster"], statuses, strict=True):
        assert status.state is JobState.SUCCEEDED, (name, status.failure_code, status.failure_message)
        repaired = name.removesuffix(", raster") in realworld.REPAIRED
        assert status.repaired is repaired and (status.repair_warnings > 0) is repaired, (name, status)
        encrypted = name.startswith("AES")
        assert status.input_encryption == ("permissions_only" if encrypted else "none"), (name, status)
        assert status.signature is not None and status.signature.bottom_line is True, name
        assert {"qpdf_check", "second_reader"} <= set(status.fidelity_checks), (name, status.fidelity_checks)
        if not name.endswith("raster"):
            assert {"text_kept", "watermark_every_page"} <= set(status.fidelity_checks), name

    for name, (job_id, _) in started.items():
        artifact = tmp_path / f"{job_id.replace('/', '_')}-artifact.pdf"
        await jobs.fetch(job_id, artifact)
        words = set(subprocess.run(["pdftotext", str(artifact), "-"], capture_output=True, text=True).stdout.split())
        assert set(realworld.WORDS) <= words, (name, words)
        if name == "LibreOffice form":
            assert {word for value in realworld.FIELD_VALUES for word in value.split()} <= words, words


async def test_truncated_upload_is_malformed_and_encrypted_input_refused_by_policy(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    truncated, _ = await _run(jobs, tmp_path, realworld.truncated, policies.get("standard"))
    refusing = _policy(policies, "standard", refuse_encrypted=True)
    encrypted, _ = await _run(jobs, tmp_path, realworld.aes_empty_password_without_length, refusing)
    clean, _ = await _run(jobs, tmp_path, realworld.clean_page, refusing)

    status = await wait_terminal(jobs, truncated)
    assert (status.state, status.failure_code) == (JobState.FAILED, "input.malformed"), status
    assert status.attempts == {"render": 1}  # deterministic: never retried
    status = await wait_terminal(jobs, encrypted)
    assert (status.state, status.failure_code) == (JobState.FAILED, "input.encrypted"), status
    status = await wait_terminal(jobs, clean)
    assert status.state is JobState.SUCCEEDED and status.repaired is False and status.repair_warnings == 0, status
