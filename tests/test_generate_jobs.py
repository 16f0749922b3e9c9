"""Generated documents end to end: HTML, bundle and template jobs through a real worker and the whole pipeline
(watermark, sign, verify, publish, evidence), the SSRF defence as a job sees it, and the sandbox's refusals."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import pikepdf
import pytest

from docjobs.domain.job_status import JobStatus
from docjobs.domain.models import InputKind
from docjobs.domain.policy import Policy
from docjobs.domain.states import JobState
from docjobs.pdf import pdfa
from docjobs.settings.policies import PolicyBook
from docjobs.store.templates import zip_folder
from docjobs.temporal.client import JobClient, Submitted
from tests.ci_skips import needs_tools
from tests.conftest import Env, history_payload_text, run_starter, wait_terminal
from tests.fixtures.generate_samples import (
    PASSWD_MARKER,
    bundle_folder,
    invoice_data,
    invoice_template,
    loopback_server,
    reaching_page,
    write_json,
)
from tests.fixtures.policy_files import named
from tests.test_generate import text_of
from tests.test_jobs import fetched

pytestmark = needs_tools("pdftotext", "pdffonts", "qpdf")


def with_generate(policy: Policy, **generate: object) -> Policy:
    body = policy.model_dump()
    body["generate"].update(generate)
    return Policy.model_validate(body)


def fonts_of(pdf: Path) -> list[tuple[str, str]]:
    """(name, embedded) of every font pdffonts lists."""
    lines = subprocess.run(["pdffonts", str(pdf)], capture_output=True, text=True, check=True).stdout.splitlines()
    return [(line.split()[0], line.split()[-5]) for line in lines[2:]]


async def succeeded(jobs: JobClient, submitted: Submitted, tmp_path: Path) -> tuple[JobStatus, Path]:
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    assert status.generated is not None and "generate" in status.attempts
    assert status.signature is not None and status.signature.valid
    return status, await fetched(jobs, submitted.job_id, tmp_path)


@pytest.fixture(scope="module")
def invoice_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("invoice")
    zip_folder(invoice_template(folder / "invoice"), folder / "invoice.zip")
    return folder / "invoice.zip"


async def submit_template(
    jobs: JobClient, policy: Policy, tenant: str, name: str, data: dict[str, object], folder: Path
) -> Submitted:
    data_file = write_json(folder / f"{uuid.uuid4().hex}.json", data)
    manifest = jobs.templates.manifest(tenant, name, data_file, folder, max_data_bytes=1 << 20)
    return await jobs.submit(manifest, named(jobs, policy), input_kind=InputKind.TEMPLATE, tenant=tenant)


async def test_an_html_file_becomes_a_released_pdf(jobs: JobClient, policies: PolicyBook, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(f"<h1>Quarterly note</h1><p>html marker {uuid.uuid4().hex[:8]}</p>")
    submitted = await jobs.submit(page, "standard", input_kind=InputKind.HTML)
    status, out = await succeeded(jobs, submitted, tmp_path)
    assert status.generated is not None and status.generated.page_count == status.page_count == 1
    text = text_of(out)
    assert "Quarterly note" in text and "CONFIDENTIAL" in text  # generated, then stamped and signed as any PDF
    fonts = fonts_of(out)
    assert fonts and all(embedded == "yes" for _, embedded in fonts), fonts  # the stamp's too
    assert any("DocjobsStampSans" in name for name, _ in fonts)


async def test_a_bundle_brings_its_own_font_and_image(jobs: JobClient, policies: PolicyBook, tmp_path: Path) -> None:
    marker = f"bundle marker {uuid.uuid4().hex[:8]}"
    zip_folder(bundle_folder(tmp_path / "site", marker), tmp_path / "bundle.zip")
    submitted = await jobs.submit(tmp_path / "bundle.zip", "standard", input_kind=InputKind.BUNDLE)
    status, out = await succeeded(jobs, submitted, tmp_path)
    assert status.generated is not None and status.generated.refused == {}
    assert marker in text_of(out)
    bundle_fonts = [embedded for name, embedded in fonts_of(out) if "BundleSans" in name]
    assert bundle_fonts == ["yes"]
    with pikepdf.open(out) as pdf:
        assert pdf.pages[0].get_images()


async def test_an_invoice_spanning_pages_from_a_stored_template(
    jobs: JobClient, policies: PolicyBook, invoice_bundle: Path, tmp_path: Path, env: Env
) -> None:
    tenant = f"inv-{uuid.uuid4().hex[:6]}"
    jobs.templates.add(tenant, "invoice", invoice_bundle)
    data = invoice_data(90, number="INV-SPAN-77", customer="Zebulon Quartz Clinic")
    policy = policies.get("standard")
    submitted = await submit_template(jobs, policy, tenant, "invoice", data, tmp_path)
    status, out = await succeeded(jobs, submitted, tmp_path)
    pages = status.page_count
    assert pages >= 3 and status.generated is not None and status.generated.page_count == pages
    per_page = subprocess.run(["pdftotext", "-q", str(out), "-"], capture_output=True, text=True).stdout.split("\f")
    footers = [re.findall(r"Page (\d+) of (\d+)", page) for page in per_page[:pages]]
    assert footers == [[(str(number), str(pages))] for number in range(1, pages + 1)]
    text = "".join(per_page)
    for value in ("INV-SPAN-77", "Zebulon Quartz Clinic", "Service item 001", "Service item 090", "Total EUR"):
        assert value in text, value
    assert all("Tested Seller GmbH · Invoice INV-SPAN-77" in page for page in per_page[:pages])  # the header
    document_fonts = [(name, embedded) for name, embedded in fonts_of(out) if "InvoiceSans" in name]
    assert len(document_fonts) == 2 and all(embedded == "yes" for _, embedded in document_fonts)

    # The data is content: in a blob, never in history.
    history = await history_payload_text(jobs.client, submitted.job_id)
    assert "Zebulon" not in history and "INV-SPAN-77" not in history

    again = await submit_template(jobs, policy, tenant, "invoice", data, tmp_path)
    assert (again.job_id, again.created) == (submitted.job_id, False)
    other = await submit_template(jobs, policy, tenant, "invoice", {**data, "number": "INV-SPAN-78"}, tmp_path)
    assert other.created and other.job_id != submitted.job_id
    jobs.templates.add(tenant, "invoice", rezipped_with_note(invoice_bundle, tmp_path))  # a new version
    newer = await submit_template(jobs, policy, tenant, "invoice", data, tmp_path)
    assert newer.created and newer.job_id not in (submitted.job_id, other.job_id)


def rezipped_with_note(bundle: Path, folder: Path) -> Path:
    import zipfile

    changed = folder / "changed.zip"
    with zipfile.ZipFile(bundle) as source, zipfile.ZipFile(changed, "w") as target:
        for entry in source.infolist():
            target.writestr(entry, source.read(entry))
        target.writestr("NOTE.txt", "version 2")
    return changed


async def test_a_pdf_a_2b_job_carries_its_identification_and_output_intent(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    page = tmp_path / "archive.html"
    page.write_text(f"<p>archival copy {uuid.uuid4().hex[:8]}</p>")
    policy = with_generate(policies.get("standard"), pdf_variant="pdf/a-2b")
    submitted = await jobs.submit(page, named(jobs, policy), input_kind=InputKind.HTML)
    status, out = await succeeded(jobs, submitted, tmp_path)
    assert status.generated is not None and status.generated.pdf_variant == "pdf/a-2b"
    with pikepdf.open(out) as pdf:
        metadata = pdf.open_metadata()
        assert (metadata.get("pdfaid:part"), metadata.get("pdfaid:conformance")) == ("2", "B")
        intents = pdf.Root.OutputIntents
        assert len(intents) == 1 and intents[0].S == "/GTS_PDFA1" and "/DestOutputProfile" in intents[0]
    # Stamped and signed, the released file still holds the claim (docjobs/pdf/pdfa.py), and the status says so.
    assert pdfa.problems(out) == []
    assert status.pdfa is not None and (status.pdfa.claimed, status.pdfa.kept) == ("2b", True)


@pytest.mark.parametrize("missing", ["ignore", "fail"])
async def test_a_page_reaching_outside_the_job_gets_nothing(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path, missing: str
) -> None:
    policy = with_generate(policies.get("standard"), missing=missing)
    with loopback_server() as server:
        page = tmp_path / "reaching.html"
        page.write_text(reaching_page(server.base, f"reaching {uuid.uuid4().hex[:8]}"))
        submitted = await jobs.submit(page, named(jobs, policy), input_kind=InputKind.HTML)
        status = await wait_terminal(jobs, submitted.job_id)
    assert server.requests == []
    if missing == "fail":
        assert (status.state, status.failure_code) == (JobState.FAILED, "generate.resource_refused")
        assert status.attempts == {"generate": 1} and server.base not in (status.failure_message or "")
        return
    assert status.state is JobState.SUCCEEDED, status.failure_code
    assert status.generated is not None and status.generated.refused == {"http": 9, "file": 1, "attachment": 3}
    out = await fetched(jobs, submitted.job_id, tmp_path)
    expanded = tmp_path / "out.qdf"
    subprocess.run(["qpdf", "--qdf", "--object-streams=disable", str(out), str(expanded)], check=False)
    raw = expanded.read_bytes()
    assert PASSWD_MARKER.encode() not in raw and b"/EmbeddedFile" not in raw and b"/FileAttachment" not in raw
    assert PASSWD_MARKER not in text_of(out)


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("<p>{{ ''.__class__.__mro__[1].__subclasses__() }}</p>", "an operation the sandbox refuses at line 1"),
        (
            "<p>{{ customer.name }}</p>\n<p>{{ customer.name.__class__.__init__.__globals__ }}</p>",
            "an operation the sandbox refuses at line 2",
        ),
        ("<p>\n{{ nothing_like_this }}</p>", "an undefined value at line 2"),
    ],
)
async def test_a_template_that_breaks_fails_and_reveals_nothing(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path, template: str, message: str
) -> None:
    tenant = f"bad-{uuid.uuid4().hex[:6]}"
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "index.html").write_text(template)
    zip_folder(tmp_path / "tpl", tmp_path / "tpl.zip")
    jobs.templates.add(tenant, "broken", tmp_path / "tpl.zip")
    secret = f"Secret Patient {uuid.uuid4().hex[:6]}"
    submitted = await submit_template(
        jobs, policies.get("standard"), tenant, "broken", {"customer": {"name": secret}}, tmp_path
    )
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "template.invalid")
    assert status.failure_message == f"the template has {message}"
    assert status.attempts == {"generate": 1} and status.output_sha256 is None
    assert secret not in status.model_dump_json() and "object" not in (status.failure_message or "")


async def test_a_template_that_loops_without_bound_is_stopped_in_the_child(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    tenant = f"loop-{uuid.uuid4().hex[:6]}"
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "index.html").write_text(
        "{% for i in range(99999) %}{% for j in range(99999) %}.{% endfor %}{% endfor %}"
    )
    zip_folder(tmp_path / "tpl", tmp_path / "tpl.zip")
    jobs.templates.add(tenant, "loop", tmp_path / "tpl.zip")
    policy = with_generate(policies.get("standard"), template_seconds=1)
    submitted = await submit_template(jobs, policy, tenant, "loop", {"n": 1}, tmp_path)
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "template.invalid")
    assert status.failure_message == "the template has no end within its 1-second limit at line 1"


def test_the_cli_stores_a_template_and_submits_it_with_data(
    env: Env, jobs: JobClient, invoice_bundle: Path, tmp_path: Path
) -> None:
    folder = invoice_template(tmp_path / "invoice")
    code, added, _ = run_starter(env, "template", "add", "invoice", str(folder), "--tenant", "cli-tenant")
    assert code == 0 and added["name"] == "invoice" and len(added["version"]) == 64
    code, listed, _ = run_starter(env, "template", "list", "--tenant", "cli-tenant")
    assert code == 0 and [t["version"] for t in listed["templates"]] == [added["version"]]
    data = write_json(tmp_path / "data.json", invoice_data(3, number="INV-CLI-5"))
    args = ("submit", "--template", "invoice", "--data", str(data), "--tenant", "cli-tenant")
    code, first, _ = run_starter(env, *args)
    assert code == 0 and first["created"], first
    code, second, _ = run_starter(env, *args)
    assert code == 0 and (second["job_id"], second["created"]) == (first["job_id"], False)
    code, unknown, _ = run_starter(env, "submit", "--template", "nope", "--data", str(data))
    assert (code, unknown["error"]) == (2, "template.unknown")
    code, both, _ = run_starter(env, "submit", str(data), "--template", "invoice", "--data", str(data))
    assert (code, both["error"]) == (2, "config")
