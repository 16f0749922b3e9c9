"""docker-compose.temporal.yml cannot run here (no Docker engine): check it is consistent with docjobs."""

from __future__ import annotations

import os
import re
from pathlib import Path
from unittest import mock

import yaml

from docjobs import config, search_attributes
from docjobs.config import Settings
from tests.conftest import REPO

COMPOSE = yaml.safe_load((REPO / "docker-compose.temporal.yml").read_text())
KNOWN_SETTINGS = set(re.findall(r'"(DOCJOBS_[A-Z_]+)"', Path(config.__file__).read_text()))


def test_services_and_dependencies() -> None:
    services = COMPOSE["services"]
    assert {"postgresql", "temporal", "temporal-ui", "temporal-admin-tools", "docjobs-worker"} <= services.keys()
    for name, service in services.items():
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown {dependency}"
        for volume in service.get("volumes", []):
            assert volume.split(":")[0] in COMPOSE["volumes"], f"{name} mounts undeclared {volume}"
    assert "7233:7233" in services["temporal"]["ports"]
    assert services["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgresql"


def test_worker_environment_is_docjobs_configuration(tmp_path: Path) -> None:
    worker = COMPOSE["services"]["docjobs-worker"]
    environment = {key: str(value) for key, value in worker["environment"].items()}
    assert set(environment) <= KNOWN_SETTINGS
    with mock.patch.dict(os.environ, environment, clear=True):
        settings = Settings.from_env()
    assert settings.address == "temporal:7233" and not settings.embedded
    assert settings.storage_url.startswith(f"file://{environment['DOCJOBS_DATA_DIR']}/")
    settings.blob_store()  # a usable store, not just a string
    mounted = {volume.split(":")[1] for volume in worker["volumes"]}
    assert environment["DOCJOBS_DATA_DIR"] in mounted  # blobs live on the shared volume
    assert worker["command"] == ["python", "worker.py"]
    assert (REPO / worker.get("build", ".")).joinpath("Dockerfile").is_file()


def test_admin_tools_register_every_search_attribute() -> None:
    command = " ".join(COMPOSE["services"]["temporal-admin-tools"]["command"])
    for key in search_attributes.ALL:
        assert f"--name {key.name} --type Keyword" in command
