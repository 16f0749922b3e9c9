"""Long-term signatures end to end (issue 40): real jobs on a real worker signing with certomancer's PKI on loopback
(tests/fixtures/test_pki.py: CA, OCSP responder, CRLs, TSA), the policy asking `sign.level`.

A `b-lta` job's release validates in pyHanko's AdES LTA validation and in pdfsig, and its simulated validation past
the signer's expiry passes; the same simulation of a `b-t` job's release fails. A revoked signer is refused at sign
time, and so is an unreachable OCSP responder once the retries are spent; a worker asked a level it cannot make does
not start."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509

from docjobs.domain.models import ADES_PASSED
from docjobs.domain.policy import Policy, SignLevel, SignPolicy
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.signing.config import SignerConfig, TrustAnchors
from docjobs.signing.long_term_verify import long_term_verdict
from docjobs.temporal.client import JobClient
from tests.conftest import Env, StartWorker, wait_terminal
from tests.fixtures.policy_files import name_policy
from tests.fixtures.test_pki import SIGNER_DAYS, TestPki, TestSigner, serving_test_pki

TENANT = "archivist"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestPki]:
    with serving_test_pki(tmp_path_factory.mktemp("pki")) as served:
        yield served


def signing_env(pki: TestPki, signer: TestSigner, policy_file: Path) -> dict[str, str]:
    """A worker signing as `signer`, with the PKI's TSA and revocation services, reading `policy_file`."""
    return {
        "DOCJOBS_SIGNING_KEY": str(signer.key),
        "DOCJOBS_SIGNING_CERT": str(signer.cert),
        "DOCJOBS_SIGNING_CHAIN": str(signer.chain),
        "DOCJOBS_TRUST_ROOTS": str(signer.root),
        "DOCJOBS_TSA_URL": pki.tsa_url,
        "DOCJOBS_REVOCATION_URLS": ",".join(pki.revocation_urls),
        "DOCJOBS_POLICY_FILE": str(policy_file),
    }


@dataclass
class Desk:
    """This module's own policy file (its workers sign at levels the session's workers cannot make, and a worker
    refuses to start on a file with such a policy, so none may reach the session's file) and its signing workers."""

    jobs: JobClient
    env: Env
    start_worker: StartWorker
    standard: Policy
    policy_file: Path

    def policy(self, level: SignLevel, policy_file: Path | None = None) -> str:
        """The name, in `policy_file` (this module's), of the standard policy signing at `level`."""
        signing = SignPolicy(enabled=True, level=level)
        return name_policy(policy_file or self.policy_file, self.standard.model_copy(update={"sign": signing}))

    def queue(self, queue: str, pki: TestPki, signer: TestSigner, **extra: str) -> JobClient:
        """Start a worker on `queue` signing as `signer` with `pki`'s services (`extra`: more of its environment);
        a client of that queue."""
        self.start_worker(queue, **{**signing_env(pki, signer, self.policy_file), **extra})
        settings = self.env.settings(DOCJOBS_TASK_QUEUE=queue, DOCJOBS_POLICY_FILE=str(self.policy_file))
        return JobClient(self.jobs.client, settings)


@pytest.fixture
def desk(
    jobs: JobClient, env: Env, start_worker: StartWorker, policies: PolicyBook, tmp_path_factory: pytest.TempPathFactory
) -> Desk:
    own = tmp_path_factory.mktemp("long-term-policies") / "policies.toml"
    shutil.copyfile(env.settings().policy_file, own)
    return Desk(jobs, env, start_worker, policies.get("standard"), own)


def trust(signer: TestSigner) -> TrustAnchors:
    return TrustAnchors.of(SignerConfig(trust_roots=(signer.root,), key_path=signer.key, cert_path=signer.cert))


async def test_a_b_lta_job_validates_now_and_past_the_signers_expiry_and_a_b_t_job_does_not(
    jobs: JobClient, desk: Desk, samples: Path, pki: TestPki, tmp_path: Path
) -> None:
    on_queue = desk.queue("docjobs-long-term", pki, pki.signer)
    archive, timestamped = desk.policy(SignLevel.B_LTA), desk.policy(SignLevel.B_T)
    archived, stamped = await asyncio.gather(
        on_queue.submit(samples / "sample.pdf", archive, tenant=TENANT, key="b-lta"),
        on_queue.submit(samples / "sample.pdf", timestamped, tenant=TENANT, key="b-t"),
    )
    signer = x509.load_pem_x509_certificate(pki.signer.cert.read_bytes())

    # The archive: B-LTA by the worker's own verify stage, and again here on the released bytes, by pyHanko's AdES
    # LTA validation now and simulated a day past the signer's expiry, then ten years past it.
    status = await wait_terminal(jobs, archived.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    assert status.signature is not None and status.signature.level == "B-LTA"
    recorded = status.signature.long_term
    assert recorded is not None and (recorded.ades, recorded.future_ades) == (ADES_PASSED, ADES_PASSED)
    assert recorded.future_at is not None and recorded.future_at > signer.not_valid_after_utc
    released = tmp_path / "b-lta.pdf"
    await on_queue.fetch(archived.job_id, released)
    verdict = await asyncio.to_thread(long_term_verdict, released, trust(pki.signer), archival=True)
    assert (verdict.level, verdict.ades, verdict.future_ades) == ("B-LTA", ADES_PASSED, ADES_PASSED)
    later = pki.now + timedelta(days=SIGNER_DAYS + 3650)
    decade = await asyncio.to_thread(long_term_verdict, released, trust(pki.signer), archival=True, future=later)
    assert decade.future_ades == ADES_PASSED
    said = subprocess.run(["pdfsig", "-nocert", str(released)], capture_output=True, text=True, check=False).stdout
    signature, timestamp = said.split("Signature #2:")
    assert "Signature Validation: Signature is Valid." in signature and "Not total document signed" in signature
    # poppler reads the document timestamp over the whole file; it does not validate RFC 3161 timestamps
    assert "Common Name: tsa" in timestamp and "Total document signed" in timestamp

    # The B-T release: valid today, but nothing in it proves it once the signer's certificate has expired.
    status = await wait_terminal(jobs, stamped.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    assert status.signature is not None and status.signature.level == "B-T" and status.signature.long_term is None
    released = tmp_path / "b-t.pdf"
    await on_queue.fetch(stamped.job_id, released)
    verdict = await asyncio.to_thread(long_term_verdict, released, trust(pki.signer), archival=True)
    assert verdict.level == "B-T" and verdict.future_ades != ADES_PASSED and not verdict.passed(archival=True)


async def test_a_revoked_signer_and_an_unreachable_responder_are_refused_at_sign_time(
    jobs: JobClient, desk: Desk, samples: Path, pki: TestPki, tmp_path_factory: pytest.TempPathFactory
) -> None:
    archive = desk.policy(SignLevel.B_LT)
    revoked = desk.queue("docjobs-revoked-signer", pki, pki.revoked)
    # A second PKI, whose services are stopped before the job: its OCSP responder and CRLs answer nobody.
    with serving_test_pki(tmp_path_factory.mktemp("gone-pki")) as gone:
        pass
    unreachable = desk.queue("docjobs-no-responder", gone, gone.signer, DOCJOBS_MAX_ATTEMPTS="2")
    first, second = await asyncio.gather(
        revoked.submit(samples / "sample.pdf", archive, tenant=TENANT, key="revoked-signer"),
        unreachable.submit(samples / "sample.pdf", archive, tenant=TENANT, key="no-responder"),
    )
    status = await wait_terminal(jobs, first.job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "signature.signer_revoked")
    status = await wait_terminal(jobs, second.job_id)
    assert (status.state, status.failure_code) == (JobState.FAILED, "signature.revocation_unavailable")
    assert status.attempts.get("sign") == 2, status.attempts  # retried, as a transient failure is, then given up


def test_a_worker_asked_a_level_it_cannot_make_does_not_start(desk: Desk, pki: TestPki, tmp_path: Path) -> None:
    asks = tmp_path / "policies.toml"
    shutil.copyfile(desk.policy_file, asks)
    desk.policy(SignLevel.B_LTA, asks)
    no_revocation = {**signing_env(pki, pki.signer, asks), "DOCJOBS_REVOCATION_URLS": ""}
    for overrides, missing in (
        ({"DOCJOBS_POLICY_FILE": str(asks)}, "DOCJOBS_TSA_URL"),
        (no_revocation, "DOCJOBS_REVOCATION_URLS"),
    ):
        with pytest.raises(RuntimeError, match="worker did not start") as refused:
            desk.start_worker("docjobs-unsignable", **overrides)
        assert "asks sign.level b-lta" in str(refused.value) and missing in str(refused.value)
