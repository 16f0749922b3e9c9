"""Settings from the environment, with the embedded defaults (local dev server, blobs on disk).

`Environment` is every `DOCJOBS_*` variable docjobs reads, in one place: its name is `DOCJOBS_` and the
field's name in capitals, with its type and default (an empty value counts as unset). A secret value (the codec
keys and token, the PKCS#12 passphrase) may also come as a file in the secrets directory (`/run/secrets`,
where compose mounts them) named like its variable in lower case (`docjobs_codec_keys`), unless the
environment gives it or its `*_FILE` path. `Settings` is what
the processes use, resolved from it. Free of Temporal: how to reach a cluster beyond its address and namespace
(API key, TLS) is the Temporal layer's (docjobs/temporal/settings.py)."""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from docjobs.domain.models import ActivityTiming
from docjobs.domain.sealing import CodecKey, parse_keys
from docjobs.settings.quotas import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BYTES_PER_DAY,
    DEFAULT_MAX_RUNNING_JOBS,
    TenantLimits,
)
from docjobs.store.storage import BlobStore

SHIPPED_POLICIES = Path(__file__).with_name("policies.toml")
SECRETS_DIR = Path("/run/secrets")
ENV_PREFIX = "DOCJOBS_"


class ConfigError(Exception):
    """A setting or policy file that cannot be used; the message names the setting."""


JOB_ID_KEY_NAME = "job-ids.key"
JOB_ID_KEY_BYTES = 32
SECRET_VALUES = ("codec_keys", "codec_token", "signing_p12_passphrase")  # what a secrets directory file may give


class _MountedSecrets(PydanticBaseSettingsSource):
    """The secrets directory's files, for the secret values (SECRET_VALUES; never a path setting, which would
    then hold the secret) that the environment gives neither inline nor as a path (`*_FILE`): compose mounts
    a secret and may name it too, and that is not two values."""

    def __init__(
        self, settings_cls: type[BaseSettings], secrets: PydanticBaseSettingsSource, env: PydanticBaseSettingsSource
    ) -> None:
        super().__init__(settings_cls)
        self._secrets = secrets
        self._env = env

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ answers for all fields at once

    def __call__(self) -> dict[str, Any]:
        given = self._env()
        mounted = self._secrets().items()
        return {name: value for name, value in mounted if name in SECRET_VALUES and f"{name}_file" not in given}


class Environment(BaseSettings):
    """Every `DOCJOBS_*` variable (the name: `DOCJOBS_` + the field's name in capitals)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, frozen=True, extra="ignore")

    data_dir: Path = Path(".docjobs")
    temporal_address: str | None = None  # None: the embedded dev server
    temporal_namespace: str | None = None  # None: the Temporal profile's, else "default"
    task_queue: str = "docjobs"
    ocr_task_queue: str | None = None  # None: the task queue's name + "-ocr"
    archive_task_queue: str | None = None  # None: the task queue: where archives renew (their TSA and responders)
    deployment: str | None = None  # None: workers run unversioned
    build_id: str | None = None  # None: the package version plus the git commit (docjobs/worker.py)
    temporal_port: int = 7233
    temporal_ui_port: int = 8233
    temporal_bin: str | None = None
    retention: str = "720h"
    storage_url: str | None = None  # None: the data dir's blobs folder
    storage_sse: str | None = None
    storage_kms_key_id: str | None = None
    policy_file: Path = SHIPPED_POLICIES
    max_input_bytes: int = 100 * 1024 * 1024
    max_upload_bytes: int = 20 * 1024 * 1024
    body_read_timeout_seconds: float = Field(default=30.0, gt=0)
    tenant_max_running_jobs: int = Field(default=DEFAULT_MAX_RUNNING_JOBS, ge=1)
    tenant_max_bytes_per_day: int = Field(default=DEFAULT_MAX_BYTES_PER_DAY, ge=1)
    tenant_max_batch_bytes: int = Field(default=DEFAULT_MAX_BATCH_BYTES, ge=1)
    lease_seconds: float = 30.0
    stage_base_seconds: float = 60.0
    stage_per_page_seconds: float = 10.0
    ocr_per_page_seconds: float = 60.0
    max_attempts: int = 5
    notify_retry_seconds: float = Field(default=1.0, gt=0)
    activity_threads: int = Field(default_factory=lambda: max(2, os.cpu_count() or 2))
    ocr_activity_threads: int | None = None  # None: as many as the general queue's
    ocr_chunk_threads: int | None = None  # None: as many as the OCR queue's
    stage_memory_mb: int = 1536
    stall_seconds: float = 300.0
    child_recycle_after: int = 50
    sandbox: Literal["bwrap", "unconfined"] = "bwrap"  # unconfined: document children run without their boundary
    sandbox_work_mb: int = Field(default=2048, ge=16)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 0  # 0: no metrics endpoint
    metrics_refresh_seconds: float = 15.0
    log_format: str = "text"
    codec_keys: str | None = Field(default=None, repr=False)
    codec_keys_file: Path | None = None
    codec_token: str | None = Field(default=None, repr=False)
    codec_token_file: Path | None = None
    tenants_file: Path | None = None  # None: the data dir's tenants.json
    job_id_key_file: Path | None = None  # None: the data dir's job-ids.key, made on first use
    signing_p12: Path | None = None
    signing_p12_passphrase: str | None = Field(default=None, repr=False)
    signing_key: Path | None = None
    signing_cert: Path | None = None
    signing_chain: str | None = None  # paths, os.pathsep-separated
    trust_roots: str | None = None  # paths, os.pathsep-separated
    tsa_url: str | None = None
    revocation_urls: str | None = None  # OCSP responders and CRLs the worker may fetch (B-LT, B-LTA), comma-separated

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _MountedSecrets(settings_cls, file_secret_settings, env_settings)


VARIABLES = tuple(ENV_PREFIX + name.upper() for name in Environment.model_fields)  # every one docjobs reads


def read_environment(secrets_dir: Path | None = SECRETS_DIR) -> Environment:
    """The `DOCJOBS_*` settings; a bad value is a ConfigError naming its variable (never quoting the value)."""
    try:
        mounted = secrets_dir if secrets_dir is not None and secrets_dir.is_dir() else None
        return Environment(_secrets_dir=mounted)  # type: ignore[call-arg]  # BaseSettings' own argument
    except ValidationError as error:
        first = error.errors()[0]
        name = ENV_PREFIX + str(first["loc"][0]).upper()
        kind = {"int_parsing": "int", "float_parsing": "float"}.get(first["type"])
        raise ConfigError(f"{name} must be a number ({kind})" if kind else f"{name}: {first['msg']}") from None


def _secret_text(name: str, inline: str | None, path: Path | None, what: str) -> str | None:
    """A secret given inline (DOCJOBS_X) or as a file (DOCJOBS_X_FILE, preferred: no secret in the environment);
    errors name the variable, never the secret."""
    if inline and path:
        raise ConfigError(f"set {name} or {name}_FILE, not both")
    if path is None:
        return inline
    try:
        return path.read_text()
    except OSError as error:
        raise ConfigError(f"{name}_FILE: cannot read the {what} file ({error.strerror})") from None


def _codec_keys(env: Environment) -> tuple[CodecKey, ...]:
    """Payload encryption keys from DOCJOBS_CODEC_KEYS_FILE or DOCJOBS_CODEC_KEYS."""
    text = _secret_text("DOCJOBS_CODEC_KEYS", env.codec_keys, env.codec_keys_file, "key")
    name = "DOCJOBS_CODEC_KEYS_FILE" if env.codec_keys_file else "DOCJOBS_CODEC_KEYS"
    try:
        keys = parse_keys(text or "")
    except ValueError as error:
        raise ConfigError(f"{name}: {error}") from None
    if text is not None and not keys:
        raise ConfigError(f"{name} is set but holds no key")
    return keys


def _codec_token(env: Environment) -> str | None:
    """The codec endpoint's bearer token: DOCJOBS_CODEC_TOKEN_FILE (a compose secret) or DOCJOBS_CODEC_TOKEN."""
    text = _secret_text("DOCJOBS_CODEC_TOKEN", env.codec_token, env.codec_token_file, "token")
    if env.codec_token_file is None:
        return text
    token = (text or "").strip()
    if not token:
        raise ConfigError("DOCJOBS_CODEC_TOKEN_FILE is set but holds no token")
    return token


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    temporal_address: str | None  # None: the embedded dev server
    namespace: str
    task_queue: str  # the workflow and the general stages
    ocr_task_queue_override: str | None
    dev_server_port: int
    dev_server_ui_port: int
    retention: str  # how long closed jobs are kept: the idempotency window
    storage_url: str
    storage_sse: str | None  # S3 server-side encryption: AES256, aws:kms
    storage_kms_key_id: str | None
    policy_file: Path
    max_input_bytes: int
    max_upload_bytes: int  # HTTP uploads (413 beyond it)
    timing: ActivityTiming
    activity_threads: int  # concurrent stages of the general queue (each has its own thread)
    temporal_bin: str | None = field(default=None)
    archive_task_queue_override: str | None = None  # DOCJOBS_ARCHIVE_TASK_QUEUE
    ocr_activity_threads: int = 2  # concurrent OCR stages (a separate pool of threads: no queue starves another)
    ocr_chunk_threads: int = 2  # concurrent page ranges of long documents' OCR (threads of their own again)
    stage_memory_mb: int = 1536  # address space of each document child
    stall_seconds: float = 300.0  # a document child silent for this long is killed (input.too_complex)
    child_recycle_after: int = 50  # tasks a document child serves before a fresh fork replaces it (1: one per task)
    # bwrap: each tenant's document children confined (docjobs/isolation/confine.py); or unconfined
    sandbox: str = "bwrap"
    sandbox_work_mb: int = 2048  # the tmpfs each sandbox writes in: all its children's files together, at most
    metrics_host: str = "127.0.0.1"  # where `worker.py --metrics-port` listens (0.0.0.0 in a container)
    metrics_port: int | None = None  # None: no metrics endpoint
    metrics_refresh_seconds: float = 15.0  # how often a general worker re-reads the active-job gauges
    codec_keys: tuple[CodecKey, ...] = field(default=(), repr=False)  # the first one encrypts
    codec_token: str | None = field(default=None, repr=False)  # bearer token the codec server demands
    tenants_file: Path = Path("tenants.json")  # the API's tenants and their callbacks (docjobs/settings/tenants.py)
    # Keys the IDs of jobs and batches submitted without a key (docjobs/domain/idempotency.py, keyless_digest).
    # None: the data dir's, made on first use.
    job_id_key_file: Path | None = None
    deployment: str | None = None  # the Worker Deployment workers join (pinned jobs), None: unversioned
    build_id: str | None = None  # this worker's version within the deployment
    body_read_timeout_seconds: float = 30.0  # an upload whose body stalls this long is cut off (408)
    tenant_max_running_jobs: int = DEFAULT_MAX_RUNNING_JOBS  # the default limits of a tenant without its own
    tenant_max_bytes_per_day: int = DEFAULT_MAX_BYTES_PER_DAY
    tenant_max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES

    @property
    def embedded(self) -> bool:
        return self.temporal_address is None

    def job_id_key(self) -> bytes:
        """The deployment's job-ID key: every process that derives a keyless ID (the API, the CLI) must read the
        same one, or a resubmission would not find its job. `DOCJOBS_JOB_ID_KEY_FILE` names it (a compose
        secret); without it, the data dir's `job-ids.key` is read, or made once (32 random bytes, hex, 0600)."""
        path = self.job_id_key_file or self.data_dir / JOB_ID_KEY_NAME
        name = "DOCJOBS_JOB_ID_KEY_FILE" if self.job_id_key_file else f"the data dir's {JOB_ID_KEY_NAME}"
        if self.job_id_key_file is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                made = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(made, "w") as key_file:
                    key_file.write(secrets.token_hex(JOB_ID_KEY_BYTES) + "\n")
        try:
            text = path.read_text().strip()
        except OSError as error:
            raise ConfigError(f"{name}: cannot read the job-ID key ({error.strerror})") from None
        try:
            key = bytes.fromhex(text)
        except ValueError:
            key = b""
        if len(key) < JOB_ID_KEY_BYTES:
            raise ConfigError(f"{name} must hold a key of at least {JOB_ID_KEY_BYTES} bytes, as hex digits")
        return key

    @property
    def ocr_task_queue(self) -> str:
        """OCR stages have their own queue, so OCR workers scale on their own machines."""
        return self.ocr_task_queue_override or f"{self.task_queue}-ocr"

    @property
    def ocr_chunk_task_queue(self) -> str:
        """The page ranges of long documents' OCR have a queue (and slots) of their own beside the OCR queue, so a
        short document's `ocr` never waits behind a long one's ranges (docs/ocr.md, "Fair across jobs")."""
        return f"{self.ocr_task_queue}-chunks"

    @property
    def archive_task_queue(self) -> str:
        """Where archives renew: the task queue, unless a deployment gives renewals workers of their own."""
        return self.archive_task_queue_override or self.task_queue

    @property
    def notify_task_queue(self) -> str:
        """`notify` has its own queue (and threads), so a slow callback never holds a stage's slot."""
        return f"{self.task_queue}-notify"

    @property
    def tenant_limits(self) -> TenantLimits:
        """The limits of a tenant that has none of its own (DOCJOBS_TENANT_MAX_*)."""
        return TenantLimits(
            max_running_jobs=self.tenant_max_running_jobs,
            max_bytes_per_day=self.tenant_max_bytes_per_day,
            max_batch_bytes=self.tenant_max_batch_bytes,
        )

    @property
    def usage_dir(self) -> Path:
        """Where the API counts the bytes each tenant had accepted today (docjobs/settings/quotas.py)."""
        return self.data_dir / "usage"

    @property
    def work_dir(self) -> Path:
        """Where stage attempts keep their files while they run (removed after; swept after a crash)."""
        return self.data_dir / "work"

    @property
    def spool_dir(self) -> Path:
        """Where the HTTP API spools uploads before they are stored (removed after; swept after a crash)."""
        return self.data_dir / "uploads"

    @property
    def address(self) -> str:
        return self.temporal_address or f"127.0.0.1:{self.dev_server_port}"

    def blob_store(self) -> BlobStore:
        """The blob store named by DOCJOBS_STORAGE_URL (`file:///path` or `s3://bucket/prefix`)."""
        from docjobs.store.s3store import open_blob_store  # boto3 loads only where a store is opened

        try:
            return open_blob_store(self.storage_url, sse=self.storage_sse, kms_key_id=self.storage_kms_key_id)
        except ValueError as error:
            raise ConfigError(f"DOCJOBS_STORAGE_URL / DOCJOBS_STORAGE_SSE: {error}") from None

    @classmethod
    def from_env(cls, secrets_dir: Path = SECRETS_DIR) -> Self:
        """The `DOCJOBS_*` settings. A process that connects to Temporal reads `TemporalSettings.from_env`
        (docjobs/temporal/settings.py): the Temporal SDK's connection profile may name the cluster too."""
        return cls(**cls._fields_from(read_environment(secrets_dir)))

    @classmethod
    def _fields_from(cls, env: Environment) -> dict[str, Any]:
        """The settings named as their variable taken as they are; the others resolved from theirs."""
        data_dir = env.data_dir.resolve()
        as_named = {name: getattr(env, name) for name in {f.name for f in fields(cls)} & set(Environment.model_fields)}
        return as_named | dict(
            data_dir=data_dir,
            namespace=env.temporal_namespace or "default",
            ocr_task_queue_override=env.ocr_task_queue,
            archive_task_queue_override=env.archive_task_queue,
            dev_server_port=env.temporal_port,
            dev_server_ui_port=env.temporal_ui_port,
            storage_url=env.storage_url or (data_dir / "blobs").as_uri(),
            timing=ActivityTiming(
                lease_seconds=env.lease_seconds,
                base_seconds=env.stage_base_seconds,
                per_page_seconds=env.stage_per_page_seconds,
                ocr_per_page_seconds=env.ocr_per_page_seconds,
                max_attempts=env.max_attempts,
                notify_retry_seconds=env.notify_retry_seconds,
            ),
            ocr_activity_threads=env.ocr_activity_threads or env.activity_threads,
            ocr_chunk_threads=env.ocr_chunk_threads or env.ocr_activity_threads or env.activity_threads,
            metrics_port=env.metrics_port or None,
            codec_keys=_codec_keys(env),
            codec_token=_codec_token(env),
            tenants_file=env.tenants_file.resolve() if env.tenants_file else data_dir / "tenants.json",
            job_id_key_file=env.job_id_key_file.resolve() if env.job_id_key_file else None,
        )
