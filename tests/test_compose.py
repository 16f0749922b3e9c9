"""docker-compose.temporal.yml cannot run here (no Docker engine): check it is consistent with docjobs."""

from __future__ import annotations

import base64
import os
import re
import secrets
import subprocess
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any
from unittest import mock
from urllib.parse import urlparse

import pytest
import yaml
from temporalio.common import WorkerDeploymentVersion

import starter
from docjobs import worker
from docjobs.api.codec_server import create_codec_app
from docjobs.settings import config
from docjobs.signing.dev_ca import ensure_dev_signer
from docjobs.signing.environment import ENV_NAMES as SIGNING_ENV_NAMES
from docjobs.store.s3store import S3BlobStore
from docjobs.temporal.deployments import deployment_config
from docjobs.temporal.settings import TemporalSettings
from tests.conftest import REPO
from workflows import search_attributes

COMPOSE = yaml.safe_load((REPO / "docker-compose.temporal.yml").read_text())
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
PROMETHEUS_CONFIG = REPO / "ops" / "prometheus" / "prometheus.yml"

WORKERS = {"docjobs-worker-general": ["general", "batch"], "docjobs-worker-ocr": ["ocr"]}  # the scalable services
CLUSTER_CLIENTS = (*WORKERS, "docjobs-api")  # every Temporal client of the full profile
METRICS_PORT = 9464

# Environment variables docjobs reads: config.Environment's, and any a module reads itself with
# os.environ.get("...") / os.environ["..."].
_ENV_READ = re.compile(r'environ(?:\.get\(|\[)\s*"(DOCJOBS_[A-Z0-9_]+)"')
_SOURCES = [
    *(REPO / "docjobs").rglob("*.py"),
    *(REPO / "activities").glob("*.py"),
    REPO / "worker.py",
    REPO / "starter.py",
]
KNOWN_SETTINGS = set(config.VARIABLES) | {name for path in _SOURCES for name in _ENV_READ.findall(path.read_text())}


def environment(name: str) -> dict[str, str]:
    return {key: str(value) for key, value in SERVICES[name].get("environment", {}).items()}


def published(name: str) -> dict[int, int]:
    """Container port -> host port, from a service's short-syntax `ports` (with or without a host IP)."""
    ports = {}
    for entry in SERVICES[name].get("ports", []):
        *_ip, host, container = str(entry).split(":")
        ports[int(container)] = int(host)
    return ports


def named_volumes(name: str) -> dict[str, str]:
    """Named volume -> mount point (bind mounts start with . or /)."""
    mounts = (str(entry).split(":") for entry in SERVICES[name].get("volumes", []))
    return {source: target for source, target, *_mode in mounts if not source.startswith((".", "/"))}


def option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def created_bucket() -> str:
    command = " ".join(SERVICES["minio-setup"]["command"])
    match = re.search(r"\bmc mb (?:--ignore-existing )?local/([a-z0-9.-]+)", command)
    assert match, "minio-setup creates no bucket"
    return match.group(1)


def test_services_and_dependencies() -> None:
    assert {"postgresql", "temporal", "temporal-ui", "temporal-admin-tools", "docjobs-worker"} <= SERVICES.keys()
    for name, service in SERVICES.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in SERVICES, f"{name} depends on unknown {dependency}"
        for volume in named_volumes(name):
            assert volume in COMPOSE["volumes"], f"{name} mounts undeclared {volume}"
        for secret in service.get("secrets", []):
            assert secret in COMPOSE["secrets"], f"{name} uses undeclared secret {secret}"
    assert "127.0.0.1:7233:7233" in SERVICES["temporal"]["ports"]
    assert SERVICES["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgresql"


def test_every_published_port_is_bound_to_loopback() -> None:
    """The Temporal frontend has no authentication here: nothing may be reachable from beyond the host."""
    entries = [(name, entry) for name, service in SERVICES.items() for entry in service.get("ports", [])]
    assert {"temporal", "temporal-ui", "docjobs-api", "docjobs-codec"} <= {name for name, _ in entries}
    for name, entry in entries:
        if isinstance(entry, dict):  # long syntax
            assert entry.get("host_ip") == "127.0.0.1", f"{name}: {entry}"
        else:
            assert re.fullmatch(r"127\.0\.0\.1:\d+:\d+(/tcp|/udp)?", str(entry)), f"{name} publishes {entry}"


def test_the_default_set_is_unchanged_and_the_cluster_path_is_a_profile() -> None:
    default = {name for name, service in SERVICES.items() if "profiles" not in service}
    assert default == {"postgresql", "temporal", "temporal-ui", "temporal-admin-tools", "docjobs-worker"}
    for name in SERVICES.keys() - default:
        assert SERVICES[name]["profiles"] == ["full"], name
    for name in default:  # `docker compose up` without a profile must not need a service of the profile
        assert set(SERVICES[name].get("depends_on", {})) <= default, name


def test_secret_files_are_provided_and_never_committed(tmp_path: Path) -> None:
    """Each secret file is gitignored and has a committed `.example`, or is what `make secrets` generates."""
    dev = ensure_dev_signer(tmp_path / "signing")  # what `make secrets` runs for ops/secrets/signing
    assert dev.key_path is not None and dev.cert_path is not None
    generated = {REPO / "ops/secrets/signing" / path.name for path in (dev.key_path, dev.cert_path, *dev.trust_roots)}
    makefile = (REPO / "Makefile").read_text()
    assert "ensure_dev_signer(Path('ops/secrets/signing'))" in makefile and "> ops/secrets/codec_keys" in makefile
    generated |= {REPO / "ops/secrets" / name for name in re.findall(r"> ops/secrets/(\w+)\n", makefile)}
    for name, secret in COMPOSE["secrets"].items():
        path = (REPO / secret["file"]).resolve()
        example = path.with_name(path.name + ".example")
        assert path in generated or example.is_file(), f"secret {name}: neither generated nor exemplified"
        ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", str(path)], check=False)
        assert ignored.returncode == 0, f"secret {name} is not gitignored"
        if example.is_file():
            kept = subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", str(example)], check=False)
            assert kept.returncode == 1, f"{example.name} is gitignored"


def test_worker_environment_is_docjobs_configuration() -> None:
    worker_service = SERVICES["docjobs-worker"]
    env = environment("docjobs-worker")
    with mock.patch.dict(os.environ, env, clear=True):
        settings = TemporalSettings.from_env()
    assert settings.address == "temporal:7233" and not settings.embedded
    assert settings.storage_url.startswith(f"file://{env['DOCJOBS_DATA_DIR']}/")
    settings.blob_store()  # a usable store, not just a string
    assert env["DOCJOBS_DATA_DIR"] in named_volumes("docjobs-worker").values()  # blobs live on the shared volume
    assert worker_service["command"] == ["python", "worker.py"]
    assert (REPO / worker_service.get("build", ".")).joinpath("Dockerfile").is_file()


def test_docjobs_services_set_only_settings_docjobs_reads() -> None:
    docjobs_services = [name for name, service in SERVICES.items() if "build" in service]
    assert {"docjobs-worker", *CLUSTER_CLIENTS, "docjobs-codec"} <= set(docjobs_services)
    assert {"DOCJOBS_STORAGE_URL", "DOCJOBS_TENANTS_FILE", "DOCJOBS_TRUST_ROOTS"} <= KNOWN_SETTINGS  # found
    for name in docjobs_services:
        unknown = {key for key in environment(name) if key.startswith("DOCJOBS_")} - KNOWN_SETTINGS
        assert not unknown, f"{name} sets {unknown}, which docjobs does not read"


@pytest.mark.parametrize("name", CLUSTER_CLIENTS)
def test_cluster_services_share_the_minio_bucket_and_nothing_local(name: str, tmp_path: Path) -> None:
    env = environment(name)
    secret = tmp_path / "docjobs_codec_keys"  # what compose mounts at /run/secrets/docjobs_codec_keys
    secret.write_text("k1:" + base64.b64encode(os.urandom(32)).decode() + "\n")
    with mock.patch.dict(os.environ, {**env, "DOCJOBS_CODEC_KEYS_FILE": str(secret)}, clear=True):
        settings = TemporalSettings.from_env()
        store = settings.blob_store()
    assert settings.address == "temporal:7233" and not settings.embedded
    assert isinstance(store, S3BlobStore) and store.bucket == created_bucket()
    assert settings.storage_sse is None  # MinIO without a KMS refuses SSE-S3
    assert urlparse(env["AWS_ENDPOINT_URL"]).hostname == "minio"
    assert env["AWS_ACCESS_KEY_ID"] == SERVICES["minio"]["environment"]["MINIO_ROOT_USER"]
    assert {"temporal-admin-tools", "minio-setup"} <= set(SERVICES[name]["depends_on"])
    assert "docjobs_codec_keys" in SERVICES[name]["secrets"]
    assert env["DOCJOBS_CODEC_KEYS_FILE"] == "/run/secrets/docjobs_codec_keys"
    # Temp and work files stay in the container: no volume at, above or below the data dir.
    data_dir = PurePosixPath(env["DOCJOBS_DATA_DIR"])
    for target in map(PurePosixPath, named_volumes(name).values()):
        assert not (data_dir.is_relative_to(target) or target.is_relative_to(data_dir)), f"{name} shares {target}"
    # A task queue is served only by workers that share one blob store: never the default worker's queues.
    default = environment("docjobs-worker")
    with mock.patch.dict(os.environ, default, clear=True):
        default_settings = TemporalSettings.from_env()
    assert {settings.task_queue, settings.ocr_task_queue}.isdisjoint(
        {default_settings.task_queue, default_settings.ocr_task_queue}
    )


def test_the_api_reads_the_job_id_key_from_its_secret(tmp_path: Path) -> None:
    """Keyless IDs are keyed: every API replica, and the CLI in its container, reads the one mounted key."""
    env = environment("docjobs-api")
    assert env["DOCJOBS_JOB_ID_KEY_FILE"] == "/run/secrets/docjobs_job_id_key"
    assert "docjobs_job_id_key" in SERVICES["docjobs-api"]["secrets"]
    assert COMPOSE["secrets"]["docjobs_job_id_key"]["file"] == "./ops/secrets/job_id_key"  # `make secrets` makes it
    secret = tmp_path / "docjobs_job_id_key"
    secret.write_text(secrets.token_hex(32) + "\n")
    codec = tmp_path / "docjobs_codec_keys"
    codec.write_text("k1:" + base64.b64encode(os.urandom(32)).decode() + "\n")
    mounted = {"DOCJOBS_JOB_ID_KEY_FILE": str(secret), "DOCJOBS_CODEC_KEYS_FILE": str(codec)}
    with mock.patch.dict(os.environ, {**env, **mounted}, clear=True):
        settings = TemporalSettings.from_env()
    assert settings.job_id_key() == bytes.fromhex(secret.read_text())
    unmounted = replace(settings, job_id_key_file=tmp_path / "unmounted")
    with pytest.raises(config.ConfigError, match="DOCJOBS_JOB_ID_KEY_FILE"):
        unmounted.job_id_key()
    assert not (tmp_path / "unmounted").exists()  # a named key is never made up: replicas would differ


def test_every_cluster_client_uses_one_task_queue_and_store() -> None:
    shared = ("DOCJOBS_TEMPORAL_ADDRESS", "DOCJOBS_TASK_QUEUE", "DOCJOBS_STORAGE_URL", "AWS_ENDPOINT_URL")
    assert len({tuple(environment(name).get(key) for key in shared) for name in CLUSTER_CLIENTS}) == 1


def test_general_workers_share_one_signer_and_the_tenants() -> None:
    env = environment("docjobs-worker-general")
    secret_paths = {f"/run/secrets/{secret}" for secret in SERVICES["docjobs-worker-general"]["secrets"]}
    for setting in ("DOCJOBS_SIGNING_KEY", "DOCJOBS_SIGNING_CERT", "DOCJOBS_TRUST_ROOTS"):
        assert setting in SIGNING_ENV_NAMES and env[setting] in secret_paths
    tenants = PurePosixPath(env["DOCJOBS_TENANTS_FILE"])
    assert tenants.parent in map(PurePosixPath, named_volumes("docjobs-worker-general").values())
    assert environment("docjobs-api")["DOCJOBS_TENANTS_FILE"] == str(tenants)
    assert str(tenants.parent) in named_volumes("docjobs-api").values()


@pytest.mark.parametrize(("name", "queues"), WORKERS.items())
def test_worker_commands_parse_with_the_worker_flags(name: str, queues: list[str]) -> None:
    command = SERVICES[name]["command"]
    assert command[:2] == ["python", "worker.py"]
    args = worker.build_parser().parse_args(command[2:])
    assert (args.queue, args.metrics_port) == (queues, METRICS_PORT)
    assert environment(name)["DOCJOBS_METRICS_HOST"] == "0.0.0.0"
    assert environment(name)["DOCJOBS_LOG_FORMAT"] == "json"


@pytest.mark.parametrize("name", WORKERS)
def test_workers_are_versions_of_the_deployment_the_api_container_manages(name: str) -> None:
    env = environment(name)
    assert env["DOCJOBS_DEPLOYMENT"] == environment("docjobs-api")["DOCJOBS_DEPLOYMENT"]  # `deploy` runs there
    build_id = re.fullmatch(r"\$\{DOCJOBS_BUILD_ID:-([\w.@-]+)\}", env["DOCJOBS_BUILD_ID"])  # set per release
    assert build_id, env["DOCJOBS_BUILD_ID"]
    version = {"DOCJOBS_DEPLOYMENT": env["DOCJOBS_DEPLOYMENT"], "DOCJOBS_BUILD_ID": build_id.group(1)}
    with mock.patch.dict(os.environ, version, clear=True):
        versioned = deployment_config(TemporalSettings.from_env())
    assert versioned is not None and versioned.version == WorkerDeploymentVersion(env["DOCJOBS_DEPLOYMENT"], "dev")
    assert "DOCJOBS_DEPLOYMENT" not in environment("docjobs-worker")  # the quick start's worker: unversioned


@pytest.mark.parametrize("name", WORKERS)
def test_workers_scale_with_no_fixed_name_or_host_port(name: str) -> None:
    assert "container_name" not in SERVICES[name]
    assert "ports" not in SERVICES[name]


def test_api_command_parses_with_the_starter_flags() -> None:
    command = SERVICES["docjobs-api"]["command"]
    assert command[:2] == ["python", "starter.py"]
    args = starter.build_parser().parse_args(command[2:])
    assert (args.command, args.host, args.with_worker) == ("serve", "0.0.0.0", False)
    assert args.port in published("docjobs-api")


def test_the_ui_decodes_through_the_published_codec_server() -> None:
    ui = environment("temporal-ui")
    endpoint = urlparse(ui["TEMPORAL_CODEC_ENDPOINT"])
    assert endpoint.hostname == "localhost"  # the browser calls it
    assert ui["TEMPORAL_CODEC_PASS_ACCESS_TOKEN"] == "false"
    command = SERVICES["docjobs-codec"]["command"]
    assert command[:2] == ["python", "starter.py"]
    args = starter.build_parser().parse_args(command[2:])
    assert (args.command, args.host) == ("codec-server", "0.0.0.0")
    assert published("docjobs-codec")[args.port] == endpoint.port
    assert args.cors_origin == f"http://localhost:{published('temporal-ui')[8080]}"
    assert ui["TEMPORAL_CORS_ORIGINS"] == args.cors_origin
    assert SERVICES["docjobs-codec"]["secrets"] == ["docjobs_codec_keys", "docjobs_codec_token"]
    assert environment("docjobs-codec")["DOCJOBS_CODEC_KEYS_FILE"] == "/run/secrets/docjobs_codec_keys"


def test_mounted_secrets_are_read_from_the_secrets_directory(tmp_path: Path) -> None:
    """compose mounts secrets in /run/secrets: a secret value there counts unless the environment gives it (or its
    *_FILE path, which may name that very file); a path setting is never read from there."""
    key = "k1:" + base64.b64encode(os.urandom(32)).decode()
    (tmp_path / "docjobs_codec_keys").write_text(key + "\n")
    (tmp_path / "docjobs_codec_token").write_text("mounted-token\n")
    (tmp_path / "docjobs_signing_key").write_text("-----BEGIN PRIVATE KEY-----\n")
    with mock.patch.dict(os.environ, {}, clear=True):
        mounted = TemporalSettings.from_env(secrets_dir=tmp_path)
        assert config.read_environment(tmp_path).signing_key is None
    assert [codec_key.key_id for codec_key in mounted.codec_keys] == ["k1"]
    assert mounted.codec_token == "mounted-token"
    named = {"DOCJOBS_CODEC_KEYS_FILE": str(tmp_path / "docjobs_codec_keys"), "DOCJOBS_CODEC_TOKEN": "env-token"}
    with mock.patch.dict(os.environ, named, clear=True):
        both = TemporalSettings.from_env(secrets_dir=tmp_path)
    assert both.codec_keys == mounted.codec_keys and both.codec_token == "env-token"
    with mock.patch.dict(os.environ, {}, clear=True):
        assert TemporalSettings.from_env(secrets_dir=tmp_path / "none").codec_keys == ()


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"DOCJOBS_MAX_ATTEMPTS": "five"}, "DOCJOBS_MAX_ATTEMPTS must be a number (int)"),
        ({"DOCJOBS_LEASE_SECONDS": "soon"}, "DOCJOBS_LEASE_SECONDS must be a number (float)"),
        ({"DOCJOBS_TEMPORAL_PORT": "7233x"}, "DOCJOBS_TEMPORAL_PORT must be a number (int)"),
    ],
)
def test_a_bad_setting_is_a_config_error_naming_it(variables: dict[str, str], expected: str) -> None:
    with mock.patch.dict(os.environ, variables, clear=True), pytest.raises(config.ConfigError) as error:
        TemporalSettings.from_env()
    assert str(error.value) == expected


def test_settings_keep_their_names_and_defaults(tmp_path: Path) -> None:
    empty = {name: "" for name in config.VARIABLES}  # an empty value counts as unset
    with mock.patch.dict(os.environ, {**empty, "DOCJOBS_DATA_DIR": str(tmp_path)}, clear=True):
        settings = TemporalSettings.from_env(secrets_dir=tmp_path / "none")
    assert (settings.task_queue, settings.ocr_task_queue, settings.namespace) == ("docjobs", "docjobs-ocr", "default")
    assert (settings.dev_server_port, settings.dev_server_ui_port, settings.retention) == (7233, 8233, "720h")
    assert settings.timing.model_dump() == {
        "lease_seconds": 30.0,
        "base_seconds": 60.0,
        "per_page_seconds": 10.0,
        "ocr_per_page_seconds": 60.0,
        "max_attempts": 5,
        "notify_retry_seconds": 1.0,
    }
    assert settings.storage_url == (tmp_path / "blobs").as_uri() and settings.tenants_file == tmp_path / "tenants.json"
    assert settings.metrics_port is None and settings.ocr_activity_threads == settings.activity_threads >= 2
    assert (settings.max_input_bytes, settings.max_upload_bytes) == (100 * 1024 * 1024, 20 * 1024 * 1024)


def test_the_codec_server_has_its_token_and_would_not_start_without_it(tmp_path: Path) -> None:
    env = environment("docjobs-codec")
    assert env["DOCJOBS_CODEC_TOKEN_FILE"] == "/run/secrets/docjobs_codec_token"
    assert "docjobs_codec_token" in SERVICES["docjobs-codec"]["secrets"]
    keys, token = tmp_path / "docjobs_codec_keys", tmp_path / "docjobs_codec_token"  # what compose mounts
    keys.write_text("k1:" + base64.b64encode(os.urandom(32)).decode() + "\n")
    token.write_text("a-token-from-make-secrets\n")
    args = starter.build_parser().parse_args(SERVICES["docjobs-codec"]["command"][2:])
    mounted = {"DOCJOBS_CODEC_KEYS_FILE": str(keys), "DOCJOBS_CODEC_TOKEN_FILE": str(token)}
    with mock.patch.dict(os.environ, {**env, **mounted}, clear=True):
        settings = TemporalSettings.from_env()
    assert settings.codec_token == "a-token-from-make-secrets"
    create_codec_app(settings, cors_origin=args.cors_origin, host=args.host)
    with mock.patch.dict(os.environ, {"DOCJOBS_CODEC_KEYS_FILE": str(keys)}, clear=True):
        tokenless = TemporalSettings.from_env()
    with pytest.raises(config.ConfigError, match="DOCJOBS_CODEC_TOKEN"):
        create_codec_app(tokenless, cors_origin=args.cors_origin, host=args.host)


def _scrape_targets(prometheus: dict[str, Any]) -> set[tuple[str, int]]:
    """(host, port) of every static target and every DNS-discovered name (what finds all replicas)."""
    targets = set()
    for job in prometheus.get("scrape_configs", []):
        for static in job.get("static_configs", []):
            for target in static.get("targets", []):
                host, port = target.rsplit(":", 1)
                targets.add((host, int(port)))
        for dns in job.get("dns_sd_configs", []):
            targets |= {(host, int(dns["port"])) for host in dns["names"]}
    return targets


def test_prometheus_scrapes_every_worker_service() -> None:
    mounts = {
        source: target
        for source, target, *_mode in (entry.split(":") for entry in SERVICES["prometheus"]["volumes"])
        if source.startswith(".")
    }
    assert mounts == {
        "./ops/prometheus/prometheus.yml": "/etc/prometheus/prometheus.yml",
        "./ops/prometheus/alerts.yml": "/etc/prometheus/alerts.yml",
    }
    assert published("prometheus") == {9090: 9090}
    assert (REPO / "ops/prometheus/alerts.yml").is_file()
    prometheus = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    targets = _scrape_targets(prometheus)
    for host, port in targets:
        if host not in ("localhost", "127.0.0.1"):  # Prometheus itself
            assert host in SERVICES and port == METRICS_PORT, f"scrape target {host}:{port}"
    assert set(WORKERS) <= {host for host, _port in targets}
    for rule_file in prometheus.get("rule_files", []):
        assert rule_file in mounts.values(), f"rule file {rule_file} is not mounted"


def test_every_cluster_client_exports_its_spans_to_the_trace_viewer() -> None:
    viewer = SERVICES["jaeger"]
    assert viewer["profiles"] == ["full"] and "127.0.0.1:4318:4318" in viewer["ports"]
    for name in CLUSTER_CLIENTS:
        env = environment(name)
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318", name
        assert env["OTEL_SERVICE_NAME"] == name, name


def test_minio_bucket_is_the_storage_bucket() -> None:
    bucket = created_bucket()
    assert urlparse(environment("docjobs-api")["DOCJOBS_STORAGE_URL"]).netloc == bucket
    assert SERVICES["minio-setup"]["depends_on"]["minio"]["condition"] == "service_healthy"
    assert "minio-data" in named_volumes("minio")
    for image in (SERVICES["minio"]["image"], SERVICES["minio-setup"]["image"], SERVICES["prometheus"]["image"]):
        assert ":" in image and not image.endswith(":latest"), f"{image} is not pinned"


def test_admin_tools_register_every_search_attribute() -> None:
    command = " ".join(SERVICES["temporal-admin-tools"]["command"])
    assert len(search_attributes.REGISTRATION) == len(search_attributes.ALL)
    for registration in search_attributes.REGISTRATION:
        name, kind = registration.split("=")
        assert f"--name {name} --type {kind}" in command


def makefile_list(name: str) -> set[str]:
    """The words of the Makefile's variable `name` (`NAME := ...`, continued over backslashed lines)."""
    listed = re.search(rf"^{name} := (.*?)\n(?=\S)", (REPO / "Makefile").read_text(), re.MULTILINE | re.DOTALL)
    assert listed is not None, f"the Makefile sets no {name}"
    return set(listed.group(1).replace("\\", " ").split())


def test_the_worker_image_installs_what_the_makefile_installs() -> None:
    """The image's Debian packages are exactly the Makefile's runtime set: a package the worker's stages need
    (LibreOffice, a font, a tool) cannot be left out of one of them, and what only the tests use (chromium for the
    API docs page, openssl) is in neither."""
    dockerfile = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    commands = re.findall(r"apt-get install ([^&\n]*)", dockerfile)
    assert len(commands) == 1, commands
    installed = {word for word in commands[0].split() if not word.startswith("-")}
    runtime, tests = makefile_list("RUNTIME_PACKAGES"), makefile_list("TEST_PACKAGES")
    assert installed == runtime
    assert {"chromium", "openssl"} <= tests and not tests & runtime
    # Every target installs the runtime set (and the venv's package); only the test targets add the test set.
    makefile = (REPO / "Makefile").read_text()
    assert "$(call apt_install,$(RUNTIME_PACKAGES) $(VENV_PACKAGES))" in makefile
    assert "$(call apt_install,$(TEST_PACKAGES))" in makefile
    assert "pip install --no-cache-dir -r requirements.txt" in dockerfile and "requirements-dev" not in dockerfile
