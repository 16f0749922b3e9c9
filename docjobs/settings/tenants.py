"""Tenants of the HTTP API and their API keys.

A key is a random 32-byte token (URL-safe base64), shown once when the tenant is created; only its sha256
is stored, in a JSON file (`DOCJOBS_TENANTS_FILE`, default `$DOCJOBS_DATA_DIR/tenants.json`). A tenant
name is also the first segment of its job IDs (`TENANT/KEY`), so it can never contain a `/`.

`default` is the tenant of command-line jobs (`starter.py submit/run` without `--tenant`): no API tenant
may have that name, or its key would read and cancel every CLI job. Names starting with `_` cannot be API
tenants either (the name pattern), so they too are free for jobs that never come through the API.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from docjobs.settings.config import ConfigError
from docjobs.settings.quotas import TenantLimits
from docjobs.settings.webhooks import Callback, parse_callback

TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
CLI_TENANT = "default"
RESERVED_TENANTS = frozenset({CLI_TENANT})


class TenantExists(Exception):
    pass


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _read(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {"tenants": {}}
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read the tenants file {path}: {error}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("tenants"), dict):
        raise ConfigError(f"the tenants file {path} has no 'tenants' object")
    return raw


def _update(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Read, change and atomically replace the tenants file, under a lock (0600: it holds webhook secrets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / f".{path.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        book = _read(path)
        change(book)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(book, out, indent=2, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp_name, 0o600)
            os.replace(tmp_name, path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise


def add_tenant(path: Path, name: str, *, policies: Sequence[str] | None = None) -> str:
    """Create tenant `name` and return its API key (the only time it is ever available).

    `policies`: the policies it may name (stored as `policies` in its entry); None stores no list, and then it
    may name every policy that is not trusted-only (docjobs/settings/policies.py: `PolicyBook.for_tenant`)."""
    if not TENANT_NAME.fullmatch(name):
        raise ConfigError("a tenant name is 1-63 characters of a-z, 0-9, '-' and '_', starting with a letter or digit")
    if name in RESERVED_TENANTS:
        raise ConfigError(f"the tenant name {name!r} is reserved for command-line jobs: choose another")
    key = secrets.token_urlsafe(32)

    def add(book: dict[str, Any]) -> None:
        if name in book["tenants"]:
            raise TenantExists(name)
        entry: dict[str, Any] = {"key_sha256": key_digest(key), "created_at": datetime.now(UTC).isoformat()}
        if policies is not None:
            entry["policies"] = sorted(set(policies))
        book["tenants"][name] = entry

    _update(path, add)
    return key


def set_callback(path: Path, name: str, url: str, *, allow_http_loopback: bool = False) -> str:
    """Register the tenant's callback URL; returns the new HMAC secret its events are signed with.

    Raises `CallbackInvalid` for a URL that could never be delivered to; `allow_http_loopback` (development
    and tests only) is stored with it and lets plain http go to a loopback address.
    """
    parse_callback(url, allow_http_loopback=allow_http_loopback)
    secret = secrets.token_urlsafe(32)

    def register(book: dict[str, Any]) -> None:
        if name not in book["tenants"]:
            raise ConfigError(f"no tenant {name!r}")
        book["tenants"][name].update(
            {"callback_url": url, "webhook_secret": secret, "callback_allow_http_loopback": allow_http_loopback}
        )

    _update(path, register)
    return secret


LIMIT_FIELDS = tuple(TenantLimits.model_fields)  # max_running_jobs, max_bytes_per_day, max_batch_bytes


def set_limits(path: Path, name: str, limits: dict[str, int]) -> dict[str, int]:
    """Set some of the tenant's own limits (the others stay as they were: its own, or the defaults); returns
    every limit it now has of its own. Kept under the entry's `limits` key."""
    unknown = set(limits) - set(LIMIT_FIELDS)
    if unknown:
        raise ConfigError(f"unknown tenant limits: {', '.join(sorted(unknown))}")
    if any(not isinstance(value, int) or value < 1 for value in limits.values()):
        raise ConfigError("a tenant limit is a whole number of at least 1")
    own: dict[str, int] = {}

    def change(book: dict[str, Any]) -> None:
        if name not in book["tenants"]:
            raise ConfigError(f"no tenant {name!r}")
        entry = book["tenants"][name]
        current = entry.get("limits") if isinstance(entry.get("limits"), dict) else {}
        own.update({**current, **limits})
        entry["limits"] = dict(own)

    _update(path, change)
    return own


def own_limits(entry: object, defaults: TenantLimits) -> TenantLimits:
    """A tenant entry's limits: its own where it has them, the defaults for the rest (a bad value: the default)."""
    given = entry.get("limits") if isinstance(entry, dict) else None
    if not isinstance(given, dict):
        return defaults
    try:
        own = {name: value for name, value in given.items() if name in LIMIT_FIELDS}
        return TenantLimits.model_validate(defaults.model_dump() | own)
    except ValidationError:
        return defaults


def _listed_policies(entry: object) -> tuple[str, ...] | None:
    """A tenant entry's `policies` list; None when it has none (or is no tenant entry)."""
    listed = entry.get("policies") if isinstance(entry, dict) else None
    if not isinstance(listed, list):
        return None
    return tuple(str(name) for name in listed)


def policies_of(path: Path, name: str) -> tuple[str, ...] | None:
    """The policies tenant `name` may name, if its entry lists them; None for the default (every policy that is
    not trusted-only), also for a tenant the file does not have (`default`, or a service's tenant)."""
    return _listed_policies(_read(path)["tenants"].get(name))


def callback_of(path: Path, name: str) -> Callback | None:
    """The tenant's callback, or None when it registered none."""
    entry = _read(path)["tenants"].get(name)
    if not isinstance(entry, dict) or "callback_url" not in entry:
        return None
    return Callback(
        url=str(entry["callback_url"]),
        secret=str(entry["webhook_secret"]),
        allow_http_loopback=entry.get("callback_allow_http_loopback") is True,
    )


class TenantBook:
    """Key digest -> tenant, re-read whenever the file changes (a tenant added while serving counts at once)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._by_digest: dict[str, str] = {}
        self._entries: dict[str, Any] = {}
        self._policies: dict[str, tuple[str, ...] | None] = {}

    def _refresh(self) -> None:
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = (0, 0)
        with self._lock:
            if stamp == self._stamp:
                return
            book = _read(self.path)
            self._by_digest = {  # a reserved name added by an older version never authenticates
                str(entry["key_sha256"]): name
                for name, entry in book["tenants"].items()
                if isinstance(entry, dict) and "key_sha256" in entry and name not in RESERVED_TENANTS
            }
            self._entries = dict(book["tenants"])
            self._policies = {name: _listed_policies(entry) for name, entry in book["tenants"].items()}
            self._stamp = stamp

    def policies(self, tenant: str) -> tuple[str, ...] | None:
        """The tenant's list of policies (as `policies_of`), from the cached file."""
        self._refresh()
        return self._policies.get(tenant)

    def authenticate(self, key: str) -> str | None:
        """The tenant whose key this is, or None."""
        self._refresh()
        return self._by_digest.get(key_digest(key))

    def limits(self, name: str, defaults: TenantLimits) -> TenantLimits:
        """The tenant's limits: its own from the file where it has them, else `defaults`."""
        self._refresh()
        return own_limits(self._entries.get(name), defaults)
