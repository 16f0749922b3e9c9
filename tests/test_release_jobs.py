"""Release gates end to end: a succeeded job is signed, verified and checked against its contract."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

from docjobs.domain.policy import Policy
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.signing.config import cert_pem, key_pem
from docjobs.signing.dev_ca import ensure_dev_signer, issue_signer, make_ca
from docjobs.signing.evidence import envelope_evidence
from docjobs.temporal.client import JobClient
from tests.conftest import FAULT_WORKER, REPO, Env, StartWorker, run_starter, wait_terminal
from tests.fixtures.policy_files import named
from tests.test_jobs import job_files


def pdfsig(path: Path) -> str:
    """poppler's independent verifier; it exits 0 even on a digest mismatch, so its words are what count."""
    return subprocess.run(["pdfsig", "-nocert", str(path)], capture_output=True, text=True).stdout


async def test_succeeded_means_signed_verified_and_checked(
    jobs: JobClient, policies: PolicyBook, samples: Path, tmp_path: Path
) -> None:
    submitted = await jobs.submit(samples / "sample.pdf", "standard", key="release-ok")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status
    assert status.signature is not None
    assert status.signature.bottom_line is True and status.signature.coverage == "entire_file"
    assert "DEVELOPMENT ONLY" in str(status.signature.signer_subject)
    assert {"page_count", "geometry", "links", "qpdf_check", "second_reader", "text_kept"} <= set(
        status.fidelity_checks
    )
    assert "watermark_every_page" in status.fidelity_checks
    out = tmp_path / "signed.pdf"
    await jobs.fetch(submitted.job_id, out)
    report = pdfsig(out)
    assert "Signature Validation: Signature is Valid." in report
    assert "Total document signed" in report and "Not total document signed" not in report


async def test_a_visible_signature_is_released_with_the_stamp_the_worker_drew(
    jobs: JobClient, policies: PolicyBook, samples: Path, tmp_path: Path
) -> None:
    """The sign child draws the stamp in its sandbox; the release gate finds it is the one the worker draws for its
    certificate and the signing time (the children's clock is UTC whatever the worker's zone), and signs."""
    body = policies.get("standard").model_dump()
    body["sign"]["visible"] = True
    submitted = await jobs.submit(
        samples / "sample.pdf", named(jobs, Policy.model_validate(body)), key="release-visible"
    )
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    assert status.signature is not None and status.signature.bottom_line is True
    out = tmp_path / "signed.pdf"
    await jobs.fetch(submitted.job_id, out)
    assert (
        "Digitally signed by docjobs DEVELOPMENT ONLY signer"
        in subprocess.run(
            ["pdftotext", "-f", "1", "-l", "1", str(out), "-"], capture_output=True, text=True, check=True
        ).stdout
    )
    assert "Signature Validation: Signature is Valid." in pdfsig(out)


async def test_no_sign_skips_the_signature_but_not_the_checks(
    jobs: JobClient, policies: PolicyBook, samples: Path
) -> None:
    body = policies.get("standard").model_dump()
    body["sign"]["enabled"] = False
    submitted = await jobs.submit(
        samples / "sample.pdf", named(jobs, Policy.model_validate(body)), key="release-unsigned"
    )
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status
    assert status.signature is None and "sign" not in status.attempts
    assert "page_count" in status.fidelity_checks


async def test_untrusted_signer_is_quarantined(
    jobs: JobClient, env: Env, policies: PolicyBook, samples: Path, start_worker: StartWorker, tmp_path: Path
) -> None:
    ca_key, ca_cert = make_ca("some other CA")
    key, cert = issue_signer(ca_key, ca_cert, "a signer nobody here trusts")
    (tmp_path / "key.pem").write_bytes(key_pem(key))
    (tmp_path / "cert.pem").write_bytes(cert_pem(cert))
    trusted = ensure_dev_signer(Path(env.vars["DOCJOBS_DATA_DIR"]) / "signing").trust_roots
    queue = "docjobs-untrusted"
    start_worker(
        queue,
        DOCJOBS_SIGNING_KEY=str(tmp_path / "key.pem"),
        DOCJOBS_SIGNING_CERT=str(tmp_path / "cert.pem"),
        DOCJOBS_TRUST_ROOTS=":".join(str(path) for path in trusted),
    )
    on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    submitted = await on_queue.submit(samples / "sample.pdf", "standard", key="release-untrusted")
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.QUARANTINED, "signature.untrusted"), status
    # nothing released, nothing staged left
    assert job_files(env, submitted.job_id) == ["commitment.salt", "evidence.json", "run.json"]


async def test_fidelity_failure_is_quarantined_and_nothing_promoted(
    jobs: JobClient, env: Env, policies: PolicyBook, samples: Path, start_worker: StartWorker
) -> None:
    queue = "docjobs-faulty"
    start_worker(queue, script=FAULT_WORKER)
    on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    submitted = await on_queue.submit(samples / "sample.pdf", "standard", key="release-faulty")
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.QUARANTINED, "fidelity.page_count"), status
    assert status.output_sha256 is None
    # only the signed record of the outcome
    assert job_files(env, submitted.job_id) == ["commitment.salt", "evidence.json", "run.json"]
    # the release gate, before anything is signed, finds it first (verify would, too: see test_fidelity)
    assert status.failure_message == "the release gate counts another number of pages than render did"
    assert "verify" not in status.attempts


async def test_evidence_is_signed_and_names_the_broken_binding(
    jobs: JobClient, env: Env, policies: PolicyBook, samples: Path, tmp_path: Path
) -> None:
    submitted = await jobs.submit(samples / "sample.pdf", "standard", key="signed-evidence")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED and status.evidence_key, status
    assert run_starter(env, "verify-evidence", submitted.job_id)[:2] == (
        0,
        {"job_id": submitted.job_id, "ok": True, "broken": [], "problem": None},
    )

    envelope, artifact = tmp_path / "evidence.json", tmp_path / "artifact.pdf"
    assert run_starter(env, "evidence", submitted.job_id, "-o", str(envelope))[0] == 0
    await jobs.fetch(submitted.job_id, artifact)
    evidence = envelope_evidence(envelope.read_bytes())
    salt = bytes.fromhex(status.commitment_salt or "")  # the tenant's: the commitments check with it alone
    assert evidence.binds("job", submitted.job_id, salt) and evidence.terminal_state == "succeeded"
    assert evidence.output_sha256 == status.output_sha256 and evidence.binds("source", status.input_sha256, salt)
    assert not evidence.binds("source", status.input_sha256, bytes(32))
    elsewhere = ("verify-evidence", "--evidence", str(envelope), "--artifact", str(artifact))
    assert run_starter(env, *elsewhere)[0] == 0
    source = tmp_path / "source"
    source.write_bytes((Path(env.vars["DOCJOBS_DATA_DIR"]) / "blobs" / "sources" / status.input_sha256).read_bytes())
    code, result, _ = run_starter(env, *elsewhere, "--source", str(source))  # no salt: no proof of the input
    assert (code, result["broken"]) == (1, ["input_sha256"])
    assert run_starter(env, *elsewhere, "--source", str(source), "--salt", status.commitment_salt or "")[0] == 0

    forged = json.loads(envelope.read_bytes())
    statement = json.loads(base64.b64decode(forged["payload"]))
    statement["predicate"]["terminal_state"] = "failed"
    forged["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    code, result, _ = run_starter(env, "verify-evidence", "--evidence", str(tmp_path / "forged.json"))
    broken = result["broken"]
    assert code == 1 and isinstance(broken, list) and "signature" in broken

    stored = Path(env.vars["DOCJOBS_DATA_DIR"]) / "blobs" / str(status.artifact_key)
    flipped = bytearray(stored.read_bytes())
    flipped[200] ^= 0x01  # inside the first revision: covered by the signature
    stored.write_bytes(bytes(flipped))
    code, result, _ = run_starter(env, "verify-evidence", submitted.job_id)
    assert (code, result["broken"]) == (1, ["output_sha256"])
    assert "Signature is Valid." not in pdfsig(stored)


def receivers_check(folder: Path) -> subprocess.CompletedProcess[str]:
    """The receiver's check of docs/release-gates.md (python3's standard library, openssl, no docjobs), in `folder`."""
    page = (REPO / "docs" / "release-gates.md").read_text()
    block = re.search(r"```sh\n(# check_docjobs_evidence.*?)```", page, re.DOTALL)
    assert block is not None, "the evidence check of docs/release-gates.md is missing"
    return subprocess.run(["bash", "-e", "-c", block[1]], cwd=folder, capture_output=True, text=True)


async def test_a_receiver_verifies_the_evidence_with_standard_tools(
    jobs: JobClient, env: Env, policies: PolicyBook, samples: Path, tmp_path: Path
) -> None:
    """A released job's DSSE envelope, checked by an independent implementation: OpenSSL verifies the signature
    over the PAE bytes with the certificate's key and the certificate against the CA; sha256sum the artifact."""
    submitted = await jobs.submit(samples / "sample.pdf", "standard", key="evidence-receiver")
    assert (await wait_terminal(jobs, submitted.job_id)).state is JobState.SUCCEEDED
    assert run_starter(env, "evidence", submitted.job_id, "-o", str(tmp_path / "evidence.json"))[0] == 0
    await jobs.fetch(submitted.job_id, tmp_path / "artifact.pdf")
    ca = ensure_dev_signer(Path(env.vars["DOCJOBS_DATA_DIR"]) / "signing").trust_roots[0]
    shutil.copy(ca, tmp_path / "ca.pem")

    checked = receivers_check(tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "Verified OK" in checked.stdout and "artifact.pdf: OK" in checked.stdout

    released = (tmp_path / "artifact.pdf").read_bytes()
    (tmp_path / "artifact.pdf").write_bytes(released[:-1] + bytes([released[-1] ^ 1]))
    assert receivers_check(tmp_path).returncode != 0  # another PDF than the one the evidence names
    (tmp_path / "artifact.pdf").write_bytes(released)
    envelope = json.loads((tmp_path / "evidence.json").read_bytes())
    body = base64.b64decode(envelope["payload"]).replace(b'"succeeded"', b'"failed"')
    (tmp_path / "evidence.json").write_text(json.dumps(envelope | {"payload": base64.b64encode(body).decode()}))
    refused = receivers_check(tmp_path)
    assert refused.returncode != 0 and "Verified OK" not in refused.stdout  # a forged statement


async def test_signed_input_fails_unless_the_policy_allows_it(
    jobs: JobClient, policies: PolicyBook, samples: Path, tmp_path: Path
) -> None:
    first = await jobs.submit(samples / "sample.pdf", "standard", key="to-be-resigned")
    assert (await wait_terminal(jobs, first.job_id)).state is JobState.SUCCEEDED
    signed = tmp_path / "already-signed.pdf"
    await jobs.fetch(first.job_id, signed)

    refused = await jobs.submit(signed, "standard", key="signed-input")
    status = await wait_terminal(jobs, refused.job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "input.signed"), status
    assert status.attempts == {"render": 1}

    body = policies.get("standard").model_dump()
    body["sign"]["allow_signed_input"] = True
    allowed = await jobs.submit(signed, named(jobs, Policy.model_validate(body)), key="signed-input-allowed")
    status = await wait_terminal(jobs, allowed.job_id)
    assert status.state is JobState.SUCCEEDED, status
    assert status.invalidated_signatures == 1
