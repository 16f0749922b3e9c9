"""What a client works out of an input before it stores anything or starts a job: what is asked of it, in one
canonical form, and the job ID that the input's digest and that ask make (docs/policies.md, Job IDs and
idempotency). Each is computed once per submit (`plan_job`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from docjobs.domain.canonical import canonical_json
from docjobs.domain.idempotency import keyed_job_id, keyless_digest
from docjobs.domain.models import InputKind, JobOverrides
from docjobs.domain.policy import Policy
from docjobs.settings.policies import check_overrides
from docjobs.store.storage import sha256_file


def derive_job_id(tenant: str, client_key: str | None, input_sha256: str, asked: str, id_key: bytes) -> str:
    """`{tenant}/{client key}`, or a digest keyed with the deployment's job-ID key (`keyless_digest`) of the tenant,
    the input's sha256 and what is asked of it (`asked`: `asked_of` a public input, or a pinned policy's version)."""
    if client_key:
        return keyed_job_id(tenant, client_key)
    return f"{tenant}/auto-{keyless_digest(id_key, tenant, input_sha256, asked)}"


def asked_of(policy: str, overrides: JobOverrides | None) -> str:
    """What a public input asks of its document, in one canonical form: the policy's name and the overrides.
    The same bytes asked the same make the same keyless job; the client never resolves the policy for it."""
    asked = {"policy": policy, "overrides": (overrides or JobOverrides()).model_dump(mode="json")}
    return canonical_json(asked).decode()


@dataclass(frozen=True)
class JobAsk:
    """What a client asks of one input: a named policy (`named`, the policy file's entry: its name, deadline and
    mode; the job's `resolve` step resolves it with `overrides`), for a tenant, under a key or none."""

    named: Policy
    overrides: JobOverrides
    input_kind: InputKind = InputKind.DOCUMENT
    tenant: str = "default"
    key: str | None = None
    deadline_seconds: int | None = None  # None: the policy's
    callback: str | None = None


@dataclass(frozen=True)
class JobPlan:
    """What `plan_job` computed of an input, each once, before anything is stored or started: its digest, what is
    asked of it in canonical form, and the job ID they make. `submit_planned` starts it; `run` names its queue
    after the ID."""

    path: Path
    ask: JobAsk
    input_sha256: str
    handed_over: bool  # the caller wrote `path` and hashed it while writing (an API upload): the store takes it
    asked: str  # `asked_of` the policy's name and the overrides
    job_id: str


def plan_job(path: Path, ask: JobAsk, id_key: bytes, *, hashed: str | None = None) -> JobPlan:
    """The job `ask` makes of `path`: the overrides checked as far as they alone tell (`check_overrides`), the file
    hashed (unless `hashed`: its writer did) and the job ID derived. Blocking: it reads the whole file."""
    check_overrides(ask.overrides)
    digest = hashed if hashed is not None else sha256_file(path)
    asked = asked_of(ask.named.name, ask.overrides)
    job_id = derive_job_id(ask.tenant, ask.key, digest, asked, id_key)
    return JobPlan(path, ask, digest, handed_over=hashed is not None, asked=asked, job_id=job_id)
