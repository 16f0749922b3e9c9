"""The signing key never reaches a document child, end to end: real jobs on a real worker whose `sign` child
records what it was given (tests/faults/spy_sign.py) or lies about the byte range (tests/faults/forge_byte_range.py).

The released signature must still validate with poppler's `pdfsig` and with pyHanko, name the tenant who asked
(the /Reason and a signed attribute) and lock the document (DocMDP P1)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from docjobs.domain.states import JobState
from docjobs.isolation.tenant_pools import tenant_root
from docjobs.settings.policies import PolicyBook
from docjobs.signing.config import SignerConfig, TrustAnchors, cert_pem
from docjobs.signing.dev_ca import issue_signer, make_ca
from docjobs.signing.evidence import envelope_evidence, verify_evidence
from docjobs.signing.verify import failure_code, verify_pdf
from docjobs.temporal.client import JobClient
from tests.conftest import FAULT_WORKER, Env, StartWorker, wait_terminal
from tests.faults.spy_sign import SPY_FOLDER
from tests.sandbox_view import sandbox_view
from tests.test_jobs import job_files

PASSPHRASE = "correct horse battery staple 7f3a"
TENANT = "clinic-north"


@pytest.fixture(scope="module")
def p12_signer(tmp_path_factory: pytest.TempPathFactory) -> tuple[SignerConfig, bytes]:
    """A signer kept as a passphrase-protected PKCS#12 (the production shape), with its own CA; the PEM of its
    private key (unencrypted), which must appear in no child."""
    folder = tmp_path_factory.mktemp("p12-signer")
    ca_key, ca_cert = make_ca("release test CA")
    key, cert = issue_signer(ca_key, ca_cert, "release test signer")
    (folder / "ca.pem").write_bytes(cert_pem(ca_cert))
    (folder / "signer.p12").write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"signer", key, cert, None, serialization.BestAvailableEncryption(PASSPHRASE.encode())
        )
    )
    config = SignerConfig(trust_roots=(folder / "ca.pem",), p12_path=folder / "signer.p12", p12_passphrase=PASSPHRASE)
    key_der = key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return config, key_der


def worker_env(config: SignerConfig) -> dict[str, str]:
    assert config.p12_path is not None and config.p12_passphrase is not None
    return {
        "DOCJOBS_SIGNING_P12": str(config.p12_path),
        "DOCJOBS_SIGNING_P12_PASSPHRASE": config.p12_passphrase,
        "DOCJOBS_TRUST_ROOTS": ":".join(str(root) for root in config.trust_roots),
    }


def pdfsig(path: Path) -> str:
    return subprocess.run(["pdfsig", "-nocert", str(path)], capture_output=True, text=True, check=False).stdout


async def test_the_key_never_reaches_the_sign_child(
    jobs: JobClient,
    env: Env,
    policies: PolicyBook,
    samples: Path,
    start_worker: StartWorker,
    tmp_path: Path,
    p12_signer: tuple[SignerConfig, bytes],
) -> None:
    config, key_der = p12_signer
    queue = "docjobs-spy-sign"
    spy = start_worker(queue, script=FAULT_WORKER, DOCJOBS_FAULT="spy-sign", **worker_env(config))
    on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    submitted = await on_queue.submit(samples / "sample.pdf", "standard", tenant=TENANT, key="key-out-of-reach")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status

    # What the sign child was given: a certificate, a hole size and the tenant; the verify child: certificates.
    # The spy's folder is in its tenant's work root, the root of the tenant's sandbox (a tmpfs of its own there).
    root = tenant_root(env.settings().work_dir / "general", TENANT)
    spied = sandbox_view(spy.process.pid, root / SPY_FOLDER)
    (sign_record,) = spied.glob("sign-*.json")
    (verify_record,) = spied.glob("verify-*.json")
    work = json.loads(sign_record.read_text())["work"]
    assert set(work) == {
        "source", "output", "certificate_pem", "bytes_reserved", "tenant", "visible", "allow_signed_input", "stamp_box"
    }  # fmt: skip
    assert work["tenant"] == TENANT and "BEGIN CERTIFICATE" in work["certificate_pem"]
    checked = json.loads(verify_record.read_text())["work"]
    assert set(checked["trust"]) == {"roots_pem", "chain_pem"} and checked["tenant"] == TENANT
    for record_file in (sign_record, verify_record):
        environ = json.loads(record_file.read_text())["environ"]
        assert not [name for name in environ if name.startswith(("DOCJOBS_SIGNING", "DOCJOBS_TRUST", "AWS_"))]
        seen = record_file.read_bytes()
        assert PASSPHRASE.encode() not in seen and b"PRIVATE KEY" not in seen
        assert str(config.p12_path).encode() not in seen  # not even where the key is
        assert key_der.hex().encode() not in seen.lower() and key_der[-48:] not in seen

    # The signature the worker made: valid for poppler and pyHanko, naming the tenant, locking the document.
    assert status.signature is not None and status.signature.tenant == TENANT and status.signature.docmdp == 1
    released = tmp_path / "released.pdf"
    await jobs.fetch(submitted.job_id, released)
    said = pdfsig(released)
    assert "Signature Validation: Signature is Valid." in said and "Total document signed" in said
    assert "release test signer" in said
    report = await asyncio.to_thread(verify_pdf, released, TrustAnchors.of(config))  # pyHanko runs its own loop
    assert failure_code(report) is None and report.bottom_line and report.coverage == "entire_file"
    assert report.tenant == TENANT and report.reason == f"docjobs release for tenant {TENANT}"
    assert report.docmdp == 1 and report.modification_level == "none"

    # The evidence names the same tenant, and verifies (signed by the worker with the same key).
    envelope = tmp_path / "evidence.json"
    await jobs.evidence(submitted.job_id, envelope)
    recorded = envelope_evidence(envelope.read_bytes())
    assert recorded.tenant == TENANT and recorded.signature is not None
    assert (recorded.signature["tenant"], recorded.signature["docmdp"]) == (TENANT, 1)
    check = await asyncio.to_thread(verify_evidence, envelope.read_bytes(), config, artifact=released)
    assert check.ok, check


async def test_a_forged_byte_range_is_refused(
    jobs: JobClient,
    env: Env,
    samples: Path,
    start_worker: StartWorker,
    p12_signer: tuple[SignerConfig, bytes],
) -> None:
    config, _ = p12_signer
    queue = "docjobs-forge-range"
    start_worker(queue, script=FAULT_WORKER, DOCJOBS_FAULT="forge-byte-range", **worker_env(config))
    on_queue = JobClient(jobs.client, env.settings(DOCJOBS_TASK_QUEUE=queue))
    submitted = await on_queue.submit(samples / "sample.pdf", "standard", tenant=TENANT, key="forged-range")
    status = await wait_terminal(jobs, submitted.job_id)
    assert (status.state, status.failure_code) == (JobState.QUARANTINED, "signature.byte_range"), status
    assert status.attempts.get("sign") == 1 and "verify" not in status.attempts  # refused at once, never retried
    assert status.output_sha256 is None
    # nothing signed was staged or kept
    assert job_files(env, submitted.job_id) == ["commitment.salt", "evidence.json", "run.json"]
