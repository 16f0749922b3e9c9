"""Office documents end to end: a real worker converts them in its confined document child, and the PDF goes
through the whole pipeline (watermark, sign, verify, publish); what is refused, and the time limit."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from docjobs.domain.models import InputKind
from docjobs.domain.policy import OfficePolicy, Policy
from docjobs.domain.states import JobState
from docjobs.pdf import pdfa
from docjobs.settings.policies import PolicyBook, job_overrides
from docjobs.store.storage import sha256_file
from docjobs.temporal.client import JobClient
from tests.ci_skips import needs_tools
from tests.conftest import wait_terminal
from tests.fixtures.office_samples import (
    converted_by_libreoffice,
    letter_html,
    macro_enabled,
    million_rows,
    odt,
    saved_as,
    slides,
    workbook,
    zip_bomb,
)
from tests.fixtures.policy_files import named
from tests.fixtures.samples import make_sample_pdf
from tests.test_jobs import fetched

pytestmark = needs_tools("soffice", "pdftotext")


def with_office(policy: Policy, **office: object) -> Policy:
    return Policy.model_validate({**policy.model_dump(), "office": OfficePolicy(**office).model_dump()})  # type: ignore[arg-type]


def text_of(pdf: Path) -> str:
    return subprocess.run(["pdftotext", "-q", str(pdf), "-"], capture_output=True, text=True, check=True).stdout


def office_sample(target: str, folder: Path, marker: str) -> tuple[Path, list[str]]:
    """A document in format `target`, and the texts of its pages: a letter with a table (Writer's formats), a
    workbook of two sheets, or two slides; LibreOffice saves an OpenDocument made here in the other formats."""
    folder.mkdir(parents=True)
    if target in ("xlsx", "ods"):
        texts = [f"{marker} sheet one", f"{marker} sheet two"]
        made = workbook(folder / "sheets.ods", {"Results": texts[0], "Notes": texts[1]})
    elif target in ("pptx", "odp"):
        texts = [f"{marker} slide one", f"{marker} slide two"]
        made = slides(folder / "deck.odp", texts)
    else:
        return converted_by_libreoffice(letter_html(marker), target, folder), [marker, "HbA1c"]
    return (made if made.suffix == f".{target}" else saved_as(made, target)), texts


@pytest.mark.parametrize("target", ["docx", "odt", "doc", "rtf", "xlsx", "ods", "pptx", "odp"])
async def test_an_office_document_becomes_a_released_pdf(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path, target: str
) -> None:
    marker = f"office marker {uuid.uuid4().hex[:8]}"
    document, texts = office_sample(target, tmp_path / "made", marker)
    submitted = await jobs.submit(document, "standard", input_kind=InputKind.OFFICE)
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    assert status.converted_from == target and status.page_count == (1 if marker in texts else 2)
    assert status.signature is not None and status.signature.valid
    text = text_of(await fetched(jobs, submitted.job_id, tmp_path))
    assert all(expected in text for expected in texts) and "CONFIDENTIAL" in text
    # The evidence binds both files: the office document as accepted, and the PDF it became (kept beside it).
    check = await jobs.verify_evidence(submitted.job_id)
    assert check.ok, check.broken
    salt = bytes.fromhex(status.commitment_salt or "")
    assert check.evidence is not None and check.evidence.binds("source", sha256_file(document), salt)
    assert "converted.pdf" in (check.evidence.commitments or {})  # checked by verify_evidence against the kept file


async def test_a_policy_asks_pdf_a_2b_from_an_office_document(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    """LibreOffice exports PDF/A-2b; stamped, signed and verified, the released file keeps the claim."""
    document = converted_by_libreoffice(letter_html(f"archival {uuid.uuid4().hex[:8]}"), "docx", tmp_path / "made")
    submitted = await jobs.submit(document, named(jobs, with_office(policies.get("standard"), pdf_variant="pdf/a-2b")))
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    answer = status.model_dump(mode="json")
    assert (answer["pdfa"]["claimed"], answer["pdfa_kept"], answer["pdfa_reason"]) == ("2b", True, None)
    out = await fetched(jobs, submitted.job_id, tmp_path)
    assert pdfa.problems(out) == []
    assert status.signature is not None and status.signature.valid


async def test_a_macro_enabled_document_is_refused(jobs: JobClient, policies: PolicyBook, tmp_path: Path) -> None:
    docx = converted_by_libreoffice(letter_html("macro"), "docx", tmp_path / "made")
    docm = macro_enabled(docx, tmp_path / "letter.docx")
    submitted = await jobs.submit(docm, "standard", input_kind=InputKind.OFFICE)
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "input.active_content")
    assert status.converted_from is None


async def test_a_document_with_a_macro_and_a_linked_image_converts_confined(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    """In the child, the macro (bound to the document's opening) runs not, and the image's URL is not fetched; the
    sandbox would stop both anyway (tests/test_office.py shows the profile alone does, unconfined)."""
    marker = tmp_path / "macro-ran"
    document = odt(
        tmp_path / "hostile.odt", "hostile letter body", macro_writes=marker, image_url="http://127.0.0.1:9/x.png"
    )
    submitted = await jobs.submit(document, "standard", input_kind=InputKind.OFFICE)
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    assert status.converted_from == "odt"
    assert "hostile letter body" in text_of(await fetched(jobs, submitted.job_id, tmp_path))
    assert not marker.exists()


async def test_the_conversion_time_limit_fails_the_job(jobs: JobClient, policies: PolicyBook, tmp_path: Path) -> None:
    document = converted_by_libreoffice(letter_html("slow"), "docx", tmp_path / "made")
    policy = with_office(policies.get("standard"), convert_seconds=0.05)
    submitted = await jobs.submit(document, named(jobs, policy), input_kind=InputKind.OFFICE)
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "input.too_complex")


async def test_a_policy_can_refuse_office_documents(jobs: JobClient, policies: PolicyBook, tmp_path: Path) -> None:
    document = odt(tmp_path / "letter.odt", "refused letter")
    submitted = await jobs.submit(document, named(jobs, with_office(policies.get("standard"), enabled=False)))
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "input.unsupported")


async def test_the_page_limit_of_a_converted_document_fails_it_as_too_complex(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    """Its pages are the converter's work, not what was sent (a PDF over the limit is `input.too_large`)."""
    html = letter_html("two pages").replace("<table", "<p style='page-break-before: always'>page two</p><table")
    document = converted_by_libreoffice(html, "odt", tmp_path / "made")
    policy = policies.get("standard").model_copy(update={"max_pages": 1})
    submitted = await jobs.submit(document, named(jobs, policy), input_kind=InputKind.OFFICE)
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "input.too_complex")


async def test_a_name_in_a_docx_is_redacted(jobs: JobClient, policies: PolicyBook, tmp_path: Path) -> None:
    """The converted PDF goes through redaction and its gate: the released file has nothing of the name left."""
    name = f"Zbigniew Quarterfield {uuid.uuid4().hex[:6]}"
    html = letter_html("the referral").replace("<h1>", f"<p>Patient: {name} was seen today.</p><h1>")
    document = converted_by_libreoffice(html, "docx", tmp_path / "made")
    policy = policies.resolve("external", job_overrides(redact=[r"Patient: (?P<redact>[^.]+?) was seen"]))
    submitted = await jobs.submit(document, named(jobs, policy), input_kind=InputKind.OFFICE)
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    assert status.converted_from == "docx" and status.redaction is not None
    assert sum(page.spans for page in status.redaction.pages) >= 1 and status.redaction.gate
    text = text_of(await fetched(jobs, submitted.job_id, tmp_path))
    assert "Patient:" in text and "HbA1c" in text
    assert name not in text and "".join(name.split()) not in "".join(text.split())
    assert "Quarterfield" not in text and name not in status.model_dump_json()


@pytest.mark.parametrize("hostile", ["zip bomb", "million rows"])
async def test_a_document_too_big_to_convert_ends_with_a_limit_code(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path, hostile: str
) -> None:
    """A `.docx` whose main part unpacks to 1 GiB (3 MiB sent), and a spreadsheet of a million rows (under 1 KiB
    sent): the child's limits end the conversion, not the policy's time limit for it, and the worker carries on."""
    if hostile == "zip bomb":
        letter = converted_by_libreoffice(letter_html("bomb"), "docx", tmp_path / "made")
        document = zip_bomb(letter, tmp_path / "bomb.docx", megabytes=1024)
    else:
        document = million_rows(tmp_path / "rows.ods")
    submitted = await jobs.submit(document, "standard")
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "input.too_complex"), status.failure_message
    assert status.failure_message is not None and "took longer" not in status.failure_message  # not the time limit


async def test_the_bytes_decide_not_the_name(jobs: JobClient, policies: PolicyBook, tmp_path: Path) -> None:
    """A PDF named `.docx` is processed as the PDF it is; a `.docx` named `.pdf` is converted."""
    make_sample_pdf(pdf := tmp_path / "letter.docx", pages=1, marker="a pdf in disguise")
    docx = converted_by_libreoffice(letter_html("a docx in disguise"), "docx", tmp_path / "made")
    disguised = docx.rename(tmp_path / "letter.pdf")
    for document, converted_from, marker in ((pdf, None, "a pdf in disguise"), (disguised, "docx", "a docx in")):
        status = await wait_terminal(jobs, (await jobs.submit(document, "standard")).job_id)
        assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
        assert status.converted_from == converted_from
        assert marker in text_of(await fetched(jobs, status.job_id, tmp_path))


async def test_fonts_the_machine_lacks_are_substituted_and_counted(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    html = "<html><body><p style='font-family: Calibri'>in Calibri</p><p style='font-family: Cambria'>in Cambria</p>"
    document = converted_by_libreoffice(html + "</body></html>", "docx", tmp_path / "made")
    status = await wait_terminal(jobs, (await jobs.submit(document, "standard")).job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    assert status.fonts_substituted == 2  # Carlito and Caladea drawn, embedded (tests/test_office.py)
