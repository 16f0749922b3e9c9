"""PDF/A through real jobs: a PDF/A-2b input released by a structure-mode job (stamp, sign, verify) still passes
the PDF/A check (docjobs/pdf/pdfa.py), and the status says so; where a stage cannot keep the claim, the status
says `pdfa_kept: false` and why. Generated PDF/A-2b documents: tests/test_generate_jobs.py."""

from __future__ import annotations

import uuid
from pathlib import Path

import pikepdf
import pytest

from docjobs.domain.models import JobOverrides
from docjobs.domain.states import JobState
from docjobs.pdf import pdfa
from docjobs.temporal.client import JobClient
from tests.ci_skips import needs_tools
from tests.conftest import wait_terminal
from tests.fixtures.pdfa_samples import make_pdfa, make_scanned_pdfa
from tests.test_jobs import fetched
from tests.test_ocr_jobs import needs_ocr_tools, words_for

pytestmark = needs_tools("qpdf")

CASES: dict[str, tuple[str, str, JobOverrides, tuple[bool, str | None]]] = {
    # case: (variant, policy, overrides, (kept, reason))
    "structure": ("pdf/a-2b", "standard", JobOverrides(), (True, None)),
    "raster": ("pdf/a-2b", "preview", JobOverrides(watermark_dpi=72), (False, "claim_dropped")),
    "redaction": (
        "pdf/a-2b",
        "external",
        JobOverrides(redact_patterns=(r"patient was (?P<redact>seen)",)),
        (True, None),
    ),
    "ocr": ("scanned pdf/a-2b", "scan", JobOverrides(), (True, None)),
    "pdf/a-1b stamped": ("pdf/a-1b", "standard", JobOverrides(), (False, "transparency")),
}


@pytest.mark.parametrize("case", sorted(CASES))
@needs_ocr_tools
async def test_a_pdf_a_input_is_released_with_its_claim_kept_or_the_reason(
    case: str, jobs: JobClient, tmp_path: Path
) -> None:
    variant, policy, overrides, (kept, reason) = CASES[case]
    if variant.startswith("scanned"):
        variant = variant.removeprefix("scanned ")
        source = make_scanned_pdfa(tmp_path / "scan.pdf", words_for(1)[0])
    else:
        source = make_pdfa(tmp_path / "letter.pdf", variant=variant, marker=uuid.uuid4().hex[:8])
    submitted = await jobs.submit(source, policy, overrides=overrides)
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    assert status.pdfa is not None
    claimed = variant.removeprefix("pdf/a-")
    assert (status.pdfa.claimed, status.pdfa.kept, status.pdfa.reason) == (claimed, kept, reason)
    answer = status.model_dump(mode="json")  # the fields as the issue spells them, at the top of the status
    assert (answer["pdfa_kept"], answer["pdfa_reason"]) == (kept, reason)
    out = await fetched(jobs, submitted.job_id, tmp_path)
    found = pdfa.problems(out)
    assert (found == []) is kept, found
    if policy == "scan":
        assert status.pages_ocred == [1]
    if policy == "external":
        assert status.redaction is not None and status.redaction.spans >= 1
    if kept:
        with pikepdf.open(out) as pdf:
            assert pdfa.claim(pdf) == claimed
            assert status.signature is not None and status.signature.valid
