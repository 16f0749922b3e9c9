"""The `resolve` step of a job started with the public input (`DocumentJobInput`): the one place a job's policy
is resolved. It decides, once, by the worker's configuration, everything internal the workflow needs, and
records it in history (so a replay, a retry or a changed policy file never changes a running job): the policy
and its version, the stage timings, the OCR queue, and the source (a document, or what `generate` makes one
of) copied into the content-addressed layout with its digest checked. The tenant must be allowed the policy
(`policy.forbidden`: its list in the tenants file, or every policy not trusted-only) and must own a source it
names by its digest (`source.missing`, as for a blob nobody stored). An input that names the policy version it
must run with (a batch's documents: the version their batch pinned) fails `policy.changed` when the policy
resolves to another."""

from __future__ import annotations

import pydantic

from activities.declared import implements
from activities.lease import typed_failures
from docjobs.domain import stage_specs as specs
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import DocumentJobInput, JobOverrides, JobRequest, ResolveInput
from docjobs.domain.policy import Policy
from docjobs.settings.config import ConfigError, Settings
from docjobs.settings.policies import PolicyBook
from docjobs.settings.tenants import callback_of, policies_of
from docjobs.settings.webhooks import CallbackInvalid, parse_callback
from docjobs.signing.environment import check_sign_levels
from docjobs.store.storage import BlobStore, adopt_source, key_in_store


def resolved_policy(settings: Settings, tenant: str, name: str | None, overrides: JobOverrides) -> Policy:
    """The named policy (None: the default) resolved with `overrides` by this worker's policy file, if `tenant` may
    use it (policy.unknown, policy.forbidden, policy.invalid): for a job's `resolve` and a batch's pin alike."""
    book = PolicyBook.load(settings.policy_file)
    chosen = name or book.default
    if chosen not in book.policies:
        raise DocJobError(FailureCode.POLICY_UNKNOWN)
    book.check_allowed(chosen, policies_of(settings.tenants_file, tenant))
    try:
        policy = book.resolve(chosen, overrides)
    except (pydantic.ValidationError, ConfigError):
        raise DocJobError(FailureCode.POLICY_INVALID) from None
    try:
        check_sign_levels([policy])
    except ConfigError as error:  # names the policy, its level and the setting missing: no document content
        raise DocJobError(FailureCode.POLICY_INVALID, str(error)) from None
    return policy


class ResolveActivities:
    def __init__(self, store: BlobStore, settings: Settings) -> None:
        self._store = store
        self._settings = settings

    @implements(specs.RESOLVE)
    def resolve(self, request: ResolveInput) -> JobRequest:
        job = request.job
        with typed_failures("resolve"):
            policy = self._policy(job)
            self._check_callback(job)
            key = key_in_store(self._settings.storage_url, job.source.uri)
            settings = self._settings
            source = adopt_source(
                self._store, key, job.source, settings.work_dir, settings.max_input_bytes, tenant=job.tenant
            )
            return JobRequest(
                job_id=request.job_id,
                tenant=job.tenant,
                source=source,
                input_kind=job.source.kind,
                policy=policy,
                policy_version=policy.version,
                deadline_seconds=job.deadline_seconds or policy.deadline_seconds,
                accepted_at=request.accepted_at,
                timing=settings.timing,
                ocr_task_queue=settings.ocr_task_queue,
                ocr_chunk_task_queue=settings.ocr_chunk_task_queue,
                notify_task_queue=settings.notify_task_queue,
                archive_task_queue=settings.archive_task_queue,
                callback=job.callback,
            )

    def _policy(self, job: DocumentJobInput) -> Policy:
        policy = resolved_policy(self._settings, job.tenant, job.policy, job.overrides)
        # A pin is the version a status shows (no terms) or the fingerprint a batch pins (terms included, and what
        # versions were before the terms left them: pins recorded by older code).
        if job.policy_version is not None and job.policy_version not in (policy.version, policy.fingerprint):
            raise DocJobError(FailureCode.POLICY_CHANGED)
        return policy

    def _check_callback(self, job: DocumentJobInput) -> None:
        """A job's own callback is signed with its tenant's webhook secret: the tenant must have registered one."""
        if job.callback is None:
            return
        registered = callback_of(self._settings.tenants_file, job.tenant)
        if registered is None:
            raise DocJobError(
                FailureCode.REQUEST_INVALID,
                "a job's callback needs its tenant's webhook secret (tenant add --callback)",
            )
        try:
            parse_callback(job.callback, allow_http_loopback=registered.allow_http_loopback)
        except CallbackInvalid:
            raise DocJobError(FailureCode.REQUEST_INVALID, "the job's callback URL cannot be delivered to") from None
