"""An archive's steps (docjobs/domain/archive.py): `open_archive` copies a released B-LTA document out of its job's
run, and `renew_archive` appends fresh revocation data and a document timestamp to its newest version.

A renewal is split as signing is (activities/release.py): the worker fetches the revocation data of the newest
timestamp's TSA chain and the new timestamp, never a child; a document child of the tenant's sandbox writes the
incremental update (it parses the PDF); the worker checks that the update begins with the version it was given,
byte for byte, hashes the timestamp's range itself and fills its hole. A version is promoted create-only: whatever
crashes, an archive has one version `n` (an attempt that finds it made returns it), so one renewal a period.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from activities.declared import implements
from activities.isolated import Attempt, IsolatedStages
from docjobs.domain import stage_specs as specs
from docjobs.domain.archive import ArchiveStep, ArchiveVersion, OpenArchiveInput, RenewInput
from docjobs.domain.canonical import canonical_json
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import BlobRef
from docjobs.isolation import stage_work
from docjobs.isolation.child_pool import ChildPool
from docjobs.isolation.stage_work import ArchivalUpdateWork
from docjobs.isolation.tenant_pools import TenantPools
from docjobs.settings.config import ConfigError
from docjobs.signing import long_term
from docjobs.signing.config import load_trust_roots
from docjobs.signing.environment import signer_from_env
from docjobs.signing.evidence import sign_envelope
from docjobs.signing.long_term import PreparedUpdate
from docjobs.signing.trust_services import BoundedTimeStamper
from docjobs.store.storage import (
    BlobStore,
    archive_attempt_key,
    archive_key,
    archive_prefix,
    job_prefix,
    sha256_file,
)

SPREAD_SECONDS = 86_400  # an archive's renewals fall at its own second of the day they are due: never all at once


def renewal_time(archive_id: str, token_der: bytes, renew_before_days: int) -> datetime:
    """When `archive_id`, whose newest timestamp is `token_der`, is renewed: `renew_before_days` ahead of its TSA
    certificate's expiry, less up to a day by the archive's ID (so the archives of one day are spread over it)."""
    due = long_term.renewal_due(token_der, timedelta(days=renew_before_days))
    offset = int(hashlib.sha256(archive_id.encode()).hexdigest()[:8], 16) % SPREAD_SECONDS
    return due - timedelta(seconds=offset)


class ArchiveActivities(IsolatedStages):
    def __init__(self, store: BlobStore, workdir: Path, pool: ChildPool | TenantPools, data_dir: Path) -> None:
        super().__init__(store, workdir, pool)
        self._data_dir = data_dir

    @implements(specs.OPEN_ARCHIVE)
    def open_archive(self, request: OpenArchiveInput) -> ArchiveStep:
        """The released artifact and its newest timestamp's token as the archive's first version, copied
        create-only out of the job's run (which the jobs' retention deletes)."""
        with self._attempt(specs.OPEN_ARCHIVE.name, request) as attempt:
            owned(request, request.artifact, request.token, folder=job_prefix(request.job_id))
            version = self._recorded(request.archive_id, 1)
            if version is None:
                document, _ = self._store.promote(request.artifact, archive_key(request.archive_id, 1, ".pdf"))
                token, _ = self._store.promote(request.token, archive_key(request.archive_id, 1, ".token"))
                made = ArchiveVersion(number=1, document=document, token=token, made_at=datetime.now(UTC))
                version = self._record(request.archive_id, made, attempt.number, attempt.folder)
            due = renewal_time(request.archive_id, self._token(version, attempt.folder), request.renew_before_days)
            return ArchiveStep(version=version, renew_by=due, attempt=attempt.number, cost=attempt.meter.total())

    @implements(specs.RENEW_ARCHIVE)
    def renew_archive(self, request: RenewInput) -> ArchiveStep:
        """The archive's next version: fresh revocation data for its newest timestamp's TSA chain and a document
        timestamp over all of it, appended to the current version (which stays its exact prefix). An attempt that
        finds the version recorded (an earlier attempt's, lost after it) returns it."""
        number = request.current.number + 1
        with self._attempt(specs.RENEW_ARCHIVE.name, request) as attempt:
            current = request.current
            owned(request, current.document, current.token, folder=archive_prefix(request.archive_id))
            version = self._recorded(request.archive_id, number)
            if version is None:
                version, token = self._renewed(attempt, request, number)
            else:
                token = self._token(version, attempt.folder)
            due = renewal_time(request.archive_id, token, request.renew_before_days)
            return ArchiveStep(version=version, renew_by=due, attempt=attempt.number, cost=attempt.meter.total())

    def _renewed(self, attempt: Attempt, request: RenewInput, number: int) -> tuple[ArchiveVersion, bytes]:
        """Version `number`, made and recorded, and its newest timestamp token (the record's: another attempt's if
        that one recorded first)."""
        config = signer_from_env(self._data_dir)
        if not config.tsa_url:
            raise ConfigError("renewing an archive needs a timestamp authority: set DOCJOBS_TSA_URL")
        current, folder = request.current, attempt.folder
        given, written, token_file = folder / "input.pdf", folder / "renewed.pdf", folder / "token.der"
        self._fetch_staged(current.document, given)
        self._fetch_staged(current.token, token_file)
        revocation = long_term.timestamp_revocation(
            token_file.read_bytes(), load_trust_roots(config), config.revocation_urls
        )
        stamper = BoundedTimeStamper(config.tsa_url)
        reserved = long_term.timestamp_reserved(stamper)
        work = ArchivalUpdateWork(
            source=given, output=written, revocation=revocation.encoded(), timestamp_reserved=reserved
        )
        done = self._isolated(attempt, stage_work.ARCHIVAL_UPDATE, work, request.cpu)
        with self._folder("renew-key") as own:  # not the child's folder: it cannot change what is timestamped
            renewed, newest = own / "renewed.pdf", own / "token.der"
            token = long_term.finish_archival_update(
                written,
                renewed,
                PreparedUpdate(byte_range=done.byte_range, field_name=done.field_name),
                signed=(current.document.size, current.document.sha256),
                timestamper=stamper,
                reserved=reserved,
            )
            assert token is not None  # a timestamper was given
            newest.write_bytes(token)
            made_at = datetime.now(UTC)
            evidence = own / "evidence.json"
            evidence.write_bytes(sign_envelope(version_statement(request, number, renewed, made_at), PAYLOAD, config))
            files = ((".pdf", renewed), (".token", newest), (".evidence.json", evidence))
            stored = {
                suffix: self._store.put_file(
                    archive_attempt_key(request.archive_id, number, attempt.number, suffix), path
                )
                for suffix, path in files
            }
            made = ArchiveVersion(
                number=number,
                document=stored[".pdf"],
                token=stored[".token"],
                evidence=stored[".evidence.json"],
                made_at=made_at,
            )
            recorded = self._record(request.archive_id, made, attempt.number, own)
            return recorded, token if recorded == made else self._token(recorded, attempt.folder)

    def _recorded(self, archive_id: str, number: int) -> ArchiveVersion | None:
        """Version `number` as its record says, if an attempt made it."""
        key = archive_key(archive_id, number, ".json")
        if not self._store.exists(key):
            return None
        with self._store.open(key) as record:
            return ArchiveVersion.model_validate_json(record.read())

    def _record(self, archive_id: str, version: ArchiveVersion, attempt: int, folder: Path) -> ArchiveVersion:
        """Record `version` create-only: the first attempt to do so made it (another's record is returned)."""
        record = folder / f"v{version.number}.json"
        record.write_bytes(canonical_json(version.model_dump(mode="json")))
        staged = self._store.put_file(archive_attempt_key(archive_id, version.number, attempt, ".json"), record)
        try:
            self._store.promote(staged, archive_key(archive_id, version.number, ".json"))
        except DocJobError as error:
            if error.code is not FailureCode.PUBLISH_CONFLICT:
                raise
        recorded = self._recorded(archive_id, version.number)
        assert recorded is not None
        return recorded

    def _token(self, version: ArchiveVersion, folder: Path) -> bytes:
        """The newest timestamp token of `version`, as stored."""
        token = folder / f"v{version.number}.token.der"
        self._fetch_staged(version.token, token)
        return token.read_bytes()


PAYLOAD = "application/vnd.docjobs.archive-version+json"


def owned(request: OpenArchiveInput | RenewInput, *blobs: BlobRef, folder: str) -> None:
    """Whoever reaches Temporal can start an `Archive` workflow with any input, so a step trusts none of it: the
    archive must be its job's and the job its tenant's (the IDs' prefixes), and every blob it reads in the
    folder of that job or archive. Else `source.missing`, as for a blob that never existed."""
    mine = request.job_id.partition("/")[0] == request.tenant and request.archive_id.startswith(
        f"archive/{request.job_id}/"
    )
    if not mine or any(not blob.key.startswith(f"{folder}/") for blob in blobs):
        raise DocJobError(FailureCode.SOURCE_MISSING, "the source blob is missing")


def version_statement(request: RenewInput, number: int, document: Path, made_at: datetime) -> bytes:
    """What a renewed version's evidence states: the archive, this version's digest and the one it extends."""
    return canonical_json(
        {
            "archive_id": request.archive_id,
            "tenant": request.tenant,
            "version": number,
            "document_sha256": sha256_file(document),
            "previous": {"version": request.current.number, "document_sha256": request.current.document.sha256},
            "made_at": made_at.isoformat(),
        }
    )
