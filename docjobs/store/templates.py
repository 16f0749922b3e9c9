"""Stored templates, per tenant and versioned by content digest, and the manifest a template job is accepted as.

A template is a folder (`index.html`, a Jinja template, with its CSS, images and fonts) stored as a zip in the
blob store: `templates/<tenant digest>/<name>/versions/<sha256>.zip`, the sha256 being its version. Adding a
bundle makes it the name's current version (`current.json` beside the versions); earlier versions stay, so a
job accepted with one renders with exactly that one. Nothing here opens the zip: the `generate` stage
unpacks it, with limits, in a document child.

A template job's accepted input is its manifest: canonical JSON naming the template, its version's blob
and the data's blob (stored content-addressed like any input, never in history). Its sha256 is the job's
input digest, so the same template version with the same data (and policy) is the same job, and new data
or a new version a new one.
"""

from __future__ import annotations

import hashlib
import re
import stat
import tempfile
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from docjobs.domain.base import Frozen
from docjobs.domain.canonical import canonical_model
from docjobs.domain.errors import DocJobError, FailureCode
from docjobs.domain.models import BlobRef
from docjobs.store.storage import BlobStore, owned_source, record_owner, sha256_file, source_key

TEMPLATE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
TEMPLATE_NAME_RULE = "1-64 of a-z 0-9 _ - (starting with a letter or digit)"
MAX_MANIFEST_BYTES = 4096
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # every entry's time: the same files give the same zip (and version)


class TemplateNotFound(Exception):
    """The tenant has no template of that name."""


class TemplateVersion(Frozen):
    name: str
    bundle: BlobRef  # the zip; its sha256 is the version
    added_at: datetime


class TemplateManifest(Frozen):
    """The accepted input of a template job: a template version and the data, each by its blob and digest."""

    template: str
    bundle: BlobRef
    data: BlobRef


def is_valid_template_name(name: str) -> bool:
    return TEMPLATE_NAME.fullmatch(name) is not None


def zip_folder(folder: Path, out: Path) -> None:
    """`folder` as a zip whose bytes depend only on its files' names and contents (sorted, fixed times and
    modes). Links and special files are refused: a template carries its own files, not pointers to others."""
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for path in sorted(folder.rglob("*")):
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise DocJobError(
                    FailureCode.INPUT_UNSUPPORTED, "a template folder may hold only regular files and folders"
                )
            entry = zipfile.ZipInfo(path.relative_to(folder).as_posix(), date_time=ZIP_EPOCH)
            entry.external_attr = (stat.S_IFREG | 0o644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            bundle.writestr(entry, path.read_bytes())


def read_manifest(path: Path) -> TemplateManifest:
    """A stored manifest (made by acceptance, fetched by its digest)."""
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ValueError
        return TemplateManifest.model_validate_json(path.read_bytes())
    except (ValueError, ValidationError):
        raise DocJobError(FailureCode.INPUT_MALFORMED, "the template job's manifest cannot be read") from None


def check_manifest(store: BlobStore, manifest: TemplateManifest, *, tenant: str) -> None:
    """A manifest names only what the job's tenant stored: a version of one of its own templates, and data it
    stored (`source.missing` otherwise, as for data nobody stored: the same look-ups on every path)."""
    data = manifest.data
    owned = owned_source(store, data.sha256, tenant)
    own_template = manifest.bundle.key.startswith(f"{TemplateStore._tenant_folder(tenant)}/")
    if owned is None or data.key != source_key(data.sha256) or not own_template:
        raise DocJobError(FailureCode.SOURCE_MISSING, "the template job's data or template is missing")


class TemplateStore:
    """The tenants' templates in the blob store."""

    def __init__(self, store: BlobStore) -> None:
        self._store = store

    @staticmethod
    def _folder(tenant: str, name: str) -> str:
        if not is_valid_template_name(name):
            raise DocJobError(FailureCode.INPUT_UNSUPPORTED, f"a template name is {TEMPLATE_NAME_RULE}")
        return f"{TemplateStore._tenant_folder(tenant)}/{name}"

    @staticmethod
    def _tenant_folder(tenant: str) -> str:
        """Derived from the tenant's name, so that names never become paths."""
        return f"templates/{hashlib.sha256(tenant.encode()).hexdigest()[:32]}"

    def add(self, tenant: str, name: str, bundle: Path) -> TemplateVersion:
        """Store a template's zip as a version of `name` and make it the current one."""
        folder = self._folder(tenant, name)
        digest = sha256_file(bundle)
        stored = self._store.put_file(f"{folder}/versions/{digest}.zip", bundle)
        if stored.sha256 != digest:
            raise DocJobError(FailureCode.SOURCE_DIGEST_MISMATCH, "the template changed while it was being stored")
        version = TemplateVersion(name=name, bundle=stored, added_at=datetime.now(UTC))
        with tempfile.TemporaryDirectory(prefix="docjobs-template-") as tmp:
            pointer = Path(tmp) / "current.json"
            pointer.write_text(version.model_dump_json())
            self._store.put_file(f"{folder}/current.json", pointer)
        return version

    def current(self, tenant: str, name: str) -> TemplateVersion:
        key = f"{self._folder(tenant, name)}/current.json"
        if not self._store.exists(key):
            raise TemplateNotFound(name)
        with self._store.open(key) as pointer:
            return TemplateVersion.model_validate_json(pointer.read())

    def list(self, tenant: str) -> list[TemplateVersion]:
        """The tenant's templates, each at its current version, by name."""
        pointers = [
            blob.key
            for blob in self._store.list_blobs(self._tenant_folder(tenant))
            if blob.key.endswith("/current.json")
        ]
        versions = []
        for key in pointers:
            with self._store.open(key) as pointer:
                versions.append(TemplateVersion.model_validate_json(pointer.read()))
        return sorted(versions, key=lambda version: version.name)

    def manifest(
        self,
        tenant: str,
        name: str,
        data: Path,
        folder: Path,
        *,
        max_data_bytes: int,
        version: TemplateVersion | None = None,
    ) -> Path:
        """Store the job's data by its digest and write the job's manifest into `folder` (the input to submit), for
        `version` of the template (None: its current one)."""
        version = self.current(tenant, name) if version is None else version
        if data.stat().st_size > max_data_bytes:
            raise DocJobError(FailureCode.INPUT_TOO_LARGE, f"the template data is larger than {max_data_bytes} bytes")
        digest = sha256_file(data)
        stored = self._store.put_file(source_key(digest), data)
        if stored.sha256 != digest:
            raise DocJobError(FailureCode.SOURCE_DIGEST_MISMATCH, "the data changed while it was being accepted")
        record_owner(self._store, digest, tenant)
        path = folder / "manifest.json"
        path.write_bytes(manifest_bytes(name, version, stored))
        return path


def manifest_bytes(name: str, version: TemplateVersion, data: BlobRef) -> bytes:
    """A template job's manifest, as it is stored: what the job's input digest is the digest of."""
    return canonical_model(TemplateManifest(template=name, bundle=version.bundle, data=data))
