"""Connecting to real clusters as Temporal users do: the SDK's environment configuration (TEMPORAL_*, TOML
profiles) under docjobs' own DOCJOBS_TEMPORAL_* overrides, and mutual TLS for real.

`temporal server start-dev` has no TLS options (`--help` lists none, and its server configuration is built in
code), so the test puts the session's dev server behind a TLS terminator that demands a client certificate
from the test's throwaway CA, as a load balancer in front of a cluster's frontend does: the SDK's own TLS
stack (certificate, key, CA, server name) does the client side, Python's `ssl` verifies the client.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

from docjobs.domain.states import JobState
from docjobs.settings.config import ConfigError
from docjobs.settings.policies import PolicyBook
from docjobs.temporal.client import JobClient, connect
from docjobs.temporal.settings import TemporalSettings
from tests.conftest import Env, StartWorker, free_port, run_starter, wait_terminal

CONNECTION_VARIABLES = ("DOCJOBS_TEMPORAL_ADDRESS", "DOCJOBS_TEMPORAL_NAMESPACE")


def clean_settings(monkeypatch: pytest.MonkeyPatch, **variables: str) -> TemporalSettings:
    for name in list(os.environ):
        if name.startswith("TEMPORAL_") or name in CONNECTION_VARIABLES:
            monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", os.devnull)  # never the host's ~/.config/temporalio
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return TemporalSettings.from_env()


def test_which_variable_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    embedded = clean_settings(monkeypatch)
    assert (embedded.embedded, embedded.namespace) == (True, "default")
    assert embedded.connect_config() == {"target_host": embedded.address, "namespace": "default"}

    sdk = clean_settings(monkeypatch, TEMPORAL_ADDRESS="cloud.example:7233", TEMPORAL_NAMESPACE="acme.a1b2")
    assert (sdk.embedded, sdk.address, sdk.namespace) == (False, "cloud.example:7233", "acme.a1b2")

    ours = clean_settings(
        monkeypatch,
        TEMPORAL_ADDRESS="cloud.example:7233",
        TEMPORAL_NAMESPACE="acme.a1b2",
        DOCJOBS_TEMPORAL_ADDRESS="temporal.internal:7233",
        DOCJOBS_TEMPORAL_NAMESPACE="docjobs",
    )
    assert ours.connect_config()["target_host"] == "temporal.internal:7233"
    assert ours.connect_config()["namespace"] == "docjobs"

    profiles = tmp_path / "temporal.toml"
    profiles.write_text('[profile.prod]\naddress = "prod.example:7233"\nnamespace = "prod"\n')
    chosen = clean_settings(monkeypatch, TEMPORAL_CONFIG_FILE=str(profiles), TEMPORAL_PROFILE="prod")
    assert (chosen.address, chosen.namespace) == ("prod.example:7233", "prod")
    overridden = clean_settings(
        monkeypatch, TEMPORAL_CONFIG_FILE=str(profiles), TEMPORAL_PROFILE="prod", TEMPORAL_NAMESPACE="other"
    )
    assert overridden.namespace == "other"  # the environment wins over the file, as in every Temporal SDK


def test_the_api_key_reaches_the_connection_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "tmprl-api-key-for-the-test"
    settings = clean_settings(monkeypatch, TEMPORAL_ADDRESS="acme.a1b2.tmprl.cloud:7233", TEMPORAL_API_KEY=secret)
    config = settings.connect_config()
    assert (config["api_key"], config["tls"]) == (secret, True)  # an API key means TLS, as Temporal Cloud needs
    assert secret not in repr(settings)
    plain = clean_settings(monkeypatch, TEMPORAL_ADDRESS="acme.a1b2.tmprl.cloud:7233", TEMPORAL_TLS="false")
    assert plain.connect_config()["tls"] is False


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"TEMPORAL_API_KEY": "k"}, "need a cluster: set TEMPORAL_ADDRESS"),
        ({"TEMPORAL_TLS_CLIENT_CERT_PATH": "/x.pem"}, "need a cluster: set TEMPORAL_ADDRESS"),
        ({"TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml"}, "TEMPORAL_CONFIG_FILE: /nonexistent/temporal.toml"),
        ({"TEMPORAL_CONFIG_FILE": "PROFILES", "TEMPORAL_PROFILE": "nope"}, "Profile 'nope' not found"),
    ],
)
def test_connection_settings_that_cannot_work_are_config_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variables: dict[str, str], expected: str
) -> None:
    profiles = tmp_path / "temporal.toml"
    profiles.write_text('[profile.default]\naddress = "a.example:7233"\n')
    with pytest.raises(ConfigError, match=expected):
        clean_settings(
            monkeypatch, **{name: value.replace("PROFILES", str(profiles)) for name, value in variables.items()}
        )


def test_an_unreadable_certificate_is_a_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing_cert = clean_settings(
        monkeypatch, TEMPORAL_ADDRESS="a.example:7233", TEMPORAL_TLS_CLIENT_CERT_PATH=str(tmp_path / "none.pem")
    )
    with pytest.raises(ConfigError, match=r"TEMPORAL_TLS_.*none\.pem"):
        missing_cert.connect_config()


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # a client certificate from another CA
    stranger_key: Path


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return path


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer or (name, key)
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    if server:
        alt_names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(folder: Path) -> Pki:
    """A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate it signed."""

    def pem(certificate: x509.Certificate, name: str) -> Path:
        path = folder / name
        path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return path

    ca_key, stranger_ca_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("docjobs test CA", ca_key, None, ca=True)
    stranger_ca = _certificate("another CA", stranger_ca_key, None, ca=True)
    server_key, client_key, stranger_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    return Pki(
        ca=pem(ca, "ca.pem"),
        server_cert=pem(_certificate("frontend", server_key, (ca.subject, ca_key), server=True), "server.pem"),
        server_key=_write_key(server_key, folder / "server.key"),
        client_cert=pem(_certificate("docjobs", client_key, (ca.subject, ca_key)), "client.pem"),
        client_key=_write_key(client_key, folder / "client.key"),
        stranger_cert=pem(_certificate("stranger", stranger_key, (stranger_ca.subject, stranger_ca_key)), "x.pem"),
        stranger_key=_write_key(stranger_key, folder / "x.key"),
    )


class MutualTlsFrontend:
    """A TLS endpoint (HTTP/2 by ALPN) that demands a client certificate from `pki.ca`, then relays the
    decrypted gRPC stream to a plaintext Temporal frontend; its own thread and event loop, so blocking test
    code (a CLI subprocess) never stalls it."""

    def __init__(self, pki: Pki, backend: tuple[str, int]) -> None:
        self.port = free_port()
        self._backend = backend
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
        self._context.load_cert_chain(pki.server_cert, pki.server_key)
        self._context.verify_mode = ssl.CERT_REQUIRED
        self._context.set_alpn_protocols(["h2"])
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "the TLS frontend did not start"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._relay, "127.0.0.1", self.port, ssl=self._context)
        )
        self._ready.set()
        self._loop.run_forever()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        backend_reader, backend_writer = await asyncio.open_connection(*self._backend)

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while chunk := await reader.read(65536):
                    writer.write(chunk)
                    await writer.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            finally:
                writer.close()

        await asyncio.gather(pipe(client_reader, backend_writer), pipe(backend_reader, client_writer))

    async def _shutdown(self) -> None:
        self._server.close()
        relays = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for relay in relays:
            relay.cancel()
        await asyncio.gather(*relays, return_exceptions=True)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def frontend(env: Env, pki: Pki) -> Iterator[MutualTlsFrontend]:
    tls = MutualTlsFrontend(pki, ("127.0.0.1", int(env.vars["DOCJOBS_TEMPORAL_PORT"])))
    yield tls
    tls.close()


def mtls_variables(pki: Pki, frontend: MutualTlsFrontend, *, client_cert: bool = True) -> dict[str, str]:
    """Only the SDK's variables: what a deployment sets for a cluster with mutual TLS."""
    variables = {
        "TEMPORAL_ADDRESS": f"127.0.0.1:{frontend.port}",
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca),
        "TEMPORAL_TLS_SERVER_NAME": "localhost",
    }
    if client_cert:
        variables |= {
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki.client_cert),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki.client_key),
        }
    return variables


async def test_mutual_tls_from_the_worker_the_cli_and_the_client(
    env: Env, pki: Pki, frontend: MutualTlsFrontend, start_worker: StartWorker, policies: PolicyBook, samples: Path
) -> None:
    queue = f"mtls-{os.getpid()}"
    variables = {**mtls_variables(pki, frontend), "DOCJOBS_TASK_QUEUE": queue}
    settings = env.settings(**variables)
    assert not settings.embedded and settings.address == f"127.0.0.1:{frontend.port}"
    worker = start_worker(queue, **variables)  # the worker connects through the TLS frontend only
    jobs = JobClient(await connect(settings), settings)
    submitted = await jobs.submit(samples / "sample.pdf", "standard", key=f"mtls-{os.getpid()}")
    status = await wait_terminal(jobs, submitted.job_id)
    assert status.state is JobState.SUCCEEDED, status.failure_code
    code, shown, _ = run_starter(env, "status", submitted.job_id, timeout=120, **variables)
    assert (code, shown["state"]) == (0, "succeeded")
    assert worker.stop() == 0  # while the frontend still serves it


async def test_without_a_trusted_client_certificate_the_cluster_refuses(
    env: Env, pki: Pki, frontend: MutualTlsFrontend
) -> None:
    anonymous = env.settings(**mtls_variables(pki, frontend, client_cert=False))
    with pytest.raises(RuntimeError):
        await connect(anonymous)
    stranger = env.settings(
        **mtls_variables(pki, frontend, client_cert=False),
        TEMPORAL_TLS_CLIENT_CERT_PATH=str(pki.stranger_cert),
        TEMPORAL_TLS_CLIENT_KEY_PATH=str(pki.stranger_key),
    )
    with pytest.raises(RuntimeError):
        await connect(stranger)


async def test_mutual_tls_from_a_toml_profile(env: Env, pki: Pki, frontend: MutualTlsFrontend, tmp_path: Path) -> None:
    profiles = tmp_path / "temporal.toml"
    profiles.write_text(
        f"""[profile.cluster]
address = "127.0.0.1:{frontend.port}"
namespace = "default"
[profile.cluster.tls]
server_name = "localhost"
server_ca_cert_path = "{pki.ca}"
client_cert_path = "{pki.client_cert}"
client_key_path = "{pki.client_key}"
"""
    )
    settings = env.settings(TEMPORAL_CONFIG_FILE=str(profiles), TEMPORAL_PROFILE="cluster")
    assert settings.address == f"127.0.0.1:{frontend.port}"
    client = await connect(settings)
    described = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace="default"))
    assert described.namespace_info.name == "default"
