"""No document content anywhere: one marker per run, in a document's page text, Info dictionary, XMP metadata
and file name, must not appear in anything docjobs writes about the jobs that processed it.

Three real jobs on a worker with JSON logs, metrics and encrypted history: one that succeeds, one that fails on
a malformed file, one that redacts the marker. Then every log line, operator view (CLI and API), history
payload (decoded, and raw as the server holds it), metrics scrape and evidence envelope is searched. The first
job's released artifact still holds the marker: the search would have seen it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import uuid
from pathlib import Path

import httpx
import pikepdf
from pikepdf import Name
from temporalio.api.history.v1 import History
from temporalio.client import Client

from docjobs.api.app import create_app
from docjobs.domain.job_status import JobStatus
from docjobs.domain.sealing import CodecKey
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook, job_overrides
from docjobs.settings.tenants import TenantBook, add_tenant
from docjobs.temporal.client import JobClient, connect
from tests.conftest import (
    Env,
    StartWorker,
    free_port,
    history_payload_text,
    starter,
    unsealed_payloads,
    wait_terminal,
)
from tests.fixtures.policy_files import named
from tests.fixtures.samples import make_sample_pdf
from tests.test_codec import entry
from tests.test_metrics import assert_no_identity_in_labels, scrape_until, total
from tests.test_redact_jobs import assert_nothing_left, extracted_texts

MARKER_REGEX = r"MRK[0-9a-f]{12}"


def make_marked_pdf(path: Path, marker: str) -> None:
    """A one-page sample with the marker in its page text and in every common metadata field."""
    make_sample_pdf(path, pages=1, marker=marker)  # the page text and the Info Title
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        for field in (Name.Author, Name.Subject, Name.Keywords):
            pdf.docinfo[field] = pikepdf.String(f"about {marker}")
        with pdf.open_metadata(set_pikepdf_as_editor=False, update_docinfo=False) as meta:
            meta["dc:title"] = marker
            meta["dc:description"] = f"about {marker}"
        pdf.save(path)


async def submit_through_api(jobs: JobClient, document: Path, tenants: Path) -> tuple[str, list[str]]:
    """The malformed document uploaded as multipart with its own file name; the job ID and the API's answers."""
    key = add_tenant(tenants, "marker")
    app = create_app(jobs.settings, jobs, tenants=TenantBook(tenants))
    auth = {"Authorization": f"Bearer {key}", "Idempotency-Key": f"no-content-{uuid.uuid4().hex[:8]}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as http:
        files = {"file": (document.name, document.read_bytes(), "application/pdf")}
        accepted = await http.post("/v1/jobs", files=files, data={"policy": '{"name": "standard"}'}, headers=auth)
        assert accepted.status_code == 202, accepted.text
        job_id = str(accepted.json()["job_id"])
        await wait_terminal(jobs, job_id)
        shown = await http.get(f"/v1/jobs/{job_id}", headers=auth)
        assert shown.status_code == 200, shown.text
    return job_id, [accepted.text, shown.text]


async def test_the_marker_appears_nowhere_but_in_the_released_text(
    env: Env, start_worker: StartWorker, policies: PolicyBook, tmp_path: Path
) -> None:
    marker = f"MRK{uuid.uuid4().hex[:12]}"
    run = uuid.uuid4().hex[:8]  # job keys and queue: unrelated to the marker
    queue, port = f"no-content-{run}", free_port()
    overrides = {
        "DOCJOBS_CODEC_KEYS": entry(CodecKey("no-content", os.urandom(32))),
        "DOCJOBS_TASK_QUEUE": queue,
    }
    worker = start_worker(queue, "--log-format", "json", "--metrics-port", str(port), **overrides)
    settings = env.settings(**overrides)
    coded = Env({**env.vars, **overrides})  # the CLI's environment: the worker's queue and codec keys
    jobs = JobClient(await connect(settings), settings)
    (folder := tmp_path / marker).mkdir()
    source = folder / f"{marker}.pdf"
    make_marked_pdf(source, marker)
    malformed = folder / f"{marker}-broken.pdf"
    # A broken object holding the marker, then cut off: qpdf would repair a broken object in a whole file (and
    # the job would succeed), but nothing repairs a file whose end is missing.
    data = source.read_bytes()
    broken = f"\n99 0 obj << /Title ({marker}) /Kids [ >> endobj\n".encode()
    malformed.write_bytes(data[: len(data) // 3] + broken + data[len(data) // 3 : 2 * len(data) // 3])
    operator_views: list[str] = []

    # 1. Standard (structure watermark, signed) through the CLI, which is given the marked file name.
    submitted = starter(coded, "submit", str(source), "--key", f"no-content-ok-{run}")
    assert submitted.returncode == 0, submitted.stderr
    operator_views += [submitted.stdout, submitted.stderr]
    good = json.loads(submitted.stdout.splitlines()[-1])["job_id"]
    # 3. The marker redacted by a custom regex, through the client.
    redacting = policies.resolve("standard", job_overrides(redact=[MARKER_REGEX]))
    redacted = (await jobs.submit(source, named(jobs, redacting), key=f"no-content-redact-{run}")).job_id
    # 2. A malformed file through the HTTP API (multipart: the API sees its file name).
    failed, api_answers = await submit_through_api(jobs, malformed, tmp_path / "tenants.json")
    operator_views += api_answers

    statuses: dict[str, JobStatus] = {}
    for job_id in (good, failed, redacted):
        statuses[job_id] = await wait_terminal(jobs, job_id)
        await jobs.handle(job_id).result()  # the wrap-up (evidence, clean-up) has run too
    assert statuses[good].state is JobState.SUCCEEDED, statuses[good]
    assert statuses[good].signature is not None and statuses[good].watermark_mode == "structure"
    assert (statuses[failed].state, statuses[failed].failure_code) == (JobState.FAILED, "input.malformed")
    summary = statuses[redacted].redaction
    assert statuses[redacted].state is JobState.SUCCEEDED and summary is not None, statuses[redacted]
    assert sum(page.matches.get("custom1", 0) for page in summary.pages) >= 1, summary
    assert summary.document.get("metadata", 0) >= 1, summary
    operator_views += [status.model_dump_json() for status in statuses.values()]

    async def views_of(job_id: str) -> list[str]:
        envelope = tmp_path / f"evidence-{uuid.uuid4().hex}.json"
        commands = [["status", job_id], ["audit", job_id], ["timeline", job_id]]
        commands.append(["evidence", job_id, "-o", str(envelope)])
        done = await asyncio.gather(*(asyncio.to_thread(starter, coded, *command) for command in commands))
        assert [run.returncode for run in done] == [0] * len(done), [run.stderr for run in done]
        statement = base64.b64decode(json.loads(envelope.read_text())["payload"]).decode()  # DSSE: base64 inside
        return [text for run in done for text in (run.stdout, run.stderr)] + [envelope.read_text(), statement]

    for job_id in statuses:
        operator_views += await views_of(job_id)
    assert any('"redaction"' in view and "custom1" in view for view in operator_views)  # the views were read
    leaking_views = [view[max(0, view.index(marker) - 200) :][:300] for view in operator_views if marker in view]
    assert leaking_views == [], leaking_views

    plain = await Client.connect(settings.address, namespace=settings.namespace)  # no codec: the server's view
    for job_id in statuses:
        assert marker not in await history_payload_text(jobs.client, job_id), job_id
        raw = History(events=(await plain.get_workflow_handle(job_id).fetch_history()).events)
        assert unsealed_payloads(raw) == [], job_id
        assert marker.encode() not in raw.SerializeToString(), job_id

    samples = await scrape_until(port, lambda found: total(found, "docjobs_jobs_terminal") >= 3)
    assert total(samples, "docjobs_jobs_terminal") == 3
    assert_no_identity_in_labels(samples, marker)

    worker.stop()
    output = worker.log_path.read_text()
    lines = [json.loads(line) for line in output.splitlines()]  # every line is one JSON object
    assert any(line.get("job_id") == failed for line in lines)  # the failure was logged, by job
    assert marker not in output

    released = tmp_path / "released.pdf"
    await jobs.fetch(good, released)
    assert marker in extracted_texts(released)["pdftotext"]  # the search above would have seen it
    await jobs.fetch(redacted, redacted_pdf := tmp_path / "redacted.pdf")
    assert_nothing_left(redacted_pdf, (marker,))
    assert subprocess.run(["qpdf", "--check", str(redacted_pdf)], capture_output=True).returncode == 0
