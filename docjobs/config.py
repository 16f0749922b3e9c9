"""Settings from the environment, with the embedded defaults (local dev server, blobs on disk).

Free of Temporal: how to reach a cluster beyond its address and namespace (API key, TLS) is the Temporal
layer's (docjobs/temporal/settings.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

from docjobs.models import ActivityTiming
from docjobs.sealing import CodecKey, parse_keys
from docjobs.storage import BlobStore

SHIPPED_POLICIES = Path(__file__).with_name("policies.toml")
NumberT = TypeVar("NumberT", int, float)


class ConfigError(Exception):
    """A setting or policy file that cannot be used; the message names the setting."""


def _env_number(name: str, default: NumberT, kind: Callable[[str], NumberT]) -> NumberT:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number ({kind.__name__})") from None


def _env_int(name: str, default: int) -> int:
    return _env_number(name, default, int)


def _env_float(name: str, default: float) -> float:
    return _env_number(name, default, float)


def _codec_keys() -> tuple[CodecKey, ...]:
    """Payload encryption keys from DOCJOBS_CODEC_KEYS_FILE (preferred: no secret in the environment) or
    DOCJOBS_CODEC_KEYS; errors name the variable, never a key."""
    inline = os.environ.get("DOCJOBS_CODEC_KEYS") or None
    path = os.environ.get("DOCJOBS_CODEC_KEYS_FILE") or None
    if inline and path:
        raise ConfigError("set DOCJOBS_CODEC_KEYS or DOCJOBS_CODEC_KEYS_FILE, not both")
    name = "DOCJOBS_CODEC_KEYS_FILE" if path else "DOCJOBS_CODEC_KEYS"
    try:
        text = Path(path).read_text() if path else inline or ""
        keys = parse_keys(text)
    except OSError as error:
        raise ConfigError(f"{name}: cannot read the key file ({error.strerror})") from None
    except ValueError as error:
        raise ConfigError(f"{name}: {error}") from None
    if (inline or path) and not keys:
        raise ConfigError(f"{name} is set but holds no key")
    return keys


def _codec_token() -> str | None:
    """The codec endpoint's bearer token: DOCJOBS_CODEC_TOKEN_FILE (a compose secret) or DOCJOBS_CODEC_TOKEN."""
    inline = os.environ.get("DOCJOBS_CODEC_TOKEN") or None
    path = os.environ.get("DOCJOBS_CODEC_TOKEN_FILE") or None
    if inline and path:
        raise ConfigError("set DOCJOBS_CODEC_TOKEN or DOCJOBS_CODEC_TOKEN_FILE, not both")
    if path is None:
        return inline
    try:
        token = Path(path).read_text().strip()
    except OSError as error:
        raise ConfigError(f"DOCJOBS_CODEC_TOKEN_FILE: cannot read the token file ({error.strerror})") from None
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
    ocr_activity_threads: int = 2  # concurrent OCR stages (a separate pool of threads: no queue starves another)
    stage_memory_mb: int = 1536  # address space of each document child
    stall_seconds: float = 300.0  # a document child silent for this long is killed (input.too_complex)
    child_recycle_after: int = 50  # tasks a document child serves before a fresh one replaces it
    metrics_host: str = "127.0.0.1"  # where `worker.py --metrics-port` listens (0.0.0.0 in a container)
    metrics_port: int | None = None  # None: no metrics endpoint
    metrics_refresh_seconds: float = 15.0  # how often a general worker re-reads the active-job gauges
    codec_keys: tuple[CodecKey, ...] = field(default=(), repr=False)  # the first one encrypts
    codec_token: str | None = field(default=None, repr=False)  # bearer token the codec server demands

    @property
    def embedded(self) -> bool:
        return self.temporal_address is None

    @property
    def ocr_task_queue(self) -> str:
        """OCR stages have their own queue, so OCR workers scale on their own machines."""
        return self.ocr_task_queue_override or f"{self.task_queue}-ocr"

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
        from docjobs.s3store import open_blob_store  # boto3 loads only where a store is opened

        try:
            return open_blob_store(self.storage_url, sse=self.storage_sse, kms_key_id=self.storage_kms_key_id)
        except ValueError as error:
            raise ConfigError(f"DOCJOBS_STORAGE_URL / DOCJOBS_STORAGE_SSE: {error}") from None

    @classmethod
    def from_env(cls) -> Self:
        """The `DOCJOBS_*` settings. A process that connects to Temporal reads `TemporalSettings.from_env`
        (docjobs/temporal/settings.py): the Temporal SDK's connection profile may name the cluster too."""
        return cls(**cls._fields_from_env())

    @classmethod
    def _fields_from_env(cls) -> dict[str, Any]:
        data_dir = Path(os.environ.get("DOCJOBS_DATA_DIR") or ".docjobs").resolve()
        threads = _env_int("DOCJOBS_ACTIVITY_THREADS", max(2, os.cpu_count() or 2))
        return dict(
            data_dir=data_dir,
            temporal_address=os.environ.get("DOCJOBS_TEMPORAL_ADDRESS") or None,
            namespace=os.environ.get("DOCJOBS_TEMPORAL_NAMESPACE") or "default",
            task_queue=os.environ.get("DOCJOBS_TASK_QUEUE") or "docjobs",
            ocr_task_queue_override=os.environ.get("DOCJOBS_OCR_TASK_QUEUE") or None,
            dev_server_port=_env_int("DOCJOBS_TEMPORAL_PORT", 7233),
            dev_server_ui_port=_env_int("DOCJOBS_TEMPORAL_UI_PORT", 8233),
            retention=os.environ.get("DOCJOBS_RETENTION") or "720h",
            storage_url=os.environ.get("DOCJOBS_STORAGE_URL") or (data_dir / "blobs").as_uri(),
            storage_sse=os.environ.get("DOCJOBS_STORAGE_SSE") or None,
            storage_kms_key_id=os.environ.get("DOCJOBS_STORAGE_KMS_KEY_ID") or None,
            policy_file=Path(os.environ.get("DOCJOBS_POLICY_FILE") or SHIPPED_POLICIES),
            max_input_bytes=_env_int("DOCJOBS_MAX_INPUT_BYTES", 100 * 1024 * 1024),
            max_upload_bytes=_env_int("DOCJOBS_MAX_UPLOAD_BYTES", 20 * 1024 * 1024),
            timing=ActivityTiming(
                lease_seconds=_env_float("DOCJOBS_LEASE_SECONDS", 30.0),
                base_seconds=_env_float("DOCJOBS_STAGE_BASE_SECONDS", 60.0),
                per_page_seconds=_env_float("DOCJOBS_STAGE_PER_PAGE_SECONDS", 10.0),
                ocr_per_page_seconds=_env_float("DOCJOBS_OCR_PER_PAGE_SECONDS", 60.0),
                max_attempts=_env_int("DOCJOBS_MAX_ATTEMPTS", 5),
            ),
            activity_threads=threads,
            ocr_activity_threads=_env_int("DOCJOBS_OCR_ACTIVITY_THREADS", threads),
            stage_memory_mb=_env_int("DOCJOBS_STAGE_MEMORY_MB", 1536),
            stall_seconds=_env_float("DOCJOBS_STALL_SECONDS", 300.0),
            child_recycle_after=_env_int("DOCJOBS_CHILD_RECYCLE_AFTER", 50),
            temporal_bin=os.environ.get("DOCJOBS_TEMPORAL_BIN") or None,
            metrics_host=os.environ.get("DOCJOBS_METRICS_HOST") or "127.0.0.1",
            metrics_port=_env_int("DOCJOBS_METRICS_PORT", 0) or None,
            metrics_refresh_seconds=_env_float("DOCJOBS_METRICS_REFRESH_SECONDS", 15.0),
            codec_keys=_codec_keys(),
            codec_token=_codec_token(),
        )
