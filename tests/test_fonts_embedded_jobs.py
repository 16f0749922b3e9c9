"""Every font of every released output is embedded, the stamp's included: structure and raster mode, OCR,
redaction (its fonts re-subset), from inputs whose own fonts are embedded (structure mode keeps a document's
fonts as they are: an input's unembedded Helvetica stays so). Generated documents: tests/test_generate_jobs.py,
office documents: tests/test_office_jobs.py."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from docjobs.domain.models import JobOverrides
from docjobs.domain.states import JobState
from docjobs.temporal.client import JobClient
from tests.ci_skips import needs_tools
from tests.conftest import wait_terminal
from tests.fixtures.redact_layout import NAME_REGEX, NAMES, make_embedded
from tests.fixtures.samples import make_sample_pdf
from tests.fixtures.scans import make_scan_pdf
from tests.test_jobs import fetched
from tests.test_ocr_jobs import needs_ocr_tools, words_for

pytestmark = needs_tools("pdffonts")


def fonts_of(pdf: Path) -> list[tuple[str, str]]:
    """(name, embedded) of every font pdffonts lists."""
    lines = subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True, check=True).stdout.splitlines()
    return [(line.split()[0], line.split()[-5]) for line in lines[2:]]


def scan(path: Path) -> None:
    make_scan_pdf(path, words_for(1), ["upright"])


def sample(path: Path) -> None:
    make_sample_pdf(path, pages=2)


def letter(path: Path) -> None:
    make_embedded(path, NAMES[4])  # an embedded TrueType subset (fpdf2)


CASES: dict[str, tuple[Callable[[Path], None], str, JobOverrides, bool]] = {
    # case: (fixture, policy, overrides, whether the output draws text)
    "structure": (letter, "standard", JobOverrides(), True),
    "raster": (sample, "preview", JobOverrides(watermark_dpi=72), False),
    "redaction": (letter, "external", JobOverrides(redact_patterns=(NAME_REGEX,)), True),
    "ocr": (scan, "scan", JobOverrides(), True),
}


@pytest.mark.parametrize("case", sorted(CASES))
@needs_ocr_tools
async def test_every_font_of_the_output_is_embedded(case: str, jobs: JobClient, tmp_path: Path) -> None:
    make, policy, overrides, texted = CASES[case]
    make(source := tmp_path / "source.pdf")
    submitted = await jobs.submit(source, policy, overrides=overrides, key=f"fonts-{case}")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    fonts = fonts_of(await fetched(jobs, submitted.job_id, tmp_path))
    assert all(embedded == "yes" for _, embedded in fonts), fonts
    assert bool(fonts) is texted, fonts  # raster mode leaves no font at all
    if texted:
        assert any("DocjobsStampSans" in name for name, _ in fonts)  # the stamp's, embedded
