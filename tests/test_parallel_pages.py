"""Pages read in parallel forks (docjobs/pdf/parallel_pages.py): every page read once, a failing or killed range
fails the caller, and the redaction gate finds a leak whichever range its page is in."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pikepdf
import pytest

from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.policy import RedactPolicy
from docjobs.pdf.parallel_pages import map_pages, read_in_parallel, split_pages
from docjobs.pdf.redaction import gate
from docjobs.pdf.redaction.patterns import compile_patterns
from tests.fixtures.samples import make_sample_pdf, page_word

pytestmark = pytest.mark.unit

PAGES = 10
SSN = b"123-45-6789"


@pytest.mark.parametrize(("count", "parts"), [(1000, 2), (10, 3), (7, 7), (3, 8), (1, 4), (65, 2)])
def test_page_ranges_cover_every_page_once_in_order(count: int, parts: int) -> None:
    ranges = split_pages(count, parts)
    assert [page for pages in ranges for page in pages] == list(range(count))
    assert len(ranges) == min(parts, count) and all(ranges)
    assert max(map(len, ranges)) - min(map(len, ranges)) <= 1


def test_a_range_that_fails_fails_the_check() -> None:
    def work(pages: range) -> dict[str, object]:
        if PAGES - 1 in pages:
            raise DocJobError(FailureCode.FIDELITY_READER, "a second PDF reader could not read the output")
        return {"pages": list(pages)}

    with pytest.raises(DocJobError) as caught, read_in_parallel(work, split_pages(PAGES, 3)) as answers:
        answers()
    assert caught.value.code == "fidelity.reader"


@pytest.mark.parametrize("parts", [1, 3])
def test_paged_work_reports_every_page_as_its_range_does_it(parts: int) -> None:
    def work(pages: range, page_done: Callable[[], None]) -> dict[str, object]:
        for _ in pages:
            page_done()
        return {"first": pages.start, "count": len(pages)}

    reported: list[int] = []
    answers = map_pages(work, split_pages(PAGES, parts), reported.append)
    assert reported == list(range(1, PAGES + 1))  # pages done so far, whichever range did them
    assert [answer["first"] for answer in answers] == [pages.start for pages in split_pages(PAGES, parts)]
    assert sum(int(answer["count"]) for answer in answers) == PAGES


def test_paged_work_that_fails_fails_the_caller() -> None:
    def work(pages: range, page_done: Callable[[], None]) -> dict[str, object]:
        if 0 in pages:
            raise DocJobError(FailureCode.RENDER_FAILED, "pdftoppm exited with status 1")
        return {}

    with pytest.raises(DocJobError) as caught:
        map_pages(work, split_pages(PAGES, 2), lambda _done: None)
    assert caught.value.code == "render.failed"


def test_a_range_killed_by_a_signal_takes_the_caller_down_the_same_way() -> None:
    """So the child's supervisor still tells CPU exhaustion (SIGXCPU) from a crash."""
    script = (
        "import os, signal\n"
        "from docjobs.pdf.parallel_pages import read_in_parallel, split_pages\n"
        "def work(pages):\n"
        "    if 0 not in pages: os.kill(os.getpid(), signal.SIGXCPU)\n"
        "    return {}\n"
        "with read_in_parallel(work, split_pages(4, 2)) as answers: answers()\n"
    )
    ended = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parent.parent, check=False)
    assert ended.returncode == -signal.SIGXCPU


@pytest.mark.parametrize("ranges", [1, 3])
def test_the_redaction_gate_finds_leaks_in_every_range(
    ranges: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gate, "ranges_for", lambda count: split_pages(count, ranges))
    path = tmp_path / "leaky.pdf"
    make_sample_pdf(path, pages=PAGES)
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        for number in (5, PAGES):
            contents = pdf.pages[number - 1].Contents
            contents.write(contents.read_bytes().replace(page_word(number).encode(), SSN))
        pdf.save(path)
    report = gate.check_redaction(path, frozenset(), compile_patterns(RedactPolicy(patterns=("ssn",))), {})
    assert [(leak.extractor, leak.page, leak.kind) for leak in report.leaks] == [
        (extractor, number, "pattern:ssn") for extractor in ("pdftotext", "pypdf") for number in (5, PAGES)
    ]
