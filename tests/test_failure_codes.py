"""The failure codes are declared once (docjobs/domain/errors.py): the operator's tables are generated from there, and
fail here when a code, its outcome or its words drift from what a page shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from docjobs.domain.errors import (
    FAILURE_CODES,
    GUIDE_MARKERS,
    PROVIDER_OUTAGES,
    DocJobError,
    FailureCode,
    Outcome,
    failure_code_table,
    known_code,
    outage_retry_seconds,
    outcome_of,
)

REPO = Path(__file__).resolve().parent.parent
# How a job with each outcome ends, as the tables say it (notify.failed leaves the job as it was).
STATE_WORDS = {Outcome.FAIL: "failed", Outcome.QUARANTINE: "quarantined", Outcome.RETRY: "retried, then failed"}
STATE_EXCEPTIONS = {"notify.failed"}


def test_every_code_has_its_info_and_its_outcome_in_words() -> None:
    assert list(FAILURE_CODES) == list(FailureCode)  # every member once, in the order of the enum
    for code, info in FAILURE_CODES.items():
        assert info.message and info.meaning and info.action, code
        if code not in STATE_EXCEPTIONS:
            assert info.state.startswith(STATE_WORDS[info.outcome]), (code, info.state)


def test_a_code_from_the_wire_is_read_as_its_member_or_as_unknown() -> None:
    """Histories and statuses carry codes as strings, maybe a newer worker's: unknown, it fails the job rather
    than being retried forever; a raise still names a known code, even past the type checker."""
    assert known_code("fidelity.text") is FailureCode.FIDELITY_TEXT
    assert known_code("fidelity.newer") is None and known_code(None) is None
    assert outcome_of("ocr.failed") is Outcome.RETRY and outcome_of("fidelity.newer") is Outcome.FAIL
    error = DocJobError("input.malformed")  # type: ignore[arg-type]  # what an untyped caller may pass
    assert (
        error.code is FailureCode.INPUT_MALFORMED and str(error) == "input.malformed: the input is not a readable PDF"
    )
    with pytest.raises(ValueError):
        DocJobError("input.newer")  # type: ignore[arg-type]


def test_a_provider_outage_is_retried_over_minutes_not_seconds() -> None:
    """Only retried codes name an outage; five attempts (the default) wait 5 + 15 + 45 + 120 s between them, where
    the retry policy's backoff waits 1 + 2 + 4 + 8 s: a store that is back within three minutes fails no stage."""
    assert all(code.info.outcome is Outcome.RETRY for code in PROVIDER_OUTAGES)
    assert [outage_retry_seconds(attempt) for attempt in range(1, 7)] == [5, 15, 45, 120, 120, 120]
    assert sum(outage_retry_seconds(attempt) for attempt in range(1, 5)) > 180


@pytest.mark.parametrize("page", ["docs/failure-codes.md", "RUNBOOK.md"])
def test_each_page_shows_the_generated_table(page: str) -> None:
    text = (REPO / page).read_text()
    start, end = text.index(GUIDE_MARKERS[0]), text.index(GUIDE_MARKERS[1]) + len(GUIDE_MARKERS[1])
    assert text[start:end] == failure_code_table(), f"{page} drifted: run `python starter.py codes --write {page}`"


def test_the_cli_writes_the_table_and_lists_the_codes(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"# before\n\n{GUIDE_MARKERS[0]}\n| stale |\n{GUIDE_MARKERS[1]}\n\nafter\n")
    done = subprocess.run(
        [sys.executable, "starter.py", "--json", "codes", "--write", str(page)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert page.read_text() == f"# before\n\n{failure_code_table()}\n\nafter\n"
    listed = json.loads(done.stdout.splitlines()[-1])["codes"]
    assert [entry["code"] for entry in listed] == list(FAILURE_CODES)
    assert {entry["outcome"] for entry in listed} == {outcome.value for outcome in Outcome}
