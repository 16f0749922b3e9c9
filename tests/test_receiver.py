"""What a release tells its receiver: everything a receiver is handed (the signed evidence, the PDF's bytes and
metadata, the webhook body), taken from real jobs on the real worker, holds no redaction term, no box, and no
digest that a guessed value put back into what the receiver sees would reproduce."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pikepdf

from docjobs.domain.canonical import canonical_sha256
from docjobs.domain.job_status import JobStatus
from docjobs.domain.models import JobOverrides
from docjobs.domain.policy import Policy, RedactRegion
from docjobs.domain.states import JobState
from docjobs.settings.policies import PolicyBook, job_overrides
from docjobs.settings.tenants import TenantExists, add_tenant, set_callback
from docjobs.signing.evidence import commitment
from docjobs.temporal.client import JobClient
from docjobs.temporal.job_plan import asked_of, derive_job_id
from tests.conftest import Env, wait_terminal
from tests.fixtures.redact_layout import make_embedded
from tests.fixtures.redact_samples import EMAIL, SSN, make_plain
from tests.test_notify import Receiver, serving, wait_for_requests
from tests.test_redact_jobs import assert_nothing_left

TENANT = "receiver"  # with a callback, for the webhook body
NAMES = ("Jane Doe", "John Roe")  # two patients of one form letter: the name is all that differs
# What changes from one job to the next whatever was redacted: a run's ID, its time, its salted commitments.
VOLATILE = {"run_id", "completed_at", "commitments"}
BOX = RedactRegion(page=1, x0=301.25, y0=611.5, x1=377.75, y1=633.125)  # numbers no other field has


def name_regex(name: str) -> str:
    return r"\s+".join(name.split())  # `Jane\s+Doe`, as a tenant writes a patient's name


@dataclass
class Handed:
    """Everything a receiver gets of one job, as text it can search."""

    status: JobStatus  # the tenant's own record: never handed to the receiver
    envelope: bytes
    predicate: dict[str, Any]
    pdf: Path
    metadata: str  # Info, XMP and the signature dictionaries, as pikepdf reads them
    webhook: bytes

    def released(self) -> str:
        """What travels with the release to whoever receives it: the evidence, the PDF's bytes and metadata."""
        raw = self.pdf.read_bytes()
        statement = base64.b64decode(json.loads(self.envelope)["payload"]).decode()
        parts = (self.envelope.decode(), statement, self.metadata)
        return "\n".join((*parts, raw.decode("latin-1"), raw.decode("utf-16-be", "replace")))


def make_letter(path: Path, name: str) -> None:
    """The form letter to `name`, whose metadata names the patient too; the same name makes the same bytes."""
    make_embedded(path, name)
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        pdf.docinfo["/Title"] = f"Letter to {name}"
        pdf.save(path, deterministic_id=True)


def metadata_of(pdf: Path) -> str:
    with pikepdf.open(pdf) as document:
        info = {str(key): str(value) for key, value in document.docinfo.items()}
        xmp = document.Root.Metadata.read_bytes().decode("utf-8", "replace") if "/Metadata" in document.Root else ""
        form = document.Root.AcroForm if "/AcroForm" in document.Root else pikepdf.Dictionary(Fields=[])
        signatures = [
            {str(key): str(value) for key, value in field.V.items() if key != "/Contents"}
            for field in form.Fields
            if "/V" in field and isinstance(field.V, pikepdf.Dictionary)
        ]
    return json.dumps({"info": info, "xmp": xmp, "signatures": signatures})


async def released(
    jobs: JobClient, source: Path, policy: str, overrides: JobOverrides, receiver: Receiver, folder: Path
) -> Handed:
    """Run a job without a key (its ID derived from its input and what it asks) and take what its receiver gets."""
    count = len(receiver.received)
    submitted = await jobs.submit(source, policy, overrides=overrides, tenant=TENANT)
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, (status.failure_code, status.failure_message)
    status = await jobs.handle(submitted.job_id).result()  # the workflow ends after the delivery
    wait_for_requests(receiver, count + 1)
    folder.mkdir()
    await jobs.evidence(status.job_id, envelope := folder / "evidence.json")
    await jobs.fetch(status.job_id, pdf := folder / "artifact.pdf")
    statement = json.loads(base64.b64decode(json.loads(envelope.read_bytes())["payload"]))
    return Handed(
        status=status,
        envelope=envelope.read_bytes(),
        predicate=statement["predicate"],
        pdf=pdf,
        metadata=metadata_of(pdf),
        webhook=receiver.received[count][1],
    )


def guessed_digests(guess_input: Path, guess_policy: Policy) -> set[str]:
    """What a receiver who guessed the value can compute: the input's digest and the policy's (its version as it
    was, its whole canonical digest)."""
    source = hashlib.sha256(guess_input.read_bytes()).hexdigest()
    return {source, guess_policy.fingerprint.partition("@")[2], canonical_sha256(guess_policy)}


def guessed_job_id(tenant: str, guess_input: Path, guess_policy: Policy) -> str:
    """What a receiver who guessed the input and policy computes for a keyless job's ID without the deployment's
    job-ID key: the digest such IDs were before they were keyed (the part after `auto-`)."""
    source = hashlib.sha256(guess_input.read_bytes()).hexdigest()
    return hashlib.sha256(f"{tenant}\0{source}\0{guess_policy.fingerprint}".encode()).hexdigest()[:32]


def keyed_job_id(jobs: JobClient, tenant: str, source: Path, policy: str, overrides: JobOverrides) -> str:
    """The ID the deployment, which holds the key, derives for a keyless job of `source` asked `policy` with
    `overrides`."""
    asked = asked_of(policy, overrides)
    return derive_job_id(tenant, None, hashlib.sha256(source.read_bytes()).hexdigest(), asked, jobs.id_key)


def assert_receiver_learns_nothing(handed: Handed, values: tuple[str, ...], guesses: set[str], job_id: str) -> None:
    """Nothing released and no webhook holds a value or a guessed digest, and the job's ID (which the webhook
    carries: a keyless one is keyed with the deployment's key) is not what a guess without that key computes."""
    released, webhook = handed.released(), handed.webhook.decode()
    for value in values:
        for text in (released, webhook):
            assert value not in text and json.dumps(value)[1:-1] not in text, "a redacted term was handed"
    for digest in guesses:
        assert digest not in released and digest not in webhook, "a guess reproduces a digest the receiver was handed"
    assert job_id not in released + webhook, "a guess reproduces the keyless job's ID"
    assert not handed.status.job_id.endswith(job_id)
    assert_nothing_left(handed.pdf, values)


async def test_a_regex_redaction_tells_the_receiver_nothing_of_the_name(
    jobs: JobClient, policies: PolicyBook, env: Env, tmp_path: Path
) -> None:
    """The form letter of two patients, each redacted by their name's regex: what each receiver is handed holds
    neither the name nor its regex, no digest a guess reproduces (the input, the policy, the job ID, the policy
    version as it was), and, but for the run, the time and the salted commitments, the same evidence."""
    tenants = Path(env.vars["DOCJOBS_DATA_DIR"]) / "tenants.json"
    with contextlib.suppress(TenantExists):  # the module's tests share one data dir
        add_tenant(tenants, TENANT)
    handed: list[Handed] = []
    with serving(Receiver()) as receiver:
        set_callback(tenants, TENANT, receiver.url, allow_http_loopback=True)
        for number, name in enumerate(NAMES):
            make_letter(source := tmp_path / f"letter{number}.pdf", name)
            overrides = job_overrides(redact=[name_regex(name)])
            handed.append(
                await released(jobs, source, policies.default, overrides, receiver, tmp_path / f"out{number}")
            )

    for number, name in enumerate(NAMES):
        job = handed[number]
        values = (name, name_regex(name), *name.split())
        # a receiver guessing the right name rebuilds the input and the policy exactly
        make_letter(guess := tmp_path / f"guess{number}.pdf", name)
        guess_policy = policies.resolve(policies.default, job_overrides(redact=[name_regex(name)]))
        guesses = guessed_digests(guess, guess_policy)
        assert hashlib.sha256(guess.read_bytes()).hexdigest() == job.status.input_sha256  # the guess is exact
        assert job.status.job_id == keyed_job_id(
            jobs, TENANT, guess, policies.default, job_overrides(redact=[name_regex(name)])
        )  # the deployment's, keyed
        assert_receiver_learns_nothing(job, values, guesses, guessed_job_id(TENANT, guess, guess_policy))
        assert job.predicate["redactions"] == {"custom": 1}
        assert "regexes" not in job.predicate["policy"]["redact"] and "regions" not in job.predicate["policy"]["redact"]
        assert job.predicate["policy_version"] == policies.get(policies.default).version  # the terms are not policy
        event = json.loads(job.webhook)
        assert event["input_sha256"] is None and event["evidence_sha256"] == job.status.evidence_sha256

        # the tenant, who holds the salt, proves which job and input the release came from
        assert job.status.commitment_salt is not None
        salt = bytes.fromhex(job.status.commitment_salt)
        commitments = job.predicate["commitments"]
        assert commitments["job"] == commitment(salt, "job", job.status.job_id)
        assert commitments["source"] == commitment(salt, "source", job.status.input_sha256)
        assert commitments["policy"] == commitment(salt, "policy", canonical_sha256(guess_policy))
        check = await jobs.verify_evidence(job.status.job_id)
        assert check.ok, check.broken

    # a value that changes when only the name changes would differ here
    first, second = ({k: v for k, v in job.predicate.items() if k not in VOLATILE} for job in handed)
    assert first == second
    assert handed[0].predicate["commitments"].keys() == handed[1].predicate["commitments"].keys()
    assert _only_signing_differs(handed[0], handed[1])


def _only_signing_differs(first: Handed, second: Handed) -> bool:
    """The signature dictionaries carry their signing time (/M) and byte range (an ECDSA signature's length varies
    by a byte or two), the XMP the time the signature was added: the rest of the metadata is the same for both
    names."""
    signing = re.compile(r'D:\d{14}Z|\d{4}-\d\d-\d\dT[\d:]{8}\+00:00|"/ByteRange": "[^"]*"')
    return signing.sub("", first.metadata) == signing.sub("", second.metadata)


async def test_a_pattern_and_region_redaction_tells_the_receiver_only_counts(
    jobs: JobClient, policies: PolicyBook, env: Env, tmp_path: Path
) -> None:
    """A built-in pattern (the SSN, and the policy's own e-mail pattern) and a region: the receiver learns how many
    spans of each kind were removed, never the values, the box or a digest of the input."""
    tenants = Path(env.vars["DOCJOBS_DATA_DIR"]) / "tenants.json"
    with contextlib.suppress(TenantExists):  # the module's tests share one data dir
        add_tenant(tenants, TENANT)
    make_plain(source := tmp_path / "plain.pdf")
    asked = JobOverrides(redact_patterns=("ssn",), redact_regions=(BOX,))
    policy = policies.resolve("external", asked)
    with serving(Receiver()) as receiver:
        set_callback(tenants, TENANT, receiver.url, allow_http_loopback=True)
        job = await released(jobs, source, "external", asked, receiver, tmp_path / "out")
    assert job.predicate["redactions"] == {"ssn": 1, "email": 1, "region": 1}
    for number in (BOX.x0, BOX.y0, BOX.x1, BOX.y1):
        assert json.dumps(number) not in job.released() + job.webhook.decode(), "a region's box was handed"
    job_id = guessed_job_id(TENANT, source, policy)
    assert_receiver_learns_nothing(job, (SSN, EMAIL), guessed_digests(source, policy), job_id)
    assert job.status.redaction is not None  # the tenant's own record keeps the summary, bound by a commitment
    salt = bytes.fromhex(job.status.commitment_salt or "")
    assert job.predicate["commitments"]["redaction.json"] == commitment(
        salt, "redaction.json", job.status.redaction.sha256
    )
    assert (await jobs.verify_evidence(job.status.job_id)).ok
