"""Redaction end to end: real worker, real Temporal, every fixture; what is released has nothing left to find."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pikepdf
from pypdf import PdfReader

from docjobs.domain.job_status import JobStatus
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook, job_overrides
from docjobs.signing.evidence import envelope_evidence
from docjobs.store.storage import TEXT_BLOB, beside
from docjobs.temporal.client import JobClient
from tests.ci_skips import needs_tools
from tests.conftest import FAULT_WORKER, Env, StartWorker, history_payload_text, run_starter, wait_terminal
from tests.fixtures.jbig2 import make_jbig2_behind_values
from tests.fixtures.policy_files import named
from tests.fixtures.redact_fallback import FALLBACK_FIXTURES
from tests.fixtures.redact_layout import NAME_REGEX, NAMES, make_embedded
from tests.fixtures.redact_samples import EMAIL, EMAIL_PREFIX, FIXTURES, LINE_X, SSN, SSN_Y, make_plain, text_width
from tests.test_jobs import job_files
from tests.test_redact_layout import glyphs

NOT_OCR = [name for name, spec in FIXTURES.items() if spec.where != "image"]


def extracted_texts(pdf: Path) -> dict[str, str]:
    """The released file as three independent readers see it: poppler, pypdf, and qpdf's uncompressed bytes."""
    poppler = subprocess.run(["pdftotext", "-q", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    reader = PdfReader(pdf)
    by_pypdf = "\n".join(page.extract_text() or "" for page in reader.pages)
    expanded = pdf.with_suffix(".qdf")
    subprocess.run(["qpdf", "--qdf", "--object-streams=disable", str(pdf), str(expanded)], check=False)
    raw = expanded.read_bytes()
    return {
        "pdftotext": poppler,
        "pypdf": by_pypdf,
        "raw": raw.decode("latin-1") + raw.decode("utf-16-be", "replace"),  # PDF text strings may be UTF-16
    }


def assert_nothing_left(pdf: Path, values: tuple[str, ...]) -> None:
    for reader, text in extracted_texts(pdf).items():
        squeezed = "".join(text.split())
        for value in values:
            assert value not in text and "".join(value.split()) not in squeezed, f"{reader} still finds a value"


def geometry(pdf: Path) -> list[list[float]]:
    with pikepdf.open(pdf) as document:
        return [[float(v) for v in page.mediabox] for page in document.pages]


def no_values_in(status: JobStatus, values: tuple[str, ...]) -> None:
    dumped = status.model_dump_json()
    assert not any(value in dumped for value in values)


async def test_every_fixture_is_redacted_for_real(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path, env: Env
) -> None:
    policy = policies.get("external")
    inputs = {name: tmp_path / f"{name}.pdf" for name in NOT_OCR}
    for name, path in inputs.items():
        FIXTURES[name].make(path)
    submitted = {
        name: await jobs.submit(path, named(jobs, policy), key=f"redact-{name}") for name, path in inputs.items()
    }
    statuses = dict(
        zip(submitted, await asyncio.gather(*(wait_terminal(jobs, s.job_id) for s in submitted.values())), strict=True)
    )
    for name, status in statuses.items():
        spec = FIXTURES[name]
        assert status.state is JobState.SUCCEEDED, (name, status.failure_code, status.failure_message)
        assert status.redaction is not None and "redaction_patterns" in status.fidelity_checks
        out = tmp_path / f"{name}.out.pdf"
        await jobs.fetch(status.job_id, out)
        assert_nothing_left(out, spec.values)
        assert geometry(out) == geometry(inputs[name]), name
        assert subprocess.run(["qpdf", "--check", str(out)], capture_output=True).returncode == 0, name
        no_values_in(status, spec.values)
        history = await history_payload_text(jobs.client, status.job_id)
        assert not any(value in history for value in spec.values), name
        if spec.where == "type3":  # cannot be rewritten safely: burned in, and recorded
            assert status.redaction.fallback_pages == [1]
            continue
        words = set(extracted_texts(out)["pdftotext"].split())
        assert set(spec.neighbours) <= words, (name, set(spec.neighbours) - words)
        if spec.where == "text":
            found = {pattern for page in status.redaction.pages for pattern in page.matches}
            assert found and found <= {"ssn", "email"}, (name, found)
            assert status.redaction.fallback_pages == [], name
        else:  # document-level: scrubbed by redaction, unless render already stripped it as active content
            assert status.redaction.document or status.sanitized, name


async def test_a_name_leaves_no_width_through_the_worker(jobs: JobClient, policies: PolicyBook, tmp_path: Path) -> None:
    """The default policy with a name pattern (layout `mask` by default): two jobs, two names of different widths
    in an embedded subset font, one released page."""
    policy = policies.resolve(policies.default, job_overrides(redact=[NAME_REGEX]))
    names = (NAMES[1], NAMES[9])
    for number, name in enumerate(names):
        make_embedded(tmp_path / f"in{number}.pdf", name)
    submitted = [
        await jobs.submit(tmp_path / f"in{n}.pdf", named(jobs, policy), key=f"redact-mask-{n}") for n in range(2)
    ]
    released, summaries = [], []
    for number, job in enumerate(submitted):
        status = await wait_terminal(jobs, job.job_id)
        assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
        assert status.redaction is not None
        assert (status.redaction.lines_reset, status.redaction.fonts_resubset) == (1, 1)
        summaries.append(status.redaction)
        await jobs.fetch(status.job_id, out := tmp_path / f"out{number}.pdf")
        assert_nothing_left(out, (names[number],))
        released.append(glyphs(out))
    assert released[0] == released[1]
    assert summaries[0] == summaries[1]  # the status (and the history) tells nothing of the names' lengths


async def test_summary_is_bound_into_the_evidence(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path, env: Env
) -> None:
    make_plain(source := tmp_path / "plain.pdf")
    status = await wait_terminal(jobs, (await jobs.submit(source, "external", key="redact-ev")).job_id)
    assert status.state is JobState.SUCCEEDED and status.redaction is not None
    page = status.redaction.pages[0]
    assert (page.page, page.matches) == (1, {"ssn": 1, "email": 1})
    assert (page.spans, status.redaction.spans) == (2, 2)  # spans counted, never the letters they held
    envelope = tmp_path / "evidence.json"
    assert run_starter(env, "evidence", status.job_id, "-o", str(envelope))[0] == 0
    salt = bytes.fromhex(status.commitment_salt or "")
    assert envelope_evidence(envelope.read_bytes()).binds("redaction.json", status.redaction.sha256, salt)
    code, checked, _ = run_starter(env, "verify-evidence", status.job_id)  # the reported summary is the bound one
    assert (code, checked["ok"], checked["broken"]) == (0, True, [])


async def test_pages_the_rewrite_cannot_finish_are_burned_in_and_recorded(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    """A JBIG2 image with globals under a region, a trace only poppler reads, neighbours that poppler reads
    differently once the value is gone: each job succeeds with its page burned in and the reason recorded
    (an undecodable image was an internal.error, retried five times)."""
    external = policies.get("external")
    submitted = {}
    for name, (make, _, _, layout) in FALLBACK_FIXTURES.items():
        make(source := tmp_path / f"{name}.pdf")
        policy = external.model_copy(update={"redact": external.redact.model_copy(update={"layout": layout})})
        submitted[name] = await jobs.submit(source, named(jobs, policy), key=f"redact-fallback-{name}")
    for name, job in submitted.items():
        _, reason, values, _ = FALLBACK_FIXTURES[name]
        status = await wait_terminal(jobs, job.job_id)
        assert status.state is JobState.SUCCEEDED, (name, status.failure_code, status.failure_message)
        assert status.attempts["redact"] == 1 and status.redaction is not None
        assert status.redaction.fallback_pages == [1] and status.redaction.pages[0].fallback == reason, name
        await jobs.fetch(job.job_id, out := tmp_path / f"{name}.out.pdf")
        assert_nothing_left(out, values)


async def test_a_jbig2_image_under_a_value_is_painted_in_the_document_child(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    """jbig2dec runs inside the child's sandbox: the JBIG2 image (with globals) behind the SSN is painted and
    stored again losslessly, and the page keeps its text instead of being burned in."""
    make_jbig2_behind_values(source := tmp_path / "jbig2.pdf")
    submitted = await jobs.submit(source, "external", key="redact-jbig2")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED and status.redaction is not None, status.failure_code
    assert status.redaction.fallback_pages == [] and status.redaction.pages[0].images_redacted == 1
    await jobs.fetch(submitted.job_id, out := tmp_path / "jbig2.out.pdf")
    assert_nothing_left(out, (SSN, EMAIL))
    assert {"Patient", "Contact"} <= set(extracted_texts(out)["pdftotext"].split())
    with pikepdf.open(out) as released:
        filters = [str(image.get("/Filter")) for image in released.pages[0].get_images().values()]
    assert filters == ["/FlateDecode"]


async def test_box_only_redactor_is_caught_by_the_gate(
    jobs: JobClient, env: Env, policies: PolicyBook, start_worker: StartWorker, tmp_path: Path
) -> None:
    queue = "docjobs-box-only"
    start_worker(queue, script=FAULT_WORKER, DOCJOBS_FAULT="box-only-redaction")
    on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    make_plain(source := tmp_path / "plain.pdf")
    submitted = await on_queue.submit(source, "external", key="redact-box-only")
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.QUARANTINED, "redaction.leak"), status
    assert status.output_sha256 is None and status.attempts["redact"] == 1  # deterministic: not retried
    # nothing released, nothing staged left
    assert job_files(env, submitted.job_id) == ["commitment.salt", "evidence.json", "run.json"]
    assert SSN not in (status.failure_message or "") and EMAIL not in (status.failure_message or "")


def test_cli_region_removes_exactly_the_region(env: Env, main_worker: object, tmp_path: Path) -> None:
    make_plain(source := tmp_path / "plain.pdf")
    # The word after the e-mail on its line ("today"), in PDF points: a region, not a pattern.
    start = LINE_X + text_width(EMAIL_PREFIX + EMAIL + " ")
    region = f"1:{start + 0.3},{SSN_Y - 24},{start + text_width('today') - 0.3},{SSN_Y - 12}"  # not the space before
    out = tmp_path / "out.pdf"
    code, status, _ = run_starter(env, "run", str(source), "--redact-region", region, "--no-sign", "--out", str(out))
    assert code == 0, status
    words = set(extracted_texts(out)["pdftotext"].split())
    assert "today" not in words and {EMAIL, SSN, "Contact", "Patient"} <= words
    assert status["redaction"]["pages"] == [
        {
            "page": 1,
            "matches": {},
            "regions": 1,
            "spans": 1,
            "images_redacted": 0,
            "annotations_removed": 0,
            "lines_reset": 1,  # a region over text: its line is re-set around a fixed-width mask, as for a match
            "fallback": None,
            "fallback_fonts": [],
        }
    ]


def test_region_on_a_missing_page_fails_the_job(env: Env, main_worker: object, tmp_path: Path) -> None:
    make_plain(source := tmp_path / "plain.pdf")
    code, status, _ = run_starter(env, "run", str(source), "--redact-region", "3:10,10,50,50", "--no-sign")
    assert (code, status["state"], status["failure_code"]) == (1, "failed", "redaction.region_outside")
    assert status["attempts"]["redact"] == 1  # deterministic: not retried


def test_cli_rejects_a_bad_region_or_regex(env: Env, tmp_path: Path) -> None:
    make_plain(source := tmp_path / "plain.pdf")
    for flag, value in (("--redact-region", "1:10,10,10,50"), ("--redact-region", "0:1,1,2,2"), ("--redact", "(")):
        code, _, stderr = run_starter(env, "submit", str(source), flag, value)
        assert code == 2 and "Traceback" not in stderr, (flag, value, stderr)


@needs_tools("tesseract")
async def test_scan_is_redacted_after_ocr_and_burned_into_the_image(
    jobs: JobClient, env: Env, policies: PolicyBook, tmp_path: Path
) -> None:
    FIXTURES["scanned"].make(source := tmp_path / "scanned.pdf")
    policy = policies.resolve("scan", job_overrides(redact=["ssn", "email"]))
    status = await wait_terminal(jobs, (await jobs.submit(source, named(jobs, policy), key="redact-scan")).job_id)
    assert status.state is JobState.SUCCEEDED, status
    assert status.redaction is not None and status.redaction.pages[0].images_redacted >= 1
    out = tmp_path / "out.pdf"
    await jobs.fetch(status.job_id, out)
    assert_nothing_left(out, FIXTURES["scanned"].values)
    text_blob = Path(env.vars["DOCJOBS_DATA_DIR"]) / "blobs" / beside(str(status.artifact_key), TEXT_BLOB)
    assert SSN not in text_blob.read_text() and "Patient" in text_blob.read_text()  # rebuilt from the redacted file
    # The pixels themselves: OCR the released page again, independently.
    subprocess.run(["pdftoppm", "-r", "300", "-png", "-singlefile", str(out), str(tmp_path / "page")], check=True)
    seen = subprocess.run(
        ["tesseract", str(tmp_path / "page.png"), "-"], capture_output=True, text=True, check=True
    ).stdout
    assert SSN not in seen and EMAIL not in seen and "Patient" in seen


@needs_tools("tesseract")
async def test_raster_preview_is_redacted_before_it_is_flattened(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    make_plain(source := tmp_path / "plain.pdf")
    policy = policies.resolve("preview", job_overrides(redact=["ssn", "email"]))
    status = await wait_terminal(jobs, (await jobs.submit(source, named(jobs, policy), key="redact-preview")).job_id)
    assert status.state is JobState.SUCCEEDED, status
    out = tmp_path / "out.pdf"
    await jobs.fetch(status.job_id, out)
    subprocess.run(["pdftoppm", "-r", "300", "-png", "-singlefile", str(out), str(tmp_path / "page")], check=True)
    seen = subprocess.run(
        ["tesseract", str(tmp_path / "page.png"), "-"], capture_output=True, text=True, check=True
    ).stdout
    assert "Patient" in seen  # the neighbours are pixels now (the pale stamp is not reliably OCR'd)
    assert subprocess.run(["pdftotext", str(out), "-"], capture_output=True, text=True).stdout.strip() == ""
    assert SSN not in seen and EMAIL not in seen  # and the values were gone before they became pixels


async def test_patterns_on_pixels_without_ocr_fail_fast_but_regions_work(
    jobs: JobClient, policies: PolicyBook, tmp_path: Path
) -> None:
    FIXTURES["scanned"].make(source := tmp_path / "scanned.pdf")
    by_pattern = policies.resolve("standard", job_overrides(redact=["ssn"]))
    status = await wait_terminal(jobs, (await jobs.submit(source, named(jobs, by_pattern), key="redact-blind")).job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "redaction.needs_ocr"), status
    assert status.failure_message is not None and "page(s) 1 " in status.failure_message

    by_region = policies.resolve("standard", job_overrides(redact_regions=["1:0,0,612,400"]))  # the page's lower part
    status = await wait_terminal(jobs, (await jobs.submit(source, named(jobs, by_region), key="redact-pixels")).job_id)
    assert status.state is JobState.SUCCEEDED, status
    assert status.redaction is not None and status.redaction.pages[0].images_redacted == 1
