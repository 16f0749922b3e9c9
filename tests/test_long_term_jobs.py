"""Long-term signatures end to end (issue 40): real jobs on a real worker signing with certomancer's PKI on loopback
(tests/fixtures/test_pki.py: CA, OCSP responder, CRLs, TSA), the policy asking `sign.level`.

A `b-lta` job's release validates in pyHanko's AdES LTA validation and in pdfsig, and its simulated validation past
the signer's expiry passes; the same simulation of a `b-t` job's release fails. A revoked signer is refused at sign
time, and so is an unreachable OCSP responder once the retries are spent; a worker asked a level it cannot make does
not start."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from docjobs.domain.archive import ARCHIVE_WORKFLOW, STATUS_QUERY, ArchiveState, ArchiveStatus, ArchiveVersion
from docjobs.domain.errors import FailureCode
from docjobs.domain.models import ADES_PASSED
from docjobs.domain.policy import Policy, SignLevel, SignPolicy
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook
from docjobs.signing.config import SignerConfig, TrustAnchors
from docjobs.signing.long_term_verify import long_term_verdict, validated_at
from docjobs.store.storage import archive_key
from docjobs.temporal.client import JobClient
from tests.conftest import FAULT_WORKER, REPO, Env, StartWorker, WorkerProcess, wait_terminal
from tests.fault_worker import Hold
from tests.fixtures.archives import archive_of, archive_status
from tests.fixtures.policy_files import name_policy
from tests.fixtures.test_pki import SHORT_TSA_DAYS, SIGNER_DAYS, TestPki, TestSigner, serving_test_pki
from tests.test_replay import replayer

TENANT = "archivist"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestPki]:
    with serving_test_pki(tmp_path_factory.mktemp("pki")) as served:
        yield served


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
        self.worker(queue, pki, signer, REPO / "worker.py", extra)
        settings = self.env.settings(DOCJOBS_TASK_QUEUE=queue, DOCJOBS_POLICY_FILE=str(self.policy_file))
        return JobClient(self.jobs.client, settings)

    def worker(
        self, queue: str, pki: TestPki, signer: TestSigner, script: Path, extra: dict[str, str]
    ) -> WorkerProcess:
        """Start a worker (`script`) on `queue` signing as `signer` with `pki`'s services; `extra`: more of its
        environment."""
        return self.start_worker(
            queue, script=script, **{**pki.worker_env(signer), "DOCJOBS_POLICY_FILE": str(self.policy_file), **extra}
        )


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
    no_revocation = {**pki.worker_env(), "DOCJOBS_POLICY_FILE": str(asks), "DOCJOBS_REVOCATION_URLS": ""}
    for overrides, missing in (
        ({"DOCJOBS_POLICY_FILE": str(asks)}, "DOCJOBS_TSA_URL"),
        (no_revocation, "DOCJOBS_REVOCATION_URLS"),
    ):
        with pytest.raises(RuntimeError, match="worker did not start") as refused:
            desk.start_worker("docjobs-unsignable", **overrides)
        assert "asks sign.level b-lta" in str(refused.value) and missing in str(refused.value)


async def test_an_archive_renews_by_itself_before_its_tsa_expires_and_outlives_its_job(
    jobs: JobClient, env: Env, desk: Desk, samples: Path, pki: TestPki, tmp_path: Path
) -> None:
    """A B-LTA job signed by a TSA whose certificate lives five days opens an archive due at once for renewal (the
    policy renews 30 days ahead). The archive renews on the queue of the deployment's archive workers, which use
    the long-lived TSA: the new version begins with the released bytes and still validates a day past the first
    TSA's expiry, where the release does not; its evidence names the version it extends; its next renewal is years
    away, and `starter.py archive` lists it and tells it."""
    renewals = "docjobs-archive-renewals"
    desk.queue(renewals, pki, pki.signer)
    on_queue = desk.queue(
        "docjobs-short-tsa", pki, pki.signer, DOCJOBS_TSA_URL=pki.short_tsa_url, DOCJOBS_ARCHIVE_TASK_QUEUE=renewals
    )
    submitted = await on_queue.submit(samples / "sample.pdf", desk.policy(SignLevel.B_LTA), tenant=TENANT, key="kept")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    released = tmp_path / "released.pdf"
    await on_queue.fetch(submitted.job_id, released)

    archive_id = await archive_of(jobs, TENANT, submitted.job_id)
    archive = await archive_status(jobs, archive_id, versions=2)
    first, second = archive.versions
    assert first.document.sha256 == status.output_sha256 and first.evidence is None  # the release, its job's evidence
    store = env.settings().blob_store()
    renewed = tmp_path / "v2.pdf"
    store.fetch(second.document, renewed, mismatch_code=FailureCode.ARTIFACT_DIGEST_MISMATCH)
    assert renewed.read_bytes().startswith(released.read_bytes())  # the released bytes are its exact prefix
    anchors = trust(pki.signer)
    expired = pki.now + timedelta(days=SHORT_TSA_DAYS + 1)
    assert await asyncio.to_thread(validated_at, released, anchors, expired) != ADES_PASSED
    assert await asyncio.to_thread(validated_at, renewed, anchors, expired) == ADES_PASSED
    assert second.evidence is not None
    with store.open(second.evidence.key) as envelope:
        stated = json.loads(base64.b64decode(json.loads(envelope.read())["payload"]))
    assert stated["previous"] == {"version": 1, "document_sha256": first.document.sha256}
    assert stated["document_sha256"] == second.document.sha256 and stated["archive_id"] == archive_id
    assert archive.renew_by > pki.now + timedelta(days=365) and archive.last_problem is None

    listed = starter(env, "archive", "list", "--tenant", TENANT)
    (row,) = [row for row in listed["archives"] if row["archive_id"] == archive_id]
    assert datetime.fromisoformat(row["next_renewal"]) == archive.renew_by  # what the Web UI shows too
    told = starter(env, "archive", "status", archive_id)
    assert [version["number"] for version in told["versions"]] == [1, 2]
    assert starter(env, "archive", "status", "archive/nobody/none", code=2)["error"] == "archive.unknown"

    # Anyone who reaches Temporal can start an archive: one of mallory's naming this archive's files gets nothing.
    forged = f"archive/mallory/forged/{archive_id.rsplit('/', 1)[1]}"
    stolen = ArchiveState(
        archive_id=forged,
        job_id="mallory/forged",
        tenant="mallory",
        versions=[second.model_copy(update={"number": 1})],
        renew_by=pki.now,
        renew_before_days=30,
        task_queue=renewals,
    )
    await jobs.client.start_workflow(ARCHIVE_WORKFLOW, stolen, id=forged, task_queue="docjobs-short-tsa")
    for _ in range(300):
        refused: ArchiveStatus = await jobs.client.get_workflow_handle(forged).query(
            STATUS_QUERY, result_type=ArchiveStatus
        )
        if refused.last_problem is not None:
            break
        await asyncio.sleep(0.2)
    assert (refused.last_problem, len(refused.versions)) == ("source.missing", 1)
    assert not store.exists(archive_key(forged, 2, ".json"))

    # Every run replays as it ran: the renewal that continued as new, its successor asleep, the refused forgery.
    runs = [execution.run_id async for execution in jobs.client.list_workflows(f"WorkflowId = '{archive_id}'")]
    handles = [jobs.client.get_workflow_handle(archive_id, run_id=run) for run in runs]
    assert len(handles) == 2
    for handle in [*handles, jobs.client.get_workflow_handle(forged)]:
        replayed = await replayer().replay_workflow(await handle.fetch_history(), raise_on_replay_failure=False)
        assert replayed.replay_failure is None, (handle.id, handle.run_id, replayed.replay_failure)


async def test_a_worker_killed_during_a_renewal_leaves_exactly_one_renewal(
    jobs: JobClient, env: Env, desk: Desk, samples: Path, pki: TestPki, tmp_path: Path
) -> None:
    """The renewal's worker is SIGKILLed once it has recorded the new version, before Temporal knows: the next
    attempt, on another worker once the lease lapsed, returns that version instead of making a second."""
    renewals, holds = "docjobs-archive-crash", tmp_path / "holds"
    holds.mkdir()
    doomed = desk.worker(
        renewals, pki, pki.signer, FAULT_WORKER, {"DOCJOBS_FAULT": "hold-renewal", "DOCJOBS_HOLD_DIR": str(holds)}
    )
    on_queue = desk.queue(
        "docjobs-short-tsa-crash",
        pki,
        pki.signer,
        DOCJOBS_TSA_URL=pki.short_tsa_url,
        DOCJOBS_ARCHIVE_TASK_QUEUE=renewals,
    )
    submitted = await on_queue.submit(samples / "sample.pdf", desk.policy(SignLevel.B_LTA), tenant=TENANT, key="crash")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    archive_id = await archive_of(jobs, TENANT, submitted.job_id)
    await asyncio.to_thread(Hold(holds, archive_id).wait, "v2.held")
    store = env.settings().blob_store()
    with store.open(archive_key(archive_id, 2, ".json")) as record:
        made = ArchiveVersion.model_validate_json(record.read())  # what the doomed attempt recorded
    doomed.kill()
    desk.worker(renewals, pki, pki.signer, REPO / "worker.py", {})  # a worker as any other takes it over
    archive = await archive_status(jobs, archive_id, versions=2)
    assert archive.versions[1] == made and not store.exists(archive_key(archive_id, 3, ".json"))
    await asyncio.sleep(1)
    handle = jobs.client.get_workflow_handle(archive_id)
    again: ArchiveStatus = await handle.query(STATUS_QUERY, result_type=ArchiveStatus)
    assert again.versions == archive.versions and again.renew_by > pki.now + timedelta(days=365)


def starter(env: Env, *args: str, code: int = 0) -> dict[str, Any]:
    """`starter.py --json ARGS` against the session's server: its JSON answer (exit status `code`)."""
    ran = subprocess.run(
        [sys.executable, str(REPO / "starter.py"), "--json", *args],
        env=env.process_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == code, ran.stderr[-2000:]
    answer: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return answer
